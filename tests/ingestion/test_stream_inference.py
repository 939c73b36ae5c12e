"""`leasehold init`'s inference, without Spark or Dagster: every choice from sampled text."""

from __future__ import annotations

import gzip
import json

import pytest

from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.stream_inference import (
    Column,
    InferenceChoiceError,
    ObjectFormat,
    SourceInferenceError,
    choose_event_time,
    choose_record_id,
    detect_format,
    infer_type,
    parse_csv,
    parse_jsonl,
    single_format,
    stream_name,
)


def fmt(key: str, data: bytes) -> ObjectFormat:
    text = gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()
    return detect_format(key, data[:64], text)


def test_format_from_suffix_content_and_gzip_magic() -> None:
    assert fmt("a/b c.jsonl", b'{"a": 1}\n') == ObjectFormat("jsonl", False)
    assert fmt("x.ndjson.gz", gzip.compress(b'{"a": 1}\n')) == ObjectFormat("jsonl", True)
    assert fmt("x.csv", b"a,b\n1,2\n") == ObjectFormat("csv", False, ",")
    assert fmt("x.tsv.gz", gzip.compress(b"a\tb\n")) == ObjectFormat("csv", True, "\t")
    # No telling suffix: the first line decides (a BOM is skipped, as Spark skips it).
    assert fmt("part-0000", '\ufeff{"a": 1}\n'.encode()).format == "jsonl"
    assert fmt("part-0001", b"a;b;c\n1;2;3\n") == ObjectFormat("csv", False, ";")
    assert fmt("notes", b"hello\n").format is None


def test_gzip_must_be_named_gz_as_the_runtime_reads_it() -> None:
    data = gzip.compress(b'{"a": 1}\n')
    assert "not named .gz" in (fmt("x.jsonl", data).problem or "")
    assert detect_format("x.jsonl.gz", b"{}\n", "{}\n").problem == "named .gz but is not gzip data"


def test_mixed_formats_are_refused_with_counts() -> None:
    formats = {f"{i}.csv": ObjectFormat("csv", False) for i in range(3)}
    formats.update({f"{i}.jsonl.gz": ObjectFormat("jsonl", True) for i in range(5)})
    with pytest.raises(SourceInferenceError, match=r"3 CSV, 5 JSON-lines objects.*no filter"):
        single_format(formats, [])
    with pytest.raises(InferenceChoiceError, match=r"--format jsonl\|csv"):
        single_format({"x": ObjectFormat(None, False)}, ["x"])
    assert single_format({"a.jsonl.gz": ObjectFormat("jsonl", True)}, []).gzip


@pytest.mark.parametrize(
    ("values", "json_values", "expected"),
    [
        ([True, False], True, "boolean"),
        ([1, 2, 3], True, "long"),
        ([1, 2.5], True, "double"),
        (["1", "2"], True, "string"),  # a quoted number stays text in JSON
        ([{"a": 1}, [1]], True, "string"),
        (["2026-01-01T10:00:00Z", "2026-01-02 03:04:05.123+01:00"], True, "timestamp"),
        (["2026-01-01", "2026-01-02T00:00:00"], True, "timestamp"),
        (["2026-01-01", "2026-02-28"], True, "date"),
        (["2026-02-30T00:00:00Z"], True, "string"),  # not a calendar date
        (["true", "FALSE"], False, "boolean"),
        (["1", "-20"], False, "long"),
        (["007", "1"], False, "string"),  # leading zeros: an identifier, not a number
        (["1.5", "2", "1e3"], False, "double"),
        (["abc", "1"], False, "string"),
        ([], False, "string"),
    ],
)
def test_types_as_the_runtime_would_read_them(values, json_values, expected) -> None:
    assert infer_type(values, json_values=json_values)[0] == expected


def test_naive_timestamps_are_flagged() -> None:
    assert infer_type(["2026-01-01 10:00:00"], json_values=False)[2] is True
    assert infer_type(["2026-01-01T10:00:00Z"], json_values=False)[2] is False


def test_jsonl_records_arrays_and_malformed_lines() -> None:
    lines = [
        json.dumps({"id": "a", "ts": "2026-01-01T00:00:00Z"}),
        json.dumps([{"id": "b", "ts": "2026-01-01T00:00:01Z"}, {"id": "c", "extra": 1}]),
        '{"id": "tru',
        "42",
        "",
    ]
    sample = parse_jsonl(lines)
    assert sample.records == 3 and sample.malformed == 2
    assert [(c.name, c.type, c.nulls) for c in sample.columns] == [
        ("id", "string", 0),
        ("ts", "timestamp", 1),
        ("extra", "long", 2),
    ]


