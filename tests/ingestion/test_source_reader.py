"""The Spark data path on a corpus of bad input: nothing crashes, nothing vanishes."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.ingestion.source_files import inspect_source
from resources.ingestion.source_reader import MAX_READ_BYTES, SourceReader
from resources.streams import load_streams


def good(i: int, at: str, amount: float = 1.5) -> str:
    return json.dumps({"event_id": f"e{i}", "user_id": "u", "amount": amount, "event_time": at})


@pytest.fixture
def config(tmp_path: Path):
    streams = tmp_path / "streams.yaml"
    streams.write_text(
        """
streams:
  ev:
    source: file://src
    format: jsonl
    schema: {event_id: string, user_id: string, amount: double, event_time: timestamp}
    event_time: event_time
    timezone: America/New_York
    record_id: event_id
    table: file://lake/ev
"""
    )
    return load_streams(streams)["ev"]


def corpus(d: Path) -> dict[str, Path]:
    d.mkdir()
    lines = [
        good(1, "2026-01-01T10:00:00Z"),
        good(2, "2026-01-03T03:30:00Z"),  # 22:30 on Jan 2 in New York: crosses midnight
        '{"event_id": "e3", "amount": 2',  # truncated
        json.dumps({"event_id": "e4", "amount": "abc", "event_time": "2026-01-01T00:00:00Z"}),
        json.dumps({"event_id": "e5", "amount": 1.0}),  # no event time
        json.dumps({"amount": 1.0, "event_time": "2026-01-01T12:00:00Z"}),  # no record id
        "",
        good(6, "2026-01-02T15:00:00Z"),
    ]
    (d / "mixed 1,[a]|b.jsonl").write_text("\n".join(lines) + "\n")
    (d / "utf8.jsonl").write_bytes(
        good(7, "2026-01-01T15:00:00Z").encode()
        + b"\n"
        + b'{"event_id": "e8\xff\xfe", "event_time": "2026-01-01T15:00:00Z"}\n'
    )
    (d / "empty.jsonl").write_text("")
    (d / "fake.jsonl.gz").write_text(good(9, "2026-01-01T15:00:00Z"))
    with gzip.open(d / "real.jsonl.gz", "wt") as f:
        f.write(good(10, "2026-01-01T15:00:00Z") + "\n" + good(11, "2026-01-03T15:00:00Z"))
    (d / "corrupt.jsonl.gz").write_bytes(gzip.compress(good(12, "x").encode())[:-12])
    return {p.name: p for p in sorted(d.iterdir())}


# The whole batch as one read with its rows to the driver as Arrow; and each object as a read
# of its own, too big for that, so through local Parquet.
READS = pytest.mark.parametrize("max_read_bytes", [MAX_READ_BYTES, 1], ids=["arrow", "parquet"])


@READS
def test_bad_input_is_quarantined_with_reasons_and_counted(
    spark, config, tmp_path: Path, max_read_bytes: int
) -> None:
    files = corpus(tmp_path / "src")
    results = SourceReader(spark, config, max_read_bytes).read(files, tmp_path / "stage", "a1")

    mixed = results["mixed 1,[a]|b.jsonl"]
    assert mixed.unreadable is None
    assert (mixed.rows_read, mixed.rows_quarantined) == (7, 4)  # the blank line is no record
    by_dt = {f.dt: f for f in mixed.table_files}
    assert {dt: f.row_count for dt, f in by_dt.items()} == {
        "2026-01-01": 1,
        "2026-01-02": 2,  # e2 (moved across midnight by the time zone) and e6
    }
    day2 = pq.read_table(by_dt["2026-01-02"].local_path).to_pylist()
    assert sorted(r["event_id"] for r in day2) == ["e2", "e6"]
    chunk = pq.ParquetFile(by_dt["2026-01-02"].local_path).metadata.row_group(0)
    dictionary = {
        chunk.column(i).path_in_schema: chunk.column(i).has_dictionary_page
        for i in range(chunk.num_columns)
    }  # repeated strings only: not the record id, not numbers or times
    assert dictionary == {
        "event_id": False,
        "user_id": True,
        "amount": False,
        "event_time": False,
    }
    assert all(f.local_path.name.startswith("a1-") for f in mixed.table_files)
    (quarantine,) = mixed.quarantine_files
    rows = sorted(pq.read_table(quarantine.local_path).to_pylist(), key=lambda r: r["line"])
    assert [(r["line"], r["reason"]) for r in rows] == [
        (3, "invalid JSON (truncated or malformed)"),
        (4, "wrong type for amount: expected double"),
        (5, "missing event time"),
        (6, "missing record id"),
    ]
    assert {r["source_key"] for r in rows} == {"mixed 1,[a]|b.jsonl"}
    assert rows[0]["raw"] == '{"event_id": "e3", "amount": 2'

    utf8 = results["utf8.jsonl"]
    assert (utf8.rows_read, utf8.rows_quarantined) == (2, 1)
    (bad,) = pq.read_table(utf8.quarantine_files[0].local_path).to_pylist()
    assert bad["reason"] == "invalid UTF-8" and bad["line"] == 2

    assert results["empty.jsonl"].rows_read == 0 and results["empty.jsonl"].unreadable is None
    assert results["fake.jsonl.gz"].unreadable == "named .gz but is not gzip data"
    assert results["corrupt.jsonl.gz"].unreadable.startswith("corrupt gzip")
    real = results["real.jsonl.gz"]
    assert real.rows_read == 2 and sorted(f.dt for f in real.table_files) == [
        "2026-01-01",
        "2026-01-03",
    ]
    for result in results.values():
        written = sum(f.row_count for f in result.table_files)
        assert result.rows_read == written + result.rows_quarantined
        for f in result.table_files:  # the same types whichever way the rows came
            assert pq.read_schema(f.local_path).field("event_time").type == pa.timestamp(
                "us", tz="UTC"
            )


def written(rows: list[list[str]], lineterminator: str = "\r\n") -> str:
    """`rows` as Python's csv module writes them (RFC 4180: quoted as needed, CRLF)."""
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator=lineterminator).writerows(rows)
    return out.getvalue()


