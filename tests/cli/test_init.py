"""`leasehold init SOURCE` + `leasehold run --stream NAME`: the user's own data in one command.

The end-to-end test generates a source the way real ones look — keys with spaces, unicode and
nested date folders, gzip and plain JSON lines in one directory, CSV in another, a few
malformed lines — and holds the published table to the source: every well-formed record once,
in the partition of its event time, nothing else.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from resources.cli.init import Inferred, add_entry, check_trial, render_entry
from resources.cli.main import main
from resources.ingestion.stream_inference import SourceInferenceError
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.streams import DEFAULT_TABLE_FORMAT, load_streams

REPO = Path(__file__).resolve().parents[2]
START = datetime(2026, 3, 1, 20, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(tmp_path / "streams.yaml"))


def write_clicks(root: Path) -> dict[str, dict[str, Any]]:
    """JSON lines, mostly gzip, nested date folders, awkward names; every 13th line is cut in
    half. Returns the well-formed records by id."""
    records: dict[str, dict[str, Any]] = {}
    n = 0
    for obj in range(8):
        at = START + timedelta(hours=5 * obj)
        folder = root / at.strftime("%Y/%m/%d") / ("späte Läufe" if obj % 3 == 0 else "frühe")
        name = f"part {obj:02d} — clicks.jsonl" + ("" if obj == 5 else ".gz")
        lines = []
        for i in range(25):
            n += 1
            ts = at + timedelta(minutes=7 * i)
            record = {
                "click_id": f"c-{n:05d}",
                "user": f"ü{n % 7}",
                "ms": n * 3,
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                "meta": {"ref": f"r{n % 4}", "tags": [n % 2]},
            }
            line = json.dumps(record, ensure_ascii=False)
            if n % 13 == 0:
                line = line[: len(line) // 2]
            else:
                records[record["click_id"]] = record
            lines.append(line)
        folder.mkdir(parents=True, exist_ok=True)
        data = ("\n".join(lines) + "\n").encode()
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return records


def write_orders(root: Path) -> dict[str, dict[str, Any]]:
    """CSV with a header, offsets in the times (some cross midnight UTC), a few lines with the
    wrong number of fields."""
    records: dict[str, dict[str, Any]] = {}
    n = 0
    for obj in range(5):
        at = START + timedelta(hours=9 * obj)
        folder = root / f"dt={at:%Y-%m-%d}" / "Händler A"
        lines = ["order_id,customer,amount,paid,created_at"]
        for i in range(20):
            n += 1
            ts = (at + timedelta(minutes=11 * i)).astimezone(timezone(timedelta(hours=2)))
            row = [f"o{n:04d}", f"k{n % 5}", f"{n * 1.25:.2f}", "true" if n % 2 else "false"]
            row.append(ts.isoformat())
            if n % 17 == 0:
                lines.append(",".join(row[:3]))
            else:
                lines.append(",".join(row))
                records[row[0]] = {"amount": n * 1.25, "ts": ts}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"orders {obj} é.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return records


def published(stream: str, dates: set[str], capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """Every row of the stream's published dates, read through `leasehold table files`."""
    rows: list[dict] = []
    for dt in sorted(dates):
        assert main(["table", "files", stream, dt, "--json"]) == 0, capsys.readouterr().err
        for file in json.loads(capsys.readouterr().out)["files"]:
            table = pq.read_table(file["url"].removeprefix("file://"))
            rows += [{**row, "_dt": dt} for row in table.to_pylist()]
    return rows


