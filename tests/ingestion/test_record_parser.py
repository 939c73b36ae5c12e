"""`record_parser` against the Spark read it replaced: a corpus of tricky objects, each parsed
by `parse_json_lines` / `parse_csv`, must give the rows (values and Arrow types), the quarantine
(line, reason, raw) and the fields outside the schema that Spark's JSON reader with the
declared types gave for it (`GOLDENS`). Then the fast/slow path switch, without Spark."""

from __future__ import annotations

import gzip
import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
import pytest

from resources.ingestion import record_lines, record_parser
from resources.ingestion.csv_records import CsvHeaderError
from resources.ingestion.record_parser import (
    ParsedRecords,
    converted_times,
    parse_csv,
    parse_json_lines,
)
from resources.ingestion.record_values import date_of, timestamp_of
from resources.ingestion.sample_data import record_line
from resources.ingestion.split_task import refused_fields
from resources.schema.modes import FAIL, RESCUE
from resources.streams import StreamConfig
from tests.support.parser_streams import sorted_rows, stream

GOLDENS = Path(__file__).with_name("record_parser_goldens.json")
"""What the Spark read (`SourceReader`, commit ad6a92a: Spark's JSON reader with the declared
types, a text parse of rejected lines, `quarantine.line_numbers`) made of each object of the
corpus below, by case and key: schema, rows (`comparable`, sorted), bad records, `failed`,
unknown fields. The corpus is built by this module and must not change without them."""
EVENTS = {"event_id": "string", "user_id": "string", "amount": "double", "event_time": "timestamp"}
T = '"event_time": "2026-01-01T10:00:00Z"'


def ev(i: int, **fields: Any) -> str:
    record = {
        "event_id": f"e{i}",
        "user_id": "u",
        "amount": 1.5,
        "event_time": "2026-01-01T10:00:00Z",
    }
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


def lines(*texts: str, end: str = "\n") -> bytes:
    return (end.join(texts) + end).encode()


def clean(n: int, start: int = 1) -> list[str]:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [record_line(i, at + timedelta(seconds=977 * i)) for i in range(start, start + n)]


TYPES = [
    ev(1, user_id=42),
    ev(2, user_id=42.50),
    ev(3, amount="12.5"),
    ev(4, amount="abc"),
    ev(5, amount=True),
    '{"event_id": "e6", "user_id": 1e2, "amount": NaN, ' + T + "}",
    '{"event_id": "e7", "amount": 1e309, ' + T + "}",
    '{"event_id": "e8", "amount": 12345678901234567890, ' + T + "}",
    ev(9, user_id={"a": [1, 2.5]}),
    '{"event_id": "e10", "user_id": {"a": [1, 2.50]}, ' + T + "}",
    ev(11, amount=" 7 "),
    ev(12, amount="1d"),
    ev(13, amount="Infinity"),
    '{"event_id": "e14", "amount": "12.5", "event_time": 1700000000}',
    '{"event_id": "e15", "amount": 12.5, "event_time": 1700000000}',
    ev(16, amount=None),
    ev(17, event_id=7),
    ev(18, event_id=None),
    '{"event_id": "e19", "user_id": -0, "amount": -0.0, ' + T + "}",
    ev(20, user_id="caf\u00e9 \U0001f600"),
    '{"event_id": "e22", "user_id": {"b": 1, "a": [2.50, 1E3]}, ' + T + "}",
    '{"event_id": "e21", "user_id": "\\ud83d", ' + T + "}",
]
TIMES = [
    "2026-01-01T10:00:00Z", "2026-01-01T10:00:00", "2026-01-01 10:00:00", "2026-01-01",
    "2026-01-01T10:00", "2026-01-01T10:00:00.123456789Z", "2026-01-01T10:00:00.1Z",
    "2026-01-01T10:00:00+05:00", "2026-01-01T10:00:00+0500", "2026-01-01T10:00:00+05",
    "2026-01-01T10:00:00 UTC", "2026-01-01T10:00:00 America/New_York",
    "2026-01-01T10:00:00GMT+1", "2026-1-1", "2026-01-01T", " 2026-01-01T10:00:00Z ", "2026",
    "2026-01", "+2026-01-01", "2026-02-30", "2026-13-01", "2026-01-01T25:00:00", "abc", "",
    "2026-01-01T10:00:00z", "2026-01-01t10:00:00Z", "2026-01-01T10:00:00-08:00",
    "2026-01-01T1:2:3", "2026-01-01T10:00:00.Z", "2026-01-01T10:00:00+5:00",
    "2026-01-01T10:00:00 EST", "2026-01-01T10:00:00+19:00", "2026-06-01 10:00 Europe/Paris",
    "2026-01-01T10Z", "2026-01-01T10", "2026-01-03T03:30:00Z", "2026-07-01T03:30:00Z",
    "1969-12-31T23:59:59.999999Z", "2026-01-01T10:00:00.123+01:00",
]  # fmt: skip
STRUCTURE = [
    "[" + ev(1) + ", " + ev(2) + "]",
    "[]",
    "[" + ev(3) + ", " + ev(4, amount="x") + "]",
    '[{"event_id": "e5"}, {"event_id": "e6"}]',
    "  [" + ev(7) + "]",
    ev(8) + " trailing",
    ev(9) + ev(10),
    '{"event_id": "e11", "event_id": "e12", ' + T + "}",
    "{'event_id': 'e13', " + T + "}",
    "   ",
    "\t",
    "",
    '{"event_id": "e14", "amount": 017, ' + T + "}",
    '{"event_id": "e15", "user_id": "a\tb", ' + T + "}",
    '{"event_id": "e16", ' + T + ",}",
    "{}",
    ev(17),
    '{"event_id": "e18", "amount": 2',
    '{"event_id": "e18", "amount": 2',
]
ROOTS = ["null", "1", '"text"', "true", "[null]", "[1, 2]", "[[" + ev(1) + "]]", ev(2)]
EXTRAS = [
    ev(1, x=1, y="a"),
    ev(2, x=2.5, z=None),
    ev(3, y={"n": 1}),
    ev(4, w=True),
    ev(5, x=None),
    ev(6, amount="bad", v=1),
]