CSV_STREAM = """
streams:
  c:
    source: file://src
    format: csv
    schema: {id: string, name: string, n: long, amount: double, ok: boolean, at: timestamp}
    event_time: at
    record_id: id
    table: file://lake/c
"""
CSV_HEADER = ["id", "name", "n", "amount", "ok", "at"]
CSV_GOOD = [
    ["x1", "Smith, John", "5", "1.25", "true", "2026-01-01T01:00:00Z"],
    ["x2", 'O"Brien', "-7", "1e3", "false", "2026-01-01T11:00:00+02:00"],
    ["x3", 'two\r\nlines, one "quoted"', "", "", "", "2026-01-02 03:04:05"],
    ["x4", "ünï\nbare LF", "0", "0.5", "TRUE", "2026-01-02T00:00:00Z"],
]
CSV_WANT = {
    "x1": ("Smith, John", 5, 1.25, True, "2026-01-01T01:00:00"),
    "x2": ('O"Brien', -7, 1000.0, False, "2026-01-01T09:00:00"),
    "x3": ('two\r\nlines, one "quoted"', None, None, None, "2026-01-02T03:04:05"),
    "x4": ("ünï\nbare LF", 0, 0.5, True, "2026-01-02T00:00:00"),
}


@READS
def test_csv_as_real_tools_write_it(spark, tmp_path: Path, max_read_bytes: int) -> None:
    """Objects written by Python's csv module: every record once with its values as written
    (quoted delimiters, doubled quotes, line breaks inside quotes), columns by name whatever
    the header's order, bad records quarantined with their exact line and text."""
    streams = tmp_path / "streams.yaml"
    streams.write_text(CSV_STREAM)
    config = load_streams(streams)["c"]
    src = tmp_path / "src"
    src.mkdir()
    bad = [
        ["b1", "wrong, type", "notanumber", "1", "true", "2026-01-01T00:00:00Z"],
        ["b2", "no time", "1", "1", "true", ""],
        ["", "no id", "1", "1", "true", "2026-01-01T00:00:00Z"],
        ["b4", "not a boolean", "1", "1", "maybe", "2026-01-01T00:00:00Z"],
    ]
    text = written([CSV_HEADER, *CSV_GOOD[:2], bad[0], CSV_GOOD[2], *bad[1:]])
    text += "b5,too,many,fields,1,true,2026-01-01T00:00:00Z\r\n"
    text += '\r\nb6,"unclosed,1,1,true,2026-01-01T00:00:00Z\r\n'
    (src / "a.csv").write_bytes(("\ufeff" + text).encode())
    order = [5, 3, 0, 4, 1, 2]  # another header order, LF, gzip
    (src / "b.csv.gz").write_bytes(
        gzip.compress(
            written([[row[i] for i in order] for row in (CSV_HEADER, CSV_GOOD[3])], "\n").encode()
        )
    )
    (src / "dup.csv").write_text("id,at,id\n1,2026-01-01T00:00:00Z,2\n")
    (src / "empty.csv").write_text("")
    files = {p.name: p for p in sorted(src.iterdir())}
    results = SourceReader(spark, config, max_read_bytes).read(files, tmp_path / "st", "b")

    rows = {
        r["id"]: r
        for result in results.values()
        for f in result.table_files
        for r in pq.read_table(f.local_path).to_pylist()
    }
    got = {
        i: (r["name"], r["n"], r["amount"], r["ok"], r["at"].replace(tzinfo=None).isoformat())
        for i, r in rows.items()
    }
    assert got == CSV_WANT
    a = results["a.csv"]
    assert (a.rows_read, a.rows_quarantined) == (9, 6)  # the blank line is no record
    quarantined = pq.read_table(a.quarantine_files[0].local_path).to_pylist()
    raw = [written([row]).removesuffix("\r\n") for row in bad]
    lines = text.split("\r\n")  # x3's quoted CRLF makes lines 5 and 6
    assert sorted((r["line"], r["reason"], r["raw"]) for r in quarantined) == [
        (4, "wrong type for n: expected long", raw[0]),
        (7, "missing event time", raw[1]),
        (8, "missing record id", raw[2]),
        (9, "wrong type for ok: expected boolean", raw[3]),
        (10, "CSV record has 7 fields, the header has 6", lines[9]),
        (12, "unclosed quote", lines[11]),
    ]
    assert {r["source_key"] for r in quarantined} == {"a.csv"}
    assert results["b.csv.gz"].rows_read == 1
    assert results["dup.csv"].unreadable == "the CSV header (line 1) names ['id'] more than once"
    assert results["empty.csv"].rows_read == 0 and results["empty.csv"].unreadable is None


