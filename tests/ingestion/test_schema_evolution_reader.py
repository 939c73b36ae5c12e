"""The reader meets fields its schema does not hold: each mode's answer, read back exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.ingestion.field_scan import holds_only_known, known_counts, scan_fields
from resources.ingestion.source_reader import MAX_READ_BYTES, SourceReader
from resources.schema.parquet_meta import read_version
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.stores.stream_schema import followed_config
from resources.streams import load_streams

READS = pytest.mark.parametrize("max_read_bytes", [MAX_READ_BYTES, 1], ids=["arrow", "parquet"])


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


def read(spark, store, config, files, tmp_path, max_read_bytes=MAX_READ_BYTES):
    config = followed_config(store, config)
    reader = SourceReader(
        spark,
        config,
        max_read_bytes,
        record_schema=lambda cols, origin: store.record_schema(config.name, cols, origin),
    )
    return reader, reader.read(files, tmp_path / "stage", "a1", {k: "unit" for k in files})


def read_drifting(spark, store, tmp_path: Path, mode: str, max_read_bytes=MAX_READ_BYTES):
    """The drifting corpus read as one unit under `mode`: (reader, the unit's result)."""
    files = drifting(tmp_path / "src")
    reader, results = read(spark, store, stream(tmp_path, mode), files, tmp_path, max_read_bytes)
    (result,) = results.values()
    return reader, result


def rows_of(result) -> list[dict]:
    rows = []
    for f in result.table_files:
        rows += pq.read_table(f.local_path).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


@READS
def test_add_appends_new_fields_as_typed_columns_and_the_unit_commits_with_them(
    spark, sqlite_store, tmp_path: Path, max_read_bytes: int
) -> None:
    reader, result = read_drifting(spark, sqlite_store, tmp_path, "add", max_read_bytes)
    versions = sqlite_store.schema_versions("ev")
    assert [v.version for v in versions] == [1, 2]
    assert versions[1].added == ("country", "device", "score")
    assert {c.name: c.type for c in versions[1].columns}["score"] == "double"
    assert versions[1].origin.object_key == "b.jsonl" and versions[1].origin.line == 2
    assert versions[1].origin.unit == "unit"
    assert result.schema_version == 2 and result.new_columns == ["country", "device", "score"]
    rows = rows_of(result)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(7)]
    # One read per object through Parquet: a.jsonl, read first, was written with version 1.
    assert rows[0].get("country") is None and rows[4]["country"] == "NZ"
    assert json.loads(rows[4]["device"]) == {"os": "ios", "v": [1, 2]}
    assert rows[5]["score"] == 1.0 and rows[6]["score"] == 2.5
    versions_written = {read_version(pq.read_schema(f.local_path)) for f in result.table_files}
    assert versions_written == ({2} if max_read_bytes == MAX_READ_BYTES else {1, 2})
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
    assert pq.read_table(q.local_path).column("reason").to_pylist() == [
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


@pytest.mark.parametrize(
    ("line", "unknown"),
    [
        ('{"id": "a", "n": 1}', False),
        ('{"id": "a", "n": null, "x": null}', False),  # a null says nothing
        ('{"id": "a", "n": 1, "x": 2}', True),
        ('{"id": "a\\": 1, \\"x", "n": 1}', False),  # a key's look inside a string
        ('{"id": "a", "n": 1, "x" : 2}', True),
        ('{"id": "a", "n": 1, "\\u0078": 2}', True),
        ('[{"id": "a", "n": 1}, {"id": "b", "x": 1}]', True),
        ('{"id": "{\\"x\\": 1}", "n": 1}', False),
    ],
)
def test_the_byte_count_proof_never_clears_an_object_holding_another_field(
    tmp_path: Path, line: str, unknown: bool
) -> None:
    path = tmp_path / "o.txt"
    path.write_text(line + "\n")
    found = scan_fields(path, {"id", "n"})
    assert bool(found.fields) == unknown
    # The known side as the read's rows give it: the known columns' values, as Spark has them.
    parsed = json.loads(line)
    records = parsed if isinstance(parsed, list) else [parsed]
    rows = pa.table(
        {
            "src": [0] * len(records),
            "id": [r.get("id") for r in records],
            "n": [r.get("n") for r in records],
            "_reason": pa.nulls(len(records), pa.string()),
        }
    )
    expected = known_counts(rows, [("id", "string"), ("n", "long")])[0]
    assert holds_only_known(path, expected) == (not unknown)  # these clean ones it clears


@READS
def test_rescue_keeps_every_record_and_puts_unknown_fields_and_uncastable_values_in_rescued(
    spark, sqlite_store, tmp_path: Path, max_read_bytes: int
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
    _, results = read(spark, sqlite_store, config, files, tmp_path, max_read_bytes)
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