def dirty(n: int) -> bytes:
    """`n` clean lines with odd ones spread through them (every path of the parser at once):
    bad lines, lines pyarrow reads otherwise than Spark, fields whose kind changes."""
    body = clean(n)
    odd = [
        ev(9001, user_id=7, x=1),
        '{"event_id": "e9002", "amount": 2',
        ev(9003, amount="3.5", x="text"),
        ev(9004) + " tail",
        "null",
        "[" + ev(9005) + ", " + ev(9006, y=[1]) + "]",
        ev(9007, event_time="2026-02-30T00:00:00Z", x=3),
        ev(9008, event_time="2026-03-01 12:00:00 Europe/Paris", x=2.5),
        '{"event_id": "e9009", "amount": 2',
        ev(9010, event_id=None, z=True),
    ]
    for k, line in enumerate(odd):
        body[(k * 97 + 13) % n] = line
    return lines(*body[: n // 2]) + b'{"event_id": "e9011\xff"}\n' + lines(*body[n // 2 :])


CSV_HEAD = "event_id,amount,qty,event_time"
CSV_COLUMNS = {"event_id": "string", "amount": "double", "qty": "long", "event_time": "timestamp"}
CSV_BODY = [
    "c1,1.5,3,2026-01-01T10:00:00Z",
    'c2,"2,5",4,2026-01-01T10:00:00Z',
    'c3,2.5,,"2026-01-02T10:00:00Z"',
    '"c4 ""quoted""",1e2,01,2026-01-01 10:00:00',
    '"c5\nline two",1,1,2026-01-01T10:00:00Z',
    "c6,abc,1,2026-01-01T10:00:00Z",
    "c7,1,1.5,2026-01-01T10:00:00Z",
    "c8,1,1",
    ",1,1,2026-01-01T10:00:00Z",
    "c9,1,1,",
    "",
    "c10, 2 ,TRUE,2026-01-01T10:00:00+05:00",
    'c11,"unclosed,1,2026-01-01T10:00:00Z',
    "c12,NaN,-0,2026-01-01",
]


def json_cases() -> list[tuple[str, StreamConfig, dict[str, bytes], dict[str, int]]]:
    """(name, config, objects, chunk line offsets) per Spark read."""
    events = stream(EVENTS, record_id="event_id", timezone="America/New_York")
    gz = lines(*clean(50))
    structure = b"\xef\xbb\xbf" + lines(ev(0), *STRUCTURE)
    objects = {
        "clean.jsonl": lines(*clean(400), ev(401, event_time="2025-12-31T23:59:59Z")),
        "types.jsonl": lines(*TYPES),
        "times.jsonl": lines(*(ev(i, event_time=t) for i, t in enumerate(TIMES))),
        "structure.jsonl": structure,
        "roots.jsonl": lines(*ROOTS),
        "cr.jsonl": lines(ev(1), '{"event_id": "e2"', ev(3), end="\r")
        + lines(ev(4), "{", end="\r\n"),
        "utf8.jsonl": b'{"event_id": "e1\xff", '
        + T.encode()
        + b"}\n"
        + lines(ev(2))
        + b'{"event_id": "\xed\xa0\x80", '
        + T.encode()
        + b'}\n{"event_id": "\xc3',
        "late.jsonl.gz": gzip.compress(gz),
        "chunk.jsonl": lines(*clean(20, 100), '{"event_id": "e3', ev(4, amount="x")),
        "extras.jsonl": lines(*EXTRAS),
        "dirty.jsonl": dirty(600),
        "deep.jsonl": lines('{"x": ' + "[" * 1200 + "]" * 1200 + ", " + T + "}", ev(1)),
    }
    plain_times = stream(
        {"id": "long", "n": "int", "ok": "boolean", "day": "date", "at": "string"},
        event_time="at",
        mode="add",
    )
    values = {
        "values.jsonl": lines(
            '{"id": 1, "n": 2147483647, "ok": true, "day": "2026-01-01", "at": "2026-01-01T10Z"}',
            '{"id": "12", "n": "7", "ok": "yes", "day": "2026-1-1", "at": "2026-01-02"}',
            '{"id": 9223372036854775808, "n": 1, "ok": true, "day": "2026-01-01", "at": "2026"}',
            '{"id": 1.0, "n": 1, "at": "2026-01-01"}',
            '{"id": 2, "n": 2147483648, "at": "2026-01-01"}',
            '{"id": 3, "ok": 1, "day": 20000, "at": "2026-01-01"}',
            '{"id": 4, "ok": "maybe", "at": "2026-01-01"}',
            '{"id": 5, "day": "2026-02-30", "at": "2026-01-01"}',
            '{"id": 6, "day": "2026-01-01T10:00:00Z", "at": 1700000000}',
            '{"id": 7, "at": "not a time"}',
            '{"id": 8, "at": "2026-01-01T10:00:00 Europe/Paris", "new": [1]}',
        )
    }
    failing = stream(EVENTS, mode=FAIL)
    return [
        ("events", events, objects, {"chunk.jsonl": 999}),
        ("values", plain_times, values, {}),
        (
            "fail",
            failing,
            {
                "extras.jsonl": lines(*EXTRAS),
                "plain.jsonl": lines(*clean(5)),
                "dirty.jsonl": dirty(400).replace(b"null\n", b"{}\n"),  # Spark's scan: no null
            },
            {},
        ),
    ]


def rescue_case() -> tuple[str, StreamConfig, dict[str, bytes], dict[str, int]]:
    config = stream(EVENTS, record_id="event_id", mode=RESCUE)
    objects = {
        "rescue.jsonl": b"\xef\xbb\xbf"
        + lines(
            *clean(5),
            *EXTRAS,
            ev(7, amount="12.5", user_id=42),
            ev(8, user_id={"a": [1, 2.50]}, amount=1e2),
            "[" + ev(9, q=1) + ", " + ev(10) + "]",
            '{"event_id": "e11"',
            "   ",
            "{}",
            ev(12, event_time=1700000000),
            ev(13, amount=True, x=None),
            ev(14, user_id=1e-07, x=1e20, w=123456789.5),
            '{"event_id": "e15", "user_id": {"b": 1, "a": [2.50, 1E3]}, "n": 10.00, ' + T + "}",
            '{"event_id": "e16", "user_id": "x", "user_id": "y", "amount": "1,5", ' + T + "}",
            '{"event_id": "e17", "amount": 12345678901234567890123, "d": 1.5e300, ' + T + "}",
        )
    }
    return ("rescue", config, objects, {})


def csv_case() -> tuple[str, StreamConfig, dict[str, bytes], dict[str, int]]:
    config = stream(CSV_COLUMNS, fmt="csv", record_id="event_id")
    body = "\n".join(CSV_BODY) + "\n"
    objects = {
        "a.csv": (
            "\ufeff" + CSV_HEAD + ",extra\n" + "\n".join(f"{r},x" for r in CSV_BODY[:4]) + "\n"
        ).encode(),
        "b.csv": (CSV_HEAD + "\n" + body).encode(),
        "crlf.csv": (CSV_HEAD + "\r\n" + "\r\n".join(CSV_BODY[:6]) + "\r\n").encode(),
        "order.csv": b"event_time,event_id\n2026-01-01T10:00:00Z,o1\n,o2\n",
        "utf8.csv": (CSV_HEAD + "\n").encode()
        + b"u1\xff,1,1,2026-01-01T10:00:00Z\nu2,1,1,2026-01-01T10:00:00Z\n",
        "dup.csv": b"event_id,event_id\n1,2\n",
        "chunk.csv": (CSV_HEAD + "\n" + body).encode(),
    }
    return ("csv", config, objects, {"chunk.csv": 40 - 1 - 1})  # data from line 40


def parse(key: str, data: bytes, config: StreamConfig, offset: int) -> ParsedRecords:
    """What the new parser makes of one object, as a Spark task would be given it."""
    if key.endswith(".gz"):
        data = gzip.decompress(data)
    if config.format == "csv":
        if offset:
            header, _, rest = data.partition(b"\n")
            return parse_csv(rest, config, first_line=offset + 2, header=header + b"\n")
        return parse_csv(data, config)
    return parse_json_lines(data, config, first_line=offset + 1)


def comparable(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts, NaN made comparable, times and dates as numbers (years past 9999)."""
    plain = {
        name: column.cast(pa.int64() if pa.types.is_timestamp(column.type) else pa.int32())
        if pa.types.is_timestamp(column.type) or pa.types.is_date32(column.type)
        else column
        for name, column in zip(table.column_names, table.columns, strict=True)
    }
    return [
        {k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in pa.table(plain).to_pylist()
    ]


def assert_same(key: str, config: StreamConfig, spark: dict[str, Any], ours: ParsedRecords) -> None:
    """`ours` is what the Spark read made of the object (`spark`: its golden entry)."""
    if config.schema_evolution == FAIL and ours.fields.fields:
        assert spark["failed"] == refused_fields(config, ours.fields), key
        return
    assert spark["failed"] is None, (key, spark["failed"])
    bad = [
        list(b)
        for b in zip(
            *(ours.bad.column(n).to_pylist() for n in ("line", "reason", "raw")), strict=True
        )
    ]
    assert bad == spark["bad"], key
    if spark["rows"] is None:
        assert ours.rows.num_rows == 0, key
    else:
        assert [[f.name, str(f.type)] for f in ours.rows.schema] == spark["schema"], key
        assert comparable(sorted_rows(ours.rows)) == spark["rows"], key
    if config.schema_evolution != RESCUE:
        assert {n: s.records for n, s in ours.fields.fields.items()} == spark["unknown"], key
    else:
        assert not ours.fields.fields


@pytest.mark.parametrize(
    "case", [*json_cases(), rescue_case(), csv_case()], ids=lambda case: case[0]
)
def test_the_parser_reads_every_object_as_the_spark_read_did(
    case: tuple[str, StreamConfig, dict[str, bytes], dict[str, int]],
) -> None:
    """The differential test: every object of the corpus parsed here, against what Spark's
    JSON reader with the declared types (the reader before the data path moved into tasks)
    made of the same object — rows with their Arrow types, quarantine (line, reason, raw),
    fields outside the schema, `fail`'s message (`GOLDENS`)."""
    name, config, objects, offsets = case
    reads = json.loads(GOLDENS.read_text())[name]
    assert set(reads) == set(objects)
    for key, data in objects.items():
        try:
            ours = parse(key, data, config, offsets.get(key, 0))
        except CsvHeaderError as exc:
            assert reads[key]["failed"] == str(exc), key
            continue
        assert_same(key, config, reads[key], ours)


# The fast/slow path switch, without Spark.

EVENTS_CONFIG = stream(EVENTS, record_id="event_id")


def exact_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every line index the exact (Python) path is given."""
    given: list[int] = []
    real = record_lines.python_piece

    def spy(lines: Any, indexes: list[int], config: StreamConfig, **options: Any) -> Any:
        given.extend(indexes)
        return real(lines, indexes, config, **options)

    monkeypatch.setattr(record_parser, "python_piece", spy)
    return given


def test_clean_data_never_takes_the_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    given = exact_lines(monkeypatch)
    parsed = parse_json_lines(lines(*clean(2000)), EVENTS_CONFIG, first_line=11)
    assert given == []
    assert parsed.rows.num_rows == 2000 and parsed.bad.num_rows == 0
    assert parsed.lines == 2000
    assert parsed.rows.schema.field("event_time").type == pa.timestamp("us", tz="UTC")


def test_a_bad_line_in_many_is_found_by_halving_and_parsed_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = exact_lines(monkeypatch)
    body = clean(3000)
    body[1234] = ev(5000, amount="12.5")  # pyarrow refuses a quoted number; Spark converts it
    body[2500] = '{"event_id": "e1", "amount": 2'
    parsed = parse_json_lines(lines(*body), EVENTS_CONFIG, first_line=101)
    assert 1234 in given and 2500 in given
    assert len(given) <= 2 * record_parser.SMALL_BLOCK
    assert parsed.rows.num_rows == 2999
    assert parsed.rows.column("amount").to_pylist()[1234] == 12.5
    assert parsed.rows.column("event_id").to_pylist()[:3] == [
        "e000000000001",
        "e000000000002",
        "e000000000003",
    ]
    assert parsed.bad.to_pylist() == [
        {"line": 2601, "reason": "invalid JSON (truncated or malformed)", "raw": body[2500]}
    ]


def test_lines_at_fault_everywhere_go_to_the_exact_path_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A number in a string column on every line (pyarrow refuses each; Spark keeps its text):
    after a few lines pyarrow names, the rest goes to the exact path at once, not one read
    (and one recursion) per line."""
    given = exact_lines(monkeypatch)
    reads = 0
    real = pj.read_json

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pj, "read_json", counted)
    body = [ev(i, user_id=i) for i in range(5000)]
    parsed = parse_json_lines(lines(*body), EVENTS_CONFIG)
    assert parsed.rows.column("user_id").to_pylist() == [str(i) for i in range(5000)]
    assert sorted(given) == list(range(5000))
    assert reads <= 2 * (record_parser.DENSE + 1)


@pytest.mark.parametrize(
    "odd",
    [
        "null",
        "  " + ev(2),
        ev(2) + ev(3),
        "[" + ev(2) + "]",
        ev(2, event_time="2026-02-30"),
        '{"x": ' + "[" * 1200 + "]" * 1200 + ", " + T + "}",
    ],
    ids=["null-line", "leading-space", "two-objects", "array", "impossible-date", "deep"],
)
def test_what_pyarrow_reads_otherwise_takes_the_exact_path(
    monkeypatch: pytest.MonkeyPatch, odd: str
) -> None:
    """pyarrow crashes on a `null` line, reads two objects on one line as two rows (Spark: the
    first), and reads a time Spark would not as something: each goes to the exact path."""
    given = exact_lines(monkeypatch)
    parse_json_lines(lines(ev(1), odd, ev(4)), EVENTS_CONFIG)
    assert 1 in given


def test_times_pyarrow_converts_agree_with_sparks_rules() -> None:
    texts = [*TIMES, "2026-01-01T10:00:00.5+01:00", "2026-12-31 23:59:59.999999", None]
    converted, failed = converted_times(
        pa.chunked_array([pa.array(texts, pa.string())]), "timestamp"
    )
    expected = [None if t is None else timestamp_of(t) for t in texts]
    assert converted.cast(pa.int64()).to_pylist() == expected
    assert failed.tolist() == [
        t is not None and e is None for t, e in zip(texts, expected, strict=True)
    ]
    days = ["2026-01-01", "2026-02-29", "2026-1-1", "2026-01-01T10:00:00Z", None]
    converted, _ = converted_times(pa.chunked_array([pa.array(days, pa.string())]), "date")
    assert converted.cast(pa.int32()).to_pylist() == [
        None if d is None else date_of(d) for d in days
    ]


def test_a_csv_chunk_numbers_lines_as_its_object() -> None:
    config = stream(CSV_COLUMNS, fmt="csv", record_id="event_id")
    body = b"c1,1,1,2026-01-01T10:00:00Z\nc2,x,1,2026-01-01T10:00:00Z\n"
    parsed = parse_csv(body, config, first_line=500, header=(CSV_HEAD + "\n").encode())
    assert parsed.bad.column("line").to_pylist() == [501]
    assert parsed.lines == 2
    with pytest.raises(CsvHeaderError, match="more than once"):
        parse_csv(b"a,a\n1,2\n", config)


def test_the_parser_modules_do_not_import_spark() -> None:
    import resources.ingestion.record_csv as csv_module
    import resources.ingestion.record_lines as lines_module
    import resources.ingestion.record_rescue as rescue_module
    import resources.ingestion.record_values as values_module

    for module in (record_parser, csv_module, lines_module, rescue_module, values_module):
        assert "pyspark" not in Path(module.__file__ or "").read_text()