def test_inspect_source_names_unreadable_objects_and_counts_text(tmp_path: Path) -> None:
    reason, _ = inspect_source(tmp_path / "missing.jsonl")
    assert reason is not None and reason.startswith("cannot open")
    ok = tmp_path / "ok.jsonl"
    ok.write_text("{}")
    assert inspect_source(ok) == (None, 2)
    zipped = tmp_path / "ok.jsonl.gz"
    zipped.write_bytes(gzip.compress(b"{}\n" * 1000))
    assert inspect_source(zipped) == (None, 3000)  # what Spark will read, not the file size


@READS
def test_an_object_split_across_tasks_loses_nothing_and_numbers_its_bad_lines(
    spark, config, tmp_path: Path, max_read_bytes: int
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    lines = [good(i, f"2026-01-0{1 + i % 3}T12:00:00Z") for i in range(3000)]
    lines[9] = lines[2998] = '{"event_id": "truncated'  # the same bad text twice
    lines[1499] = json.dumps({"event_id": "e1499", "amount": 1.0})  # no event time
    (src / "big.jsonl").write_text("\r\n".join(lines) + "\r\n")
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "8192")  # ~40 tasks for this object
    try:
        reader = SourceReader(spark, config, max_read_bytes)
        (big,) = reader.read({"big.jsonl": src / "big.jsonl"}, tmp_path / "stage", "a1").values()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)

    assert (big.rows_read, big.rows_quarantined) == (3000, 3)
    if max_read_bytes == MAX_READ_BYTES:  # the tasks' rows come as one table: one per date
        assert sorted(f.dt for f in big.table_files) == ["2026-01-01", "2026-01-02", "2026-01-03"]
    else:  # one table per task's Parquet output: several objects per date
        assert len(big.table_files) > 3
    assert len({f.local_path for f in big.table_files}) == len(big.table_files)
    objects = [pq.read_table(f.local_path).column("event_id").to_pylist() for f in big.table_files]
    for ids in objects:  # in the order of the source object
        assert [int(i[1:]) for i in ids] == sorted(int(i[1:]) for i in ids)
    ids = [i for object_ids in objects for i in object_ids]
    assert sorted(ids) == sorted(f"e{i}" for i in range(3000) if i not in (9, 1499, 2998))
    (quarantine,) = big.quarantine_files
    rows = sorted(pq.read_table(quarantine.local_path).to_pylist(), key=lambda r: r["line"])
    assert [(r["line"], r["reason"]) for r in rows] == [
        (10, "invalid JSON (truncated or malformed)"),
        (1500, "missing event time"),
        (2999, "invalid JSON (truncated or malformed)"),
    ]