def test_csv_records_as_the_runtime_parses_them() -> None:
    """RFC 4180 as Python's csv module writes it: a quoted delimiter, doubled quotes and a
    quoted line break are values; columns by header name, in first-seen order over objects
    whose headers differ; a record with another field count or an unclosed quote malformed."""
    first = (
        "\ufeffid,name,when\r\n"
        "1,a,2026-01-01 00:00:00\r\n"
        '2,"b, c",2026-01-01 00:00:01\r\n'
        '3,"said ""hi""\r\nand left",2026-01-02 00:00:00\r\n'
        "4,too,many,fields\r\n"
        "\r\n"
        "5,,2026-01-02 00:00:00\r\n"
    )
    second = 'when,id,extra\n2026-01-03 00:00:00,6,7\n7,"never closed\n'
    sample = parse_csv({"a.csv": first, "b.csv": second}, CsvFormat())
    assert (sample.records, sample.malformed) == (5, 2)
    assert [(c.name, c.type, c.nulls) for c in sample.columns] == [
        ("id", "long", 0),
        ("name", "string", 2),  # empty in record 5, absent from b.csv
        ("when", "timestamp", 0),
        ("extra", "long", 4),
    ]
    assert sample.malformed_examples == ["4,too,many,fields", '7,"never closed']
    with pytest.raises(SourceInferenceError, match=r"a.csv: .*names \['a'\] more than once"):
        parse_csv({"a.csv": "a,b,a\n"}, CsvFormat())
    with pytest.raises(SourceInferenceError, match="unnamed columns"):
        parse_csv({"a.csv": "a,,b\n"}, CsvFormat())
    semicolons = parse_csv({"x": 'a;b\n"1;2";3\n'}, CsvFormat(";"))
    assert (semicolons.records, semicolons.columns[0].values) == (1, ["1;2"])


def col(name: str, typ: str, values: list | None = None, nulls: int = 0) -> Column:
    return Column(name, typ, values if values is not None else ["x", "y"], nulls)


def test_event_time_one_preferred_or_ambiguous() -> None:
    only = [col("id", "string"), col("at", "timestamp")]
    assert choose_event_time(only, None)[0].name == "at"
    named = [col("updated_at", "timestamp"), col("createdAt", "timestamp")]
    chosen, why = choose_event_time(named, None)
    assert chosen.name == "createdAt" and "updated_at" in why
    two = [col("start", "timestamp"), col("end", "timestamp")]
    with pytest.raises(InferenceChoiceError, match=r"\(start, end\).*--event-time COL"):
        choose_event_time(two, None)
    assert choose_event_time(two, "end")[0].name == "end"
    with pytest.raises(InferenceChoiceError, match="'nope' is not a column"):
        choose_event_time(two, "nope")


def test_no_timestamp_column_names_epoch_numbers() -> None:
    columns = [col("id", "string"), col("created_ts", "long")]
    with pytest.raises(InferenceChoiceError, match=r"created_ts hold numbers.*--event-time"):
        choose_event_time(columns, None)
    with pytest.raises(InferenceChoiceError, match="long values"):
        choose_event_time(columns, "created_ts")
    # A date column serves when nothing has a time of day.
    assert choose_event_time([col("day", "date")], None)[0].name == "day"


def test_record_id_unique_id_like_or_refused() -> None:
    unique = ["a", "b", "c"]
    columns = [col("event_id", "string", unique), col("user_id", "string", ["u", "u", "v"])]
    chosen, notes = choose_record_id(columns, None)
    assert chosen is not None and chosen.name == "event_id"
    assert notes == ["user_id is not unique in the sample"]
    # Two unique id-like columns: the conventional name wins, else it is the user's call.
    both = [col("user_id", "string", unique), col("event_id", "string", unique)]
    assert choose_record_id(both, None)[0].name == "event_id"  # type: ignore[union-attr]
    ambiguous = [col("order_id", "string", unique), col("customer_id", "long", [1, 2, 3])]
    with pytest.raises(InferenceChoiceError, match=r"order_id, customer_id.*--record-id"):
        choose_record_id(ambiguous, None)
    assert choose_record_id(ambiguous, "none")[0] is None
    chosen, notes = choose_record_id([col("name", "string", unique)], None)
    assert chosen is None and "duplicates are not checked" in notes[0]
    with_nulls = [col("id", "string", unique, nulls=1)]
    assert choose_record_id(with_nulls, None)[0] is None


def test_stream_name_from_the_source() -> None:
    assert stream_name("file:///data/My Clicks/") == "my_clicks"
    assert stream_name("s3://bucket/raw/événements") == "evenements"
    assert stream_name("file:///x/2026") == "s_2026"
    assert stream_name("file:///x/日本") == "stream"
