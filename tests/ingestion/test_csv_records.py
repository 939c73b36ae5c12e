"""CSV as Python's `csv` module (Excel, pandas) writes it, staged as JSON lines without Spark:
every record once, its values exactly as written, its text and line number exact; malformed
records are one line each and every line is accounted for; a large object's chunks end at
record boundaries and number their records as the whole object does."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resources.ingestion import csv_records
from resources.ingestion.csv_records import CsvFormat, CsvHeaderError
from resources.ingestion.source_files import ChunkReader
from resources.schema.columns import ColumnSpec
from resources.streams import StreamConfig, StreamConfigError, load_streams
from tests.support.csv_staging import ERROR_KEY, LINE_KEY, RAW_KEY, stage_csv

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def config(columns: dict[str, str] | None = None, **csv_settings: Any) -> StreamConfig:
    columns = columns or {"id": "string", "name": "string", "n": "long", "at": "timestamp"}
    return StreamConfig(
        name="c",
        source="file:///src",
        format="csv",
        columns=tuple(ColumnSpec(k, v) for k, v in columns.items()),
        event_time="at",
        table="file:///lake",
        quarantine="file:///q",
        **{f"csv_{k}": v for k, v in csv_settings.items()},
    )


def written(rows: list[list[str]], lineterminator: str = "\r\n", **options: Any) -> str:
    """`rows` as Python's csv module writes them (RFC 4180: CRLF by default)."""
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator=lineterminator, **options).writerows(rows)
    return out.getvalue()


def staged(tmp_path: Path, data: bytes, cfg: StreamConfig, name: str = "o.csv", **kw: Any):
    source = tmp_path / name
    source.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    target = tmp_path / f"{name}.jsonl"
    staging = stage_csv(source, target, cfg, **kw)
    return staging, [json.loads(line) for line in target.read_text("utf-8").splitlines()]


CORPUS_HEADER = ["id", "name", "n", "at"]
CORPUS_ROWS = [
    ["1", "Smith, John", "5", "2026-01-01T10:00:00Z"],
    ["2", 'O"Brien', "", "2026-01-01T11:00:00+02:00"],
    ["3", "two\r\nlines, CRLF inside quotes", "7", "2026-01-02 03:04:05"],
    ["4", "a\nbare LF\n\nand a blank line", "-12", "2026-01-02"],
    ["5", "  spaces kept  ", "0", "2026-01-03T00:00:00Z"],
    ["6", "ünïcødé ✓", "notanumber", "2026-01-03T00:00:00Z"],
    ["7", '"', "1", "2026-01-03T00:00:00Z"],
]


def test_a_corpus_as_pythons_csv_writes_it_reads_every_record_once_as_written(
    tmp_path: Path,
) -> None:
    text = written([CORPUS_HEADER, *CORPUS_ROWS])
    for bom in ("", "\ufeff"):
        for name in ("o.csv", "o.csv.gz"):
            staging, rows = staged(tmp_path, (bom + text).encode(), config(), name)
            assert (staging.header, staging.records, staging.malformed) == (CORPUS_HEADER, 7, 0)
            assert [{k: r[k] for k in CORPUS_HEADER} for r in rows] == [
                {
                    **dict(zip(CORPUS_HEADER, row, strict=True)),
                    "n": int(row[2]) if row[2].lstrip("-").isdigit() else row[2] or None,
                }
                for row in CORPUS_ROWS
            ]
            # Each record's line is its first line's number in the object, header = line 1.
            assert [r[LINE_KEY] for r in rows] == [2, 3, 4, 6, 10, 11, 12]
            assert [r[RAW_KEY] for r in rows] == [
                written([row]).removesuffix("\r\n") for row in CORPUS_ROWS
            ]
            assert not any(ERROR_KEY in r for r in rows)
    # Typed columns' literals are JSON literals (the typed parse takes them), others strings.
    assert [type(r["n"]).__name__ for r in rows] == [
        "int", "NoneType", "int", "int", "int", "str", "int",
    ]  # fmt: skip


def test_malformed_records_are_one_line_each_and_the_rest_is_read(tmp_path: Path) -> None:
    lines = [
        "id,name,n,at",
        "1,ok,1,2026-01-01T00:00:00Z",
        "4,too,many,fields,here",
        "5,too few",
        "",
        "   ",
        '6,"closes late',
        'on the next line",6,2026-01-01T00:00:00Z',
        '2,"never closed,2,2026-01-01T00:00:00Z',
        "3,after the stray quote,3,2026-01-01T00:00:00Z",
        "7,ok,7,2026-01-01T00:00:00Z",
    ]
    staging, rows = staged(tmp_path, "\n".join(lines).encode(), config())
    assert (staging.records, staging.malformed) == (7, 3)
    assert [(r[LINE_KEY], r.get(ERROR_KEY), r[RAW_KEY]) for r in rows] == [
        (2, None, lines[1]),
        (3, "CSV record has 5 fields, the header has 4", lines[2]),
        (4, "CSV record has 2 fields, the header has 4", lines[3]),
        (7, None, lines[6] + "\n" + lines[7]),
        (9, "unclosed quote", lines[8]),  # no quote after it: its line alone, then read on
        (10, None, lines[9]),
        (11, None, lines[10]),
    ]
    assert rows[3]["name"] == "closes late\non the next line"
    # A malformed record carries no column: nothing of it can reach the table.
    assert set(rows[1]) == {LINE_KEY, RAW_KEY, ERROR_KEY}


