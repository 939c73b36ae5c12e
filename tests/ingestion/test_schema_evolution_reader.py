"""The reader meets fields its schema does not hold: each mode's answer, read back exactly
(Spark tasks parse and write; the driver records new schema versions)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from resources.ingestion.split_task import StoreAddress
from resources.ingestion.task_reader import TaskReader
from resources.ingestion.work_units import UnitObject
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import read_version
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.stores.stream_schema import followed_config
from resources.streams import load_streams


def stream(tmp_path: Path, mode: str):
    streams = tmp_path / "streams.yaml"
    streams.write_text(
        f"""
streams:
  ev:
    source: file://src
    format: jsonl
    schema: {{id: string, ts: timestamp, user: string, value: long}}
    event_time: ts
    record_id: id
    table: file://lake/ev
    schema_evolution: {mode}
"""
    )
    return load_streams(streams)["ev"]


def rec(i: int, **extra: object) -> str:
    return json.dumps(
        {"id": f"r{i}", "ts": "2026-01-01T10:00:00Z", "user": "u", "value": i, **extra}
    )


def drifting(d: Path) -> dict[str, Path]:
    d.mkdir()
    (d / "a.jsonl").write_text("\n".join(rec(i) for i in range(3)) + "\n")
    (d / "b.jsonl").write_text(
        rec(3)
        + "\n"
        + rec(4, country="NZ", device={"os": "ios", "v": [1, 2]})
        + "\n"
        + rec(5, country="FR", score=1)
        + "\n"
        + rec(6, score=2.5)
        + "\n"
    )
    return {p.name: p for p in sorted(d.iterdir())}


@pytest.fixture
def sqlite_store(tmp_path: Path):
    store = build_store(StoreSettings(backend="sqlite", sqlite_path=str(tmp_path / "s.db")))
    yield store
    store.close_store()


def reader_of(spark, config, tmp_path: Path, record_schema) -> TaskReader:
    """A run's reader: `files`' directory as the source, the lake under `tmp_path`."""
    stores = StoreAddress(config.source, f"file://{tmp_path}/lake", f"file://{tmp_path}/q")
    return TaskReader(spark, config, stores, record_schema=record_schema)


def as_unit(files: dict[str, Path]) -> dict[str, list[UnitObject]]:
    return {"unit": [UnitObject(k, p.stat().st_size) for k, p in files.items()]}


def read(spark, store, config, files, tmp_path):
    config = followed_config(store, config)
    reader = reader_of(
        spark,
        config,
        tmp_path,
        lambda cols, origin: store.record_schema(config.name, cols, origin),
    )
    return reader, reader.read(as_unit(files), "a1")


def read_drifting(spark, store, tmp_path: Path, mode: str):
    """The drifting corpus read as one unit under `mode`: (reader, the unit's result)."""
    files = drifting(tmp_path / "src")
    reader, results = read(spark, store, stream(tmp_path, mode), files, tmp_path)
    (result,) = results.values()
    return reader, result


def path_of(url: str) -> str:
    return url.removeprefix("file://")


def rows_of(result) -> list[dict]:
    rows = []
    for f in result.table_files:
        rows += pq.read_table(path_of(f.url)).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def test_add_appends_new_fields_as_typed_columns_and_the_unit_commits_with_them(
    spark, sqlite_store, tmp_path: Path
) -> None:
    reader, result = read_drifting(spark, sqlite_store, tmp_path, "add")
    versions = sqlite_store.schema_versions("ev")
    assert [v.version for v in versions] == [1, 2]
    assert versions[1].added == ("country", "device", "score")
    assert {c.name: c.type for c in versions[1].columns}["score"] == "double"
    assert versions[1].origin.object_key == "b.jsonl" and versions[1].origin.line == 2
    assert versions[1].origin.unit == "unit"
    assert result.schema_version == 2 and result.new_columns == ["country", "device", "score"]
    rows = rows_of(result)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(7)]
    assert rows[0].get("country") is None and rows[4]["country"] == "NZ"
    assert json.loads(rows[4]["device"]) == {"os": "ios", "v": [1, 2]}
    assert rows[5]["score"] == 1.0 and rows[6]["score"] == 2.5
    # The part holding the new fields was read again with version 2, written with it only.
    versions_written = {read_version(pq.read_schema(path_of(f.url))) for f in result.table_files}
    assert versions_written == {2}
    assert reader.config.schema_version == 2


def test_a_new_value_type_for_an_added_column_is_quarantined_never_cast(
    spark, sqlite_store, tmp_path: Path
) -> None:
    config = stream(tmp_path, "add")
    d = tmp_path / "src"
    d.mkdir()
    (d / "a.jsonl").write_text(rec(1, score=1) + "\n")
    read(spark, sqlite_store, config, {"a.jsonl": d / "a.jsonl"}, tmp_path / "1")
    (d / "b.jsonl").write_text(rec(2, score="high") + "\n" + rec(3, score=2) + "\n")
    _, results = read(spark, sqlite_store, config, {"b.jsonl": d / "b.jsonl"}, tmp_path / "2")
    (result,) = results.values()
    assert [v.version for v in sqlite_store.schema_versions("ev")] == [1, 2]
    assert [r["id"] for r in rows_of(result)] == ["r3"]
    assert result.rows_quarantined == 1
    (q,) = result.quarantine_files
    assert pq.read_table(path_of(q.url)).column("reason").to_pylist() == [
        "wrong type for score: expected long"
    ]


