"""A key-value pair added to a Parquet footer in place: the data untouched, the rest of the
footer as it was, readers (pyarrow here, Spark in the merge writer's tests) reading it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.compaction.parquet_footer import FooterPatchError, set_key_value

KEY = b"leasehold.schema_version"


def table(rows: int = 1000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": [None if i % 9 == 0 else f"n{i % 17}" for i in range(rows)],
            "at": pa.array(range(rows), pa.timestamp("us", tz="UTC")),
        }
    )


def footer_start(path: Path) -> int:
    data = path.read_bytes()
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


def described(path: Path) -> tuple[object, ...]:
    """What the footer says besides its key-value metadata."""
    meta = pq.read_metadata(path)
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    return (
        meta.num_rows,
        meta.created_by,
        meta.schema.to_arrow_schema().remove_metadata(),
        [(g.num_rows, g.total_byte_size) for g in groups],
        [g.column(c).statistics.to_dict() for g in groups for c in range(g.num_columns)],
        [g.column(c).data_page_offset for g in groups for c in range(g.num_columns)],
    )


@pytest.mark.parametrize(
    "metadata",
    [
        None,  # no key-value metadata at all: the field is inserted
        {b"a": b"1"},
        {f"k{i:02d}".encode(): b"v" * i for i in range(20)},  # a list header's long form
        {KEY: b"1", b"z": b""},  # the key there already: its value replaced
    ],
    ids=["none", "one", "twenty", "replaced"],
)
def test_sets_the_key_and_keeps_everything_else(tmp_path: Path, metadata: dict | None) -> None:
    path = tmp_path / "f.parquet"
    rows = table()
    pq.write_table(
        rows if metadata is None else rows.replace_schema_metadata(metadata),
        path,
        row_group_size=128,
        store_schema=metadata is not None,
        write_page_index=True,
    )
    before, data_before = described(path), path.read_bytes()[: footer_start(path)]

    set_key_value(path, KEY, b"2")

    after = pq.read_metadata(path)
    assert after.metadata[KEY] == b"2"
    others = {k: v for k, v in (metadata or {}).items() if k != KEY}
    assert {k: v for k, v in after.metadata.items() if k not in (KEY, b"ARROW:schema")} == others
    assert described(path) == before
    assert path.read_bytes()[: footer_start(path)] == data_before  # no data byte moved
    assert pq.read_table(path).select(rows.column_names).to_pylist() == rows.to_pylist()

    set_key_value(path, KEY, b"13")  # again: replaced, not added twice
    assert pq.read_metadata(path).metadata[KEY] == b"13"
    assert len(pq.read_metadata(path).metadata) == len(after.metadata)


@pytest.mark.parametrize(
    "content", [b"", b"PAR1", b"PAR1" + b"\x00" * 20 + b"PARE", b"not parquet at all, no"]
)
def test_refuses_what_is_not_plain_parquet(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "f.parquet"
    path.write_bytes(content)
    with pytest.raises(FooterPatchError):
        set_key_value(path, KEY, b"2")
    assert path.read_bytes() == content


def test_refuses_a_footer_that_does_not_decode(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(table(10), path)
    data = bytearray(path.read_bytes())
    start = footer_start(path)
    data[start : len(data) - 8] = b"\xff" * (len(data) - 8 - start)
    path.write_bytes(bytes(data))
    with pytest.raises(FooterPatchError):
        set_key_value(path, KEY, b"2")
    assert path.read_bytes() == bytes(data)