def test_a_quote_left_open_is_given_up_after_the_record_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(csv_records, "MAX_RECORD_CHARS", 100)
    lines = ["id,name,n,at", '1,"open', *[f"{i},x,{i},2026-01-01T00:00:00Z" for i in range(2, 12)]]
    staging, rows = staged(tmp_path, ("\n".join(lines) + "\n").encode(), config())
    assert rows[0][ERROR_KEY].startswith("unclosed quote (a record spanning lines holds at most")
    assert [r[LINE_KEY] for r in rows] == list(range(2, 13))  # every line once
    assert staging.malformed == 1


def test_headers_are_matched_by_name_and_a_bad_header_makes_the_object_unreadable(
    tmp_path: Path,
) -> None:
    _, rows = staged(tmp_path, b" at ,n,extra,id\r\n2026-01-01,5,x,a\r\n", config())
    (row,) = rows
    assert {k: row[k] for k in ("id", "n", "at", "extra")} == {
        "id": "a",
        "n": 5,
        "at": "2026-01-01",
        "extra": "x",  # not in the schema: another key (the stream's evolution mode decides)
    }
    for header, why in [
        (b"id,,at\n", r"unnamed columns \(field 2\)"),
        (b"id,at,id\n", r"names \['id'\] more than once"),
        (b"id,__leasehold_line\n", "reserved"),
        (b'"id,at\n1,2\n', "unclosed quote"),
        (b"id,\xff\n", "not valid UTF-8"),
    ]:
        with pytest.raises(CsvHeaderError, match=why):
            staged(tmp_path, header + b"1,2,3\n", config())
    staging, rows = staged(tmp_path, b"\n\n", config())  # nothing but blank lines
    assert (staging.header, staging.records, rows) == ([], 0, [])


def test_without_a_header_the_schema_names_the_columns(tmp_path: Path) -> None:
    cfg = config(header=False, delimiter=";")
    staging, rows = staged(tmp_path, b'a;"x;y";1;2026-01-01\nb;z;2\n', cfg)
    assert staging.header == ["id", "name", "n", "at"]
    assert (rows[0]["name"], rows[0][LINE_KEY]) == ("x;y", 1)
    assert rows[1][ERROR_KEY] == "CSV record has 3 fields, the schema has 4"


def test_an_escape_character_and_invalid_utf8(tmp_path: Path) -> None:
    cfg = config(escape="\\")
    data = b'id,name,n,at\n1,"say \\"hi\\"",1,t\n2,caf\xe9,2,t\n'
    staging, rows = staged(tmp_path, data, cfg)
    assert rows[0]["name"] == 'say "hi"'
    assert (rows[1][ERROR_KEY], rows[1][RAW_KEY]) == ("invalid UTF-8", "2,caf\ufffd,2,t")
    assert staging.malformed == 1


def test_schema_columns_may_not_use_the_reserved_prefix(tmp_path: Path) -> None:
    streams = tmp_path / "streams.yaml"
    streams.write_text(
        "streams:\n  c:\n    source: file://s\n    format: csv\n"
        "    schema: {at: timestamp, __leasehold_raw: string}\n    event_time: at\n"
        "    table: file://t\n"
    )
    with pytest.raises(StreamConfigError, match="__leasehold_raw.*reserved"):
        load_streams(streams)


# --- random corpora: staging and chunking agree with what the csv module wrote ------------