def test_fail_keeps_objects_with_new_fields_out_naming_fields_lines_and_the_setting(
    spark, sqlite_store, tmp_path: Path
) -> None:
    _, result = read_drifting(spark, sqlite_store, tmp_path, "fail")
    assert [v.version for v in sqlite_store.schema_versions("ev")] == [1]
    assert [r["id"] for r in rows_of(result)] == ["r0", "r1", "r2"]  # a.jsonl only
    why = result.failed["b.jsonl"]
    assert "country (string, first at line 2)" in why and "score (double, first at line 3)" in why
    assert "schema_evolution" in why and "add" in why


def test_ignore_leaves_fields_out_and_counts_them_by_name(
    spark, sqlite_store, tmp_path: Path
) -> None:
    _, result = read_drifting(spark, sqlite_store, tmp_path, "ignore")
    assert [v.version for v in sqlite_store.schema_versions("ev")] == [1]
    assert len(rows_of(result)) == 7 and "country" not in rows_of(result)[0]
    assert result.unknown_fields == {"country": 2, "device": 1, "score": 2}


def corpus(d: Path, objects: dict[str, list[str]]) -> dict[str, Path]:
    d.mkdir()
    for name, lines in objects.items():
        (d / name).write_text("\n".join(lines) + "\n")
    return {name: d / name for name in objects}


def test_fields_an_object_starts_with_are_read_at_once_typed_by_every_record(
    spark, sqlite_store, tmp_path: Path
) -> None:
    """The first records' fields are read with the batch as guessed columns; the exact check
    still types each by every value, and reads again only the objects the guess got wrong."""
    files = corpus(
        tmp_path / "src",
        {
            "a.jsonl": [rec(0), rec(1)],
            "b.jsonl": [rec(2, score=1), rec(3, score=2.5)],  # long, then double
            "c.jsonl": [rec(4, level=1), rec(5, level="high")],  # long, then text
            "d.jsonl": [
                rec(6, ratio=0.5),
                '{"id": "r7", "ts": "2026-01-01T10:00:00Z", '
                '"user": "u", "value": 7, "ratio": "NaN"}',
            ],  # Spark reads "NaN" as a double
            "e.jsonl": [rec(8, country="NZ"), rec(9, country="FR", zone=3)],  # zone unguessed
        },
    )
    _, results = read(spark, sqlite_store, stream(tmp_path, "add"), files, tmp_path)
    (result,) = results.values()
    (_, version) = sqlite_store.schema_versions("ev")
    assert {c.name: c.type for c in version.columns if c.name in version.added} == {
        "score": "double",
        "level": "string",
        "ratio": "string",
        "country": "string",
        "zone": "long",
    }
    assert version.origin.object_key == "b.jsonl" and version.origin.line == 1
    assert result.rows_quarantined == 0 and result.unknown_fields == {}
    rows = {r["id"]: r for r in rows_of(result)}
    assert [rows[f"r{i}"]["score"] for i in (2, 3)] == [1.0, 2.5]
    assert [rows[f"r{i}"]["level"] for i in (4, 5)] == ["1", "high"]
    assert [rows[f"r{i}"]["ratio"] for i in (6, 7)] == ["0.5", "NaN"]
    assert [rows[f"r{i}"]["zone"] for i in (8, 9)] == [None, 3]
    assert rows["r0"]["country"] is None and rows["r9"]["country"] == "FR"


def test_a_guessed_column_another_run_recorded_with_another_type_keeps_that_type(
    spark, sqlite_store, tmp_path: Path
) -> None:
    files = corpus(tmp_path / "src", {"a.jsonl": [rec(0, code="NZ"), rec(1, code=7)]})
    config = followed_config(sqlite_store, stream(tmp_path, "add"))

    def record_after_another_run(cols, origin):
        sqlite_store.record_schema("ev", [ColumnSpec("code", "long")], origin)
        return sqlite_store.record_schema("ev", cols, origin)

    reader = reader_of(spark, config, tmp_path, record_after_another_run)
    (result,) = reader.read(as_unit(files), "a1").values()
    assert [c.type for c in sqlite_store.schema_versions("ev")[-1].columns][-1] == "long"
    assert [(r["id"], r["code"]) for r in rows_of(result)] == [("r1", 7)]
    (q,) = result.quarantine_files
    assert pq.read_table(path_of(q.url)).column("reason").to_pylist() == [
        "wrong type for code: expected long"
    ]


def test_rescue_keeps_every_record_and_puts_unknown_fields_and_uncastable_values_in_rescued(
    spark, sqlite_store, tmp_path: Path
) -> None:
    config = stream(tmp_path, "rescue")
    files = drifting(tmp_path / "src")
    (files["b.jsonl"]).write_text(
        files["b.jsonl"].read_text()
        + rec(7, value="seven")
        + "\n"
        + '[{"id": "r8", "ts": "2026-01-01T11:00:00Z", "value": 8, "tag": null}]\n'
        + '{"id": "r9", "ts": \n'
    )
    _, results = read(spark, sqlite_store, config, files, tmp_path)
    (result,) = results.values()
    versions = sqlite_store.schema_versions("ev")
    assert [v.version for v in versions] == [1]
    assert versions[0].names[-1] == "_rescued"
    rows = {r["id"]: r for r in rows_of(result)}
    assert sorted(rows) == [f"r{i}" for i in range(9)]
    assert rows["r0"]["_rescued"] is None
    assert json.loads(rows["r4"]["_rescued"]) == {
        "country": "NZ",
        "device": {"os": "ios", "v": [1, 2]},
    }
    assert json.loads(rows["r6"]["_rescued"]) == {"score": 2.5}
    assert rows["r7"]["value"] is None and json.loads(rows["r7"]["_rescued"]) == {"value": "seven"}
    assert rows["r8"]["value"] == 8 and rows["r8"]["_rescued"] is None
    assert result.rows_quarantined == 1  # the line that is not JSON