def test_init_then_run_each_stream_publishes_exactly_the_good_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clicks = write_clicks(tmp_path / "sources" / "clicks ünï")
    orders = write_orders(tmp_path / "sources" / "orders csv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(REPO),
        SPARK_LOCAL_IP="127.0.0.1",
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STREAMS=str(tmp_path / "streams.yaml"),
        LEASEHOLD_SPARK_MASTER="local[2]",
    )
    commands = [
        ["init", "sources/clicks ünï"],
        ["init", str(tmp_path / "sources" / "orders csv"), "--name", "orders"],
        ["run", "--stream", "clicks_uni"],
        ["run", "--stream", "orders"],
    ]
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.cli_sequence", json.dumps(commands)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    for argv in commands:
        assert f"=== leasehold {' '.join(argv)} -> exit 0" in out
    assert "next (edit the entry first if needed): leasehold run --stream clicks_uni" in out

    streams = load_streams(tmp_path / "streams.yaml")
    assert set(streams) == {"clicks_uni", "orders"}
    click = streams["clicks_uni"]
    assert (click.format, click.event_time, click.record_id) == ("jsonl", "ts", "click_id")
    assert (click.dedupe.mode, click.dedupe.scope) == ("first", "date")  # proposed, written out
    assert "dedupe:" in (tmp_path / "streams.yaml").read_text()
    assert {c.name: c.type for c in click.columns} == {
        "click_id": "string",
        "user": "string",
        "ms": "long",
        "ts": "timestamp",
        "meta": "string",
    }
    assert click.table == f"file://{tmp_path / 'data' / 'lake' / 'clicks_uni'}"
    order = streams["orders"]
    assert (order.format, order.event_time, order.record_id) == ("csv", "created_at", "order_id")
    assert [c.type for c in order.columns] == ["string", "string", "double", "boolean", "timestamp"]

    for stream in ("clicks_uni", "orders"):
        assert main(["check", "--stream", stream]) == 0, capsys.readouterr()
        assert "FAIL" not in capsys.readouterr().out

    click_dates = {r["ts"][:10] for r in clicks.values()}
    rows = published("clicks_uni", click_dates, capsys)
    ids = Counter(r["click_id"] for r in rows)
    assert ids.most_common(1)[0][1] == 1  # no record twice
    assert set(ids) == set(clicks)  # every good record, nothing else
    for row in rows:
        source = clicks[row["click_id"]]
        assert row["_dt"] == source["ts"][:10] and row["user"] == source["user"]
        assert json.loads(row["meta"]) == source["meta"]

    # The sample did not show every field a source will hold: a later object carries a new
    # one and a nested one, and the entry `init` wrote (`schema_evolution: add`) takes them in.
    assert click.schema_evolution == "add"
    assert "schema_evolution: add" in (tmp_path / "streams.yaml").read_text()
    later = tmp_path / "sources" / "clicks ünï" / "2026/03/09/zz later.jsonl"
    later.parent.mkdir(parents=True, exist_ok=True)
    at = "2026-03-02T09:00:00.000Z"
    new = [
        {"click_id": f"n-{i}", "user": "ü", "ms": i, "ts": at, "meta": {}, "campaign": "spring",
         "geo": {"country": "NZ", "city": "Wellington"}}
        for i in range(5)
    ]  # fmt: skip
    later.write_text("\n".join(json.dumps(r) for r in new) + "\n")
    again = subprocess.run(
        [sys.executable, "-m", "resources.cli.main", "run", "--stream", "clicks_uni"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "added campaign, geo" in again.stdout
    rows = published("clicks_uni", click_dates | {"2026-03-02"}, capsys)
    by_id = {r["click_id"]: r for r in rows}
    assert by_id["n-3"]["campaign"] == "spring"
    assert json.loads(by_id["n-3"]["geo"]) == {"country": "NZ", "city": "Wellington"}
    assert len(by_id) == len(rows) == len(clicks) + len(new)

    order_dates = {r["ts"].astimezone(timezone.utc).strftime("%Y-%m-%d") for r in orders.values()}
    rows = published("orders", order_dates, capsys)
    ids = Counter(r["order_id"] for r in rows)
    assert ids.most_common(1)[0][1] == 1 and set(ids) == set(orders)
    for row in rows:
        source = orders[row["order_id"]]
        assert row["_dt"] == source["ts"].astimezone(timezone.utc).strftime("%Y-%m-%d")
        assert row["amount"] == pytest.approx(source["amount"])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_missing_or_empty_source_is_one_line_exit_1(tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "init", str(tmp_path / "nowhere"))
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"leasehold: no directory at {tmp_path / 'nowhere'}"]
    (tmp_path / "empty" / "nested").mkdir(parents=True)
    code, _, err = run(capsys, "init", str(tmp_path / "empty"))
    assert code == 1
    assert err.splitlines() == [
        f"leasehold: no objects under file://{tmp_path / 'empty'}: nothing to infer from"
    ]
    assert not (tmp_path / "streams.yaml").exists()


def test_mixed_formats_are_refused_with_counts_per_format(tmp_path: Path, capsys) -> None:
    source = tmp_path / "mixed"
    source.mkdir()
    for i in range(3):
        (source / f"a{i}.csv").write_text("id,ts\n1,2026-01-01T00:00:00Z\n")
    (source / "b.jsonl.gz").write_bytes(gzip.compress(b'{"id": 1}\n'))
    code, _, err = run(capsys, "init", str(source))
    assert code == 1
    assert "mixes formats (3 CSV, 1 JSON-lines objects)" in err
    assert "directory or prefix of its own" in err and len(err.splitlines()) == 1


def test_misnamed_gzip_is_named_with_its_problem(tmp_path: Path, capsys) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.jsonl").write_bytes(gzip.compress(b'{"id": 1}\n'))
    code, _, err = run(capsys, "init", str(source))
    assert code == 1 and "a.jsonl: gzip data not named .gz" in err


def test_unparseable_objects_and_missing_event_time_say_what_to_do(
    spark: Any, tmp_path: Path, capsys
) -> None:
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "x.jsonl").write_text("not json\nnor this\n")
    code, _, err = run(capsys, "init", str(garbage))
    assert code == 1
    assert err.startswith("leasehold: no record in the sample parses as JSON lines (2 lines")

    no_time = tmp_path / "no_time"
    no_time.mkdir()
    (no_time / "x.jsonl").write_text('{"id": "a", "created_ts": 1}\n{"id": "b", "created_ts": 2}\n')
    code, _, err = run(capsys, "init", str(no_time))
    assert code == 2
    assert "no column holds timestamps" in err and "created_ts hold numbers" in err
    assert err.rstrip().endswith("choose with --event-time COL")

    two = tmp_path / "two"
    two.mkdir()
    records = [
        {"id": f"r{i}", "start": f"2026-01-0{i}T00:00:00Z", "end": f"2026-01-0{i}T01:00:00Z"}
        for i in (1, 2)
    ]
    (two / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, err = run(capsys, "init", str(two))
    assert code == 2 and "(start, end)" in err and "--event-time" in err
    code, out, err = run(capsys, "init", str(two), "--event-time", "end", "--record-id", "none")
    assert code == 0, err
    stream = load_streams(tmp_path / "streams.yaml")["two"]
    assert (stream.event_time, stream.record_id, stream.dedupe.mode) == ("end", None, "none")
    assert "leasehold run --stream two" in out

    code, _, err = run(capsys, "init", str(two), "--event-time", "end")
    assert code == 2 and "already has a stream 'two'" in err and "--force" in err


def test_run_of_an_unknown_stream_names_the_flag(tmp_path: Path, capsys) -> None:
    (tmp_path / "streams.yaml").write_text(
        "streams:\n  a:\n    source: file://s\n    schema: {t: timestamp}\n    event_time: t\n"
        "    table: file://l\n"
    )
    code, _, err = run(capsys, "run", "--stream", "b")
    assert code == 2
    assert err.splitlines() == [
        "leasehold: invalid configuration: --stream: 'b' is not a stream; the streams file "
        "has ['a']"
    ]


ENTRY = {
    "source": "file://src",
    "format": "csv",
    "schema": {"order id": "string", "at: time": "timestamp", "ü": "long"},
    "event_time": "at: time",
    "table": "file://lake/x",
}


def test_the_entry_is_yaml_that_keeps_odd_column_names() -> None:
    text = render_entry("x", ENTRY, {"ü": "a note"}, 2)
    assert "      ü: long  # a note\n" in text
    parsed = yaml.safe_load("streams:\n" + text)["streams"]["x"]
    assert parsed == ENTRY


def test_adding_keeps_comments_and_force_replaces_only_its_own_lines() -> None:
    original = (
        "# my header\n"
        "streams:\n"
        "    # the first one\n"
        "    a:\n"
        "        source: file://a  # keep me\n"
        "        schema: {t: timestamp}\n"
        "\n"
        "    b:\n"
        "        source: file://b\n"
        "\n"
        "# trailing comment\n"
        "other: 1\n"
    )

    def entry(name: str, source: str) -> Any:
        return lambda indent: render_entry(name, {"source": source}, {}, indent)

    added = add_entry(original, "c", entry("c", "file://c"), replace=False)
    assert added.startswith(original.split("\n\n# trailing")[0] + "\n    c:\n        source: file")
    assert added.endswith("# trailing comment\nother: 1\n")
    assert list(yaml.safe_load(added)["streams"]) == ["a", "b", "c"]

    replaced = add_entry(added, "a", entry("a", "file://new"), replace=True)
    assert "keep me" not in replaced and "# the first one" in replaced
    assert yaml.safe_load(replaced)["streams"]["a"] == {"source": "file://new"}
    assert yaml.safe_load(replaced)["streams"]["b"] == {"source": "file://b"}

    assert add_entry("", "x", entry("x", "file://x"), replace=False) == (
        "streams:\n  x:\n    source: file://x\n"
    )


def test_a_format_the_objects_contradict_is_refused(tmp_path: Path, capsys) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.jsonl").write_text('{"id": 1}\n')
    code, _, err = run(capsys, "init", str(source), "--format", "csv")
    assert code == 2
    assert err.splitlines() == [
        "leasehold: --format csv: the objects' names or first lines say jsonl; choose with "
        "--format (or leave it out)"
    ]
    with pytest.raises(SystemExit) as exit_:  # argparse's own exit: a bad command line
        main(["init", str(source), "--sample-objects", "0"])
    assert exit_.value.code == 2 and "not a positive count" in capsys.readouterr().err
    code, _, err = run(capsys, "init", str(source), "--name", "2 bad")
    assert code == 2 and "'2 bad' is no stream name" in err and "--name NAME" in err


PEOPLE = ["person_id", "name", "age", "score", "active", "joined_at"]
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def person(n: int, multiline: bool = False) -> list[str]:
    names = ["Smith, John", 'O"Brien', "two\r\nlines (CRLF)", "a\nbare LF", "  spaced  ", "Zoë"]
    name = f"{names[n % len(names)]} #{n}"
    if multiline:  # every record of the big object spans lines: its chunks are cut mid-record
        name = f"big {n}, first line\r\nsecond line"
    at = START + timedelta(hours=n)
    return [f"p{n:04d}", name, str(20 + n % 50), f"{n * 0.5:.1f}", "true" if n % 3 else "false",
            at.strftime("%Y-%m-%dT%H:%M:%SZ")]  # fmt: skip


def csv_object(rows: list[list[str]], order: list[int], terminator: str) -> tuple[str, list]:
    """The text Python's csv module writes for a header and `rows` (columns in `order`), and
    each row's (line, text as written)."""
    text, records = "", []
    for row in [PEOPLE, *rows]:
        one = io.StringIO(newline="")
        csv.writer(one, lineterminator=terminator).writerow([row[i] for i in order])
        records.append((1 + len(LINE_BREAK.findall(text)), one.getvalue().removesuffix(terminator)))
        text += one.getvalue()
    return text, records[1:]


def epoch(text: str) -> int:
    return int(
        datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    )


def write_people(root: Path) -> tuple[dict[str, list[str]], dict[tuple[str, int], tuple]]:
    """CSV as Python's csv module writes it: CRLF with a byte-order mark and two malformed
    records, a header in another order with LF (gzip), and a big object read in chunks.
    Returns the good rows by id and the bad ones by (key, line): (reason, text)."""
    root.mkdir(parents=True)
    good: dict[str, list[str]] = {}
    bad: dict[tuple[str, int], tuple[str, str]] = {}

    a = [person(n) for n in range(30)]
    text, _ = csv_object(a, list(range(6)), "\r\n")
    tail = ["p9998,too,many,1,1.0,true,x", 'p9999,"never closed,1,1.0,true,2026-03-01T00:00:00Z']
    last = 1 + len(LINE_BREAK.findall(text))
    bad[("a.csv", last)] = ("CSV record has 7 fields, the header has 6", tail[0])
    bad[("a.csv", last + 1)] = ("unclosed quote", tail[1])
    (root / "a.csv").write_bytes(("\ufeff" + text + "\r\n".join(tail) + "\r\n").encode())
    good.update({r[0]: r for r in a})

    order = [5, 3, 0, 1, 4, 2]
    b = [person(n) for n in range(30, 60)]
    b[4][5] = ""  # no join time: quarantined, with its text as written
    text, records = csv_object(b, order, "\n")
    bad[("b.csv.gz", records[4][0])] = ("missing event time", records[4][1])
    (root / "b.csv.gz").write_bytes(gzip.compress(text.encode()))
    good.update({r[0]: r for r in b if r[5]})

    big = [person(n, multiline=True) for n in range(60, 300)]
    big[150][5] = ""
    text, records = csv_object(big, list(range(6)), "\r\n")
    assert records[150][0] == 2 + 2 * 150  # numbered in the whole object, across chunks
    bad[("c big.csv", records[150][0])] = ("missing event time", records[150][1])
    (root / "c big.csv").write_bytes(text.encode())
    good.update({r[0]: r for r in big if r[5]})
    return good, bad


def test_init_then_run_reads_csv_as_real_tools_write_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`leasehold init` on CSV as Python's csv module writes it, as quiet as `run`; then
    `leasehold run` with the big object in chunks: the published table holds every good
    record once with its values as written, quarantine the bad ones at their exact lines."""
    import duckdb

    good, bad = write_people(tmp_path / "people")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(REPO),
        SPARK_LOCAL_IP="127.0.0.1",
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STREAMS=str(tmp_path / "streams.yaml"),
        LEASEHOLD_SPARK_MASTER="local[2]",
    )

    def leasehold(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.cli_sequence", json.dumps([list(argv)])],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    init = leasehold("init", "people")
    assert init.stderr == ""  # no Java or Spark start-up lines: they went to the Spark log
    assert "trial read of the sample: 298 of 302 records to the table" in init.stdout
    entry = yaml.safe_load((tmp_path / "streams.yaml").read_text())["streams"]["people"]
    assert entry["csv"] == {"header": True, "delimiter": ",", "quote": '"', "escape": None}
    assert entry["schema_evolution"] == "add"
    assert entry["table_format"] == DEFAULT_TABLE_FORMAT  # written out, not left implicit
    assert entry["schema"] == {
        "person_id": "string",
        "name": "string",
        "age": "long",
        "score": "double",
        "active": "boolean",
        "joined_at": "timestamp",
    }
    assert (entry["event_time"], entry["record_id"]) == ("joined_at", "person_id")
    # Units of at most 8 kB: the big object (~17 kB) is a unit of its own, read in chunks of
    # 3 kB whose byte budgets end inside quoted line breaks.
    with (tmp_path / "streams.yaml").open("a") as f:
        f.write("    partition: {max_bytes: 8000, commit_every_bytes: 3000}\n")
    assert (tmp_path / "people" / "c big.csv").stat().st_size > 3 * 8000 // 2
    run = leasehold("run", "--stream", "people")
    assert "302 source records read - 4 quarantined = 298 rows committed" in run.stdout
    store = build_store(StoreSettings.from_env())
    try:  # the big object's unit was committed chunk by chunk, up to its end
        (unit,) = [
            json.loads(item.progress_state or "{}")
            for item in store.iter_items(store.source_identifier("people"))
            if "c big.csv" in item.partition_key
        ]
    finally:
        store.close_store()
    assert unit["chunk"]["offset"] == (tmp_path / "people" / "c big.csv").stat().st_size

    dates = {r[5][:10] for r in good.values()}
    files = []
    for dt in sorted(dates):
        assert main(["table", "files", "people", dt, "--json"]) == 0, capsys.readouterr().err
        files += [
            f["url"].removeprefix("file://") for f in json.loads(capsys.readouterr().out)["files"]
        ]
    with duckdb.connect() as con:
        rows = con.execute(
            "SELECT person_id, name, age, score, active, CAST(epoch(joined_at) AS BIGINT)"
            " FROM read_parquet($files, union_by_name = true)",
            {"files": files},
        ).fetchall()
        quarantine = con.execute(
            "SELECT source_key, line, reason, raw FROM read_parquet($glob)",
            {"glob": str(tmp_path / "data" / "lake" / "people_quarantine" / "**" / "*.parquet")},
        ).fetchall()
    assert Counter(r[0] for r in rows).most_common(1)[0][1] == 1  # no record twice
    assert {r[0]: list(r) for r in rows} == {
        i: [r[0], r[1], int(r[2]), float(r[3]), r[4] == "true", epoch(r[5])]
        for i, r in good.items()
    }
    assert {(k, n): (why, raw) for k, n, why, raw in quarantine} == bad


def test_an_entry_that_would_quarantine_most_records_is_refused_with_why() -> None:
    inferred = Inferred("x", {}, {}, [], "")
    config: Any = None  # not read
    with pytest.raises(SourceInferenceError) as refused:
        check_trial(config, Counter({None: 2, "missing event time": 3}), inferred)
    assert str(refused.value) == (
        "read as the inferred stream, 3 of the 5 sampled records would go to quarantine "
        "(missing event time: 3); --format, --event-time or the data itself must change"
    )
    check_trial(config, Counter({None: 3, "unclosed quote": 2}), inferred)  # half: accepted
    assert inferred.notes == [
        "trial read of the sample: 3 of 5 records to the table, the rest to quarantine "
        "(unclosed quote: 2)"
    ]
