"""A large object read and committed in chunks at line boundaries: each chunk one fenced
transaction with the offset reached; a failure between chunks resumes at the committed offset
(plain text by seeking, gzip by decompressing up to it again) — every record exactly once, and
quarantine line numbers counted in the whole object. Real Spark, both store backends."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from resources.coordination.items import PartitionStatus
from resources.coordination.lease import LeaseTiming
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.outcomes import COMMITTED, FAILED
from resources.ingestion.runner import IngestionRunner
from resources.ingestion.source_files import cut_chunk
from resources.ingestion.split_task import StoreAddress
from resources.ingestion.task_reader import TaskReader
from resources.ingestion.unit_progress import quarantine_table
from resources.ingestion.work_units import UnitObject, WorkUnit
from resources.objects.local import LocalObjectStore
from resources.streams import StreamConfig, load_streams
from tests.support.fakes import fail_nth_commit

STREAM = "events"


def test_chunks_end_at_line_ends_and_count_lines(tmp_path: Path) -> None:
    text = b"".join(b"line %03d\n" % i for i in range(1, 21))  # 9 bytes a line
    for name, data in (("plain.txt", text), ("packed.txt.gz", gzip.compress(text))):
        source = tmp_path / name
        source.write_bytes(data)
        got, offset, line, last, cuts = b"", 0, 1, False, []
        while not last:
            cut = cut_chunk(source, offset, line, 40, tmp_path / "c" / name)
            chunk = cut.path.read_bytes()
            assert chunk.endswith(b"\n") and chunk.startswith(b"line %03d" % line)
            assert cut.first_line == line
            got += chunk
            offset, line, last = cut.offset, cut.line, cut.last
            cuts.append(line)
        assert got == text and cuts == [6, 11, 16, 21]


def test_a_csv_chunk_after_the_first_gets_the_header_again(tmp_path: Path) -> None:
    source = tmp_path / "t.csv"
    source.write_bytes(b"id,at\n" + b"".join(b"%d,x\n" % i for i in range(10)))
    first = cut_chunk(source, 0, 1, 10, tmp_path / "a.csv", CsvFormat())
    assert first.path.read_bytes() == b"id,at\n0,x\n" and first.line == 3
    second = cut_chunk(source, first.offset, first.line, 5, tmp_path / "b.csv", CsvFormat())
    assert second.path.read_bytes() == b"id,at\n1,x\n2,x\n" and second.first_line == 3
    assert (first.header_lines, second.header_lines) == (0, 1)


def runner_of(
    store: LeaseStore, spark: object, config: StreamConfig, tmp_path: Path, commit_every_bytes: int
) -> Callable[[], IngestionRunner]:
    """Runners as a run builds them: the Spark tasks read the source and write the lake."""
    stores = StoreAddress(config.source, config.table, config.quarantine)

    def runner() -> IngestionRunner:
        reader = TaskReader(spark, config, stores)
        return IngestionRunner(
            stream=STREAM,
            table=STREAM,
            store=store,
            owner="run",
            timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
            read_batch=reader.read,
            read_large=lambda unit, obj, reached, attempt: reader.read_large(
                unit, obj, reached, commit_every_bytes, attempt
            ),
            commit_every_bytes=commit_every_bytes,
        )

    return runner


def record(i: int) -> str:
    return json.dumps(
        {
            "event_id": f"e{i:05d}",
            "user_id": "u",
            "amount": 1.0,
            "event_time": f"2026-01-{1 + i % 3:02d}T10:00:00Z",
        }
    )


@pytest.fixture
def config(tmp_path: Path):  # type: ignore[no-untyped-def]
    streams = tmp_path / "streams.yaml"
    streams.write_text(
        f"""
streams:
  {STREAM}:
    source: file://src
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://lake
    quarantine: file://lake/quarantine