def test_json_arrays_and_byte_order_marks_read_as_spark_reads_them(
    spark, config, tmp_path: Path
) -> None:
    """Spark's JSON reader takes a line holding an array as one record per element and skips a
    byte-order mark; a record that then fails a check is still quarantined with its line."""
    src = tmp_path / "src"
    src.mkdir()
    no_time = {"event_id": "nt", "amount": 1.0}
    lines = [
        good(1, "2026-01-01T12:00:00Z"),
        f"[{good(2, '2026-01-01T12:00:00Z')}, {good(3, '2026-01-02T12:00:00Z')}]",
        "[]",
        json.dumps([no_time, json.loads(good(4, "2026-01-01T12:00:00Z"))]),
        "\ufeff" + good(5, "2026-01-01T12:00:00Z"),
        "\ufeff" + json.dumps(no_time),
        "[1, 2]",
    ]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = {"a.jsonl": src / "a.jsonl"}
    (result,) = SourceReader(spark, config).read(files, tmp_path / "st", "c").values()

    assert (result.rows_read, result.rows_quarantined) == (8, 3)
    ids = [
        r["event_id"] for f in result.table_files for r in pq.read_table(f.local_path).to_pylist()
    ]
    assert sorted(ids) == ["e1", "e2", "e3", "e4", "e5"]
    rows = pq.read_table(result.quarantine_files[0].local_path).to_pylist()
    assert sorted((r["line"], r["reason"], r["raw"]) for r in rows) == [
        (4, "missing event time", lines[3]),
        (6, "missing event time", lines[5]),
        (7, "invalid JSON (truncated or malformed)", lines[6]),
    ]


def test_dates_before_1970_are_dates_like_any_other(spark, config, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    lines = [good(1, "1969-12-31T20:00:00Z"), good(2, "1970-01-01T12:00:00Z")]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    (result,) = (
        SourceReader(spark, config)
        .read({"a.jsonl": src / "a.jsonl"}, tmp_path / "st", "d")
        .values()
    )

    assert (result.rows_read, result.rows_quarantined) == (2, 0)
    # in New York, the table's time zone: 15:00 on Dec 31 and 07:00 on Jan 1
    assert sorted(f.dt for f in result.table_files) == ["1969-12-31", "1970-01-01"]


@READS
def test_a_unit_is_cut_into_one_object_per_date_and_one_quarantine_object(
    spark, config, tmp_path: Path, max_read_bytes: int
) -> None:
    """Grouped by work unit: the unit's good rows per date in one object (its objects' rows in
    their order), its bad records in one quarantine object that still names each record's
    source key and line; an unreadable member is reported by name, the others are read."""
    files = corpus(tmp_path / "src")
    groups = {key: "unit" for key in files}
    results = SourceReader(spark, config, max_read_bytes).read(
        files, tmp_path / "stage", "a1", groups
    )
    (unit,) = results.values()
    assert unit.unreadable is None
    assert unit.failed == {
        "fake.jsonl.gz": "named .gz but is not gzip data",
        "corrupt.jsonl.gz": unit.failed["corrupt.jsonl.gz"],
    }
    assert unit.failed["corrupt.jsonl.gz"].startswith("corrupt gzip")
    per_date = {f.dt: f for f in unit.table_files}
    if max_read_bytes == MAX_READ_BYTES:  # one read: exactly one object per date
        assert len(per_date) == len(unit.table_files)
    ids = sorted(
        r["event_id"] for f in unit.table_files for r in pq.read_table(f.local_path).to_pylist()
    )
    assert ids == ["e1", "e10", "e11", "e2", "e6", "e7"]
    if max_read_bytes == MAX_READ_BYTES:  # one read: one quarantine object (one per read)
        assert len(unit.quarantine_files) == 1
    rows = [r for f in unit.quarantine_files for r in pq.read_table(f.local_path).to_pylist()]
    assert {(r["source_key"], r["line"]) for r in rows} == {
        ("mixed 1,[a]|b.jsonl", 3),
        ("mixed 1,[a]|b.jsonl", 4),
        ("mixed 1,[a]|b.jsonl", 5),
        ("mixed 1,[a]|b.jsonl", 6),
        ("utf8.jsonl", 2),
    }
    assert (unit.rows_read, unit.rows_quarantined) == (11, 5)