FIELD = st.text(alphabet=["a", "é", " ", ",", '"', "\r", "\n", "\t", "x"], max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.lists(FIELD, min_size=3, max_size=3), max_size=12),
    terminator=st.sampled_from(["\r\n", "\n", "\r"]),
    bom=st.booleans(),
    gz=st.booleans(),
    budgets=st.lists(st.integers(min_value=1, max_value=120), min_size=1, max_size=4),
)
def test_random_corpora_stage_and_chunk_exactly(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[list[str]],
    terminator: str,
    bom: bool,
    gz: bool,
    budgets: list[int],
) -> None:
    tmp = tmp_path_factory.mktemp("corpus")
    header = ["a", "b", "c"]
    cfg = config({"a": "string", "b": "string", "c": "string"})
    # Python's writer quotes a field holding \r or \n only if the line terminator holds it:
    # with a bare \n or \r terminator it quotes every field, or its own reader could not
    # read it back either.
    options = {} if terminator == "\r\n" else {"quoting": csv.QUOTE_ALL}
    text = ("\ufeff" if bom else "") + written([header, *rows], terminator, **options)
    name = "o.csv.gz" if gz else "o.csv"
    _, whole = staged(tmp, text.encode(), cfg, name)
    # Every written row once, as written; a row of empty fields is nulls, not a blank line.
    assert [[r[k] for k in header] for r in whole] == [[v or None for v in row] for row in rows]
    line = 1 + len(LINE_BREAK.findall(written([header], terminator, **options)))
    for row, record in zip(rows, whole, strict=True):
        one = written([row], terminator, **options)
        assert (record[LINE_KEY], record[RAW_KEY]) == (line, one.removesuffix(terminator))
        line += len(LINE_BREAK.findall(one))
    # Cut into chunks (budgets cycled), each staged as the reader stages a chunk: the same
    # records with the same numbers, whatever the cuts; resuming at a cut changes nothing.
    source = tmp / name
    reader = ChunkReader(source, 0, 1, CsvFormat())
    chunked: list[dict[str, Any]] = []
    n, cuts = 0, []
    while True:
        cut = reader.next(budgets[n % len(budgets)], tmp / f"chunk-{n}.csv")
        target = tmp / f"chunk-{n}.jsonl"
        stage_csv(cut.path, target, cfg, first_line=cut.first_line - cut.header_lines)
        chunked += [json.loads(x) for x in target.read_text("utf-8").splitlines()]
        cuts.append((cut.offset, cut.line))
        n += 1
        if cut.last:
            break
    reader.close()
    assert chunked == whole
    data = gzip.decompress(source.read_bytes()) if gz else source.read_bytes()
    assert cuts[-1] == (len(data), 1 + len(LINE_BREAK.findall(text)))
    if len(cuts) > 1:  # a takeover resumes at a committed cut and reads the same rest
        offset, at = cuts[0]
        again = ChunkReader(source, offset, at, CsvFormat())
        cut = again.next(10**9, tmp / "rest.csv")
        again.close()
        stage_csv(cut.path, tmp / "rest.jsonl", cfg, first_line=cut.first_line - cut.header_lines)
        rest = [json.loads(x) for x in (tmp / "rest.jsonl").read_text("utf-8").splitlines()]
        assert rest == [r for r in whole if r[LINE_KEY] >= at]


def test_a_chunk_cut_never_falls_inside_a_quoted_line_break(tmp_path: Path) -> None:
    long_value = "line one\r\n" + "x" * 50 + "\r\nline three"
    text = written([["id", "v"], ["1", long_value], ["2", "short"]])
    source = tmp_path / "big.csv"
    source.write_text(text, newline="")
    first_line_end = text.index("\r\n", text.index("line one")) + 2
    reader = ChunkReader(source, 0, 1, CsvFormat())
    cut = reader.next(first_line_end - 5, tmp_path / "c1.csv")  # the budget ends mid-record
    assert cut.path.read_bytes() == written([["id", "v"], ["1", long_value]]).encode()
    assert (cut.first_line, cut.line, cut.last) == (1, 5, False)
    cut = reader.next(1, tmp_path / "c2.csv")
    reader.close()
    assert cut.path.read_bytes() == b"id,v\r\n2,short\r\n"
    assert (cut.first_line, cut.header_lines, cut.last) == (5, 1, True)


@pytest.mark.parametrize("name", ["big.csv", "big.csv.gz"])
def test_chunks_of_a_big_object_agree_with_the_whole_across_read_buffers(
    tmp_path: Path, name: str
) -> None:
    """Thousands of records with CRLF inside and between them: line breaks meet the text
    reader's buffer ends (8 KiB) in every way, and chunks still number records exactly."""
    rows = [[str(i), f"v{i}\r\n{'y' * (i % 37)}", f"{i}\r"] for i in range(3000)]
    cfg = config({"a": "string", "b": "string", "c": "string"})
    _, whole = staged(tmp_path, written([["a", "b", "c"], *rows]).encode(), cfg, name)
    assert [r["a"] for r in whole] == [str(i) for i in range(3000)]
    assert [r[LINE_KEY] for r in whole] == list(range(2, 2 + 3 * 3000, 3))
    for budget in (4096, 8191, 65536):
        reader = ChunkReader(tmp_path / name, 0, 1, CsvFormat())
        chunked: list[dict[str, Any]] = []
        n = 0
        while True:
            cut = reader.next(budget, tmp_path / f"{budget}-{n}.csv")
            target = tmp_path / f"{budget}-{n}.jsonl"
            stage_csv(cut.path, target, cfg, first_line=cut.first_line - cut.header_lines)
            chunked += [json.loads(x) for x in target.read_text("utf-8").splitlines()]
            n += 1
            if cut.last:
                break
        reader.close()
        assert n >= 2 and chunked == whole