"""
    )
    return load_streams(streams)[STREAM]


@pytest.mark.contract
@pytest.mark.parametrize("name", ["big.jsonl", "big.jsonl.gz"])
def test_a_large_object_commits_chunk_by_chunk_and_resumes_at_the_offset(
    store: LeaseStore, spark, config, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [record(i) for i in range(300)]
    bad = {57: "{not json", 211: '{"event_id": "x"}'}  # quarantined, numbered in the object
    for n, text in bad.items():
        lines[n - 1] = text
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    size = path.stat().st_size
    sid = store.source_identifier(STREAM)
    unit = WorkUnit(name, (UnitObject(name, size),))
    store.create_partitions(sid, [name], progress_states=[unit.progress_state()])
    lake = LocalObjectStore(tmp_path / "lake")
    # ~40 lines a chunk: 8 chunks (a gzip object counts as large by its listed size)
    runner = runner_of(store, spark, config, tmp_path, commit_every_bytes=min(4000, size - 1))

    commits = fail_nth_commit(monkeypatch, store, 4)
    (failed,) = runner().ingest([name])
    assert failed.outcome == FAILED
    reached = json.loads(store.get(sid, name).progress_state)["chunk"]  # type: ignore[union-attr]
    assert 0 < reached["offset"] < len(data) and reached["line"] > 1
    store.clock = lambda: 10**10  # type: ignore[attr-defined]  # a later run takes it over
    (done,) = runner().ingest([name])
    assert done.outcome == COMMITTED, done.message
    assert commits["n"] >= 8
    item = store.get(sid, name)
    assert item.status is PartitionStatus.COMPLETED  # type: ignore[union-attr]

    def column(table: str, col: str) -> list:  # type: ignore[type-arg]
        values = []
        for obj in store.ledger_objects(table):  # type: ignore[attr-defined]
            values += pq.read_table(lake.local_copy(lake.key_of(obj.url), tmp_path)).column(col)
        return [v.as_py() for v in values]

    ids = Counter(column(STREAM, "event_id"))
    assert ids == Counter(f"e{i - 1:05d}" for i in range(1, 301) if i not in bad)
    assert sorted(column(quarantine_table(STREAM), "line")) == sorted(bad)
    progress = json.loads(item.progress_state)  # type: ignore[union-attr]
    assert progress["rows_read"] == 300 and progress["rows_quarantined"] == 2


def csv_record(i: int) -> list[str]:
    """Every record holds a quoted line break (CRLF or LF) and a quoted delimiter: a chunk's
    byte budget almost always ends inside one."""
    return [f"e{i:05d}", f"u{i}, first\r\nsecond" if i % 2 else f'u "{i}"\nnext', "1.5",
            f"2026-01-{1 + i % 3:02d}T10:00:00Z"]  # fmt: skip


@pytest.mark.contract
@pytest.mark.parametrize("name", ["big.csv", "big.csv.gz"])
def test_a_large_csv_object_is_cut_at_record_boundaries_and_numbers_lines_exactly(
    store: LeaseStore, spark, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    streams = tmp_path / "streams.yaml"
    streams.write_text(
        f"""
streams:
  {STREAM}:
    source: file://src
    format: csv
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://lake
    quarantine: file://lake/quarantine
"""
    )
    config = load_streams(streams)[STREAM]
    rows = [csv_record(i) for i in range(300)]
    rows[56][3] = ""  # no event time
    out = io.StringIO(newline="")
    csv.writer(out).writerows([["event_id", "user_id", "amount", "event_time"], *rows])
    text = "\ufeff" + out.getvalue() + 'e99999,"never closed,1,2026-01-01T00:00:00Z\r\n'
    # Each record is two lines after the one-line header: record i starts at line 2 + 2i.
    bad = {2 + 2 * 56: "missing event time", 2 + 2 * 300: "unclosed quote"}
    data = text.encode()
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    size = path.stat().st_size
    sid = store.source_identifier(STREAM)
    unit = WorkUnit(name, (UnitObject(name, size),))
    store.create_partitions(sid, [name], progress_states=[unit.progress_state()])
    lake = LocalObjectStore(tmp_path / "lake")
    # ~60 records a chunk, cut mid-record
    runner = runner_of(store, spark, config, tmp_path, commit_every_bytes=min(3001, size - 1))

    commits = fail_nth_commit(monkeypatch, store, 3)
    (failed,) = runner().ingest([name])
    assert failed.outcome == FAILED
    reached = json.loads(store.get(sid, name).progress_state)["chunk"]  # type: ignore[union-attr]
    assert 0 < reached["offset"] < len(data) and reached["line"] % 2 == 0  # a record's start
    store.clock = lambda: 10**10  # type: ignore[attr-defined]  # a later run takes it over
    (done,) = runner().ingest([name])
    assert done.outcome == COMMITTED, done.message
    assert commits["n"] >= 5

    def table(name: str) -> list[dict]:  # type: ignore[type-arg]
        found = []
        for obj in store.ledger_objects(name):  # type: ignore[attr-defined]
            found += pq.read_table(lake.local_copy(lake.key_of(obj.url), tmp_path)).to_pylist()
        return found

    published = table(STREAM)
    assert Counter(r["event_id"] for r in published) == Counter(
        f"e{i:05d}" for i in range(300) if i != 56
    )
    assert all(r["user_id"] == csv_record(int(r["event_id"][1:]))[1] for r in published)
    quarantined = table(quarantine_table(STREAM))
    assert {r["line"]: r["reason"] for r in quarantined} == bad
    raws = {r["line"]: r["raw"] for r in quarantined}
    assert raws[2 + 2 * 300] == 'e99999,"never closed,1,2026-01-01T00:00:00Z'
    one = io.StringIO(newline="")
    csv.writer(one).writerow(rows[56])
    assert raws[2 + 2 * 56] == one.getvalue().removesuffix("\r\n")  # two lines, as written
