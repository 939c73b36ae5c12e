"""Adding one key-value pair to a Parquet file's footer in place, without touching its data.

Spark writes a Parquet file's key-value metadata itself (its version, its schema as JSON) and
takes no other: neither a write option nor a Hadoop setting reaches the footer
(`ParquetOutputFormat` in parquet-java 1.17 has no key for it). A merged object written by
Spark must still say which schema version it holds (`leasehold.schema_version`), so the merge
patches the footer afterwards.

A Parquet file is `PAR1 <data pages> <footer> <footer length, 4 bytes LE> PAR1`; the footer is
the Thrift compact-protocol encoding of `FileMetaData`, whose field 5 is
`key_value_metadata: list<KeyValue>`. Every offset the footer holds (row groups, column chunks,
page indexes) points before it, so the footer can be decoded, given one more `KeyValue` (or an
existing key a new value) and written back over the old one: the cost is the footer's size,
whatever the data's (BENCHMARKS.md, "Merges across schema versions"). The rest of the footer —
`created_by`, column orders, statistics — is copied byte for byte.

Only what this needs of the compact protocol is here: walking (skipping) any value, and
writing a list of `KeyValue` structs and field headers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"PAR1"
ENCRYPTED_MAGIC = b"PARE"
KEY_VALUE_FIELD = 5
"""`FileMetaData.key_value_metadata`."""

# Compact protocol type ids.
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(14)


class FooterPatchError(ValueError):
    """The file is not a plain (unencrypted) Parquet file whose footer this code can decode."""


@dataclass(frozen=True)
class _Field:
    id: int
    type: int
    payload: bytes
    """The field's value as encoded (empty for a boolean: its value is the type)."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterPatchError("the footer ends inside a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise FooterPatchError("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FooterPatchError("the footer ends inside a value")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def field_header(self, last_id: int) -> tuple[int, int] | None:
        """(field id, type) of the next field, or None at the struct's STOP."""
        b = self.byte()
        kind = b & 0x0F
        if kind == STOP:
            return None
        delta = b >> 4
        return (last_id + delta if delta else self.zigzag()), kind

    def skip(self, kind: int) -> None:
        """Step over one value of `kind` (a struct field's boolean has no payload: not here)."""
        if kind in (TRUE, FALSE, BYTE):
            self.take(1)
        elif kind in (I16, I32, I64):
            self.varint()
        elif kind == DOUBLE:
            self.take(8)
        elif kind == UUID:
            self.take(16)
        elif kind == BINARY:
            self.take(self.varint())
        elif kind in (LIST, SET):
            size, element = self.list_header()
            for _ in range(size):
                self.skip(element)
        elif kind == MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == STRUCT:
            self.struct_fields()
        else:
            raise FooterPatchError(f"unknown Thrift compact type {kind}")

    def list_header(self) -> tuple[int, int]:
        b = self.byte()
        size = b >> 4
        if size == 15:
            size = self.varint()
        return size, b & 0x0F

    def struct_fields(self) -> list[_Field]:
        """Every field of the struct starting here, with its encoded value, up to its STOP."""
        fields: list[_Field] = []
        last = 0
        while (header := self.field_header(last)) is not None:
            field_id, kind = header
            start = self.pos
            if kind not in (TRUE, FALSE):
                self.skip(kind)
            fields.append(_Field(field_id, kind, self.data[start : self.pos]))
            last = field_id
        return fields


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _binary(value: bytes) -> bytes:
    return _varint(len(value)) + value


def _struct(fields: list[_Field]) -> bytes:
    out = bytearray()
    last = 0
    for f in fields:
        delta = f.id - last
        if 0 < delta <= 15:
            out.append((delta << 4) | f.type)
        else:
            out.append(f.type)
            out += _zigzag(f.id)
        out += f.payload
        last = f.id
    out.append(STOP)
    return bytes(out)


def _key_values(payload: bytes) -> list[tuple[bytes, bytes | None]]:
    """The (key, value) pairs of an encoded `list<KeyValue>`."""
    reader = _Reader(payload)
    size, element = reader.list_header()
    if size and element != STRUCT:
        raise FooterPatchError(f"key_value_metadata holds type {element}, not KeyValue structs")
    pairs: list[tuple[bytes, bytes | None]] = []
    for _ in range(size):
        fields = {f.id: f for f in reader.struct_fields()}
        if 1 not in fields:
            raise FooterPatchError("a KeyValue without a key")
        key = _Reader(fields[1].payload)
        value = None
        if 2 in fields:
            raw = _Reader(fields[2].payload)
            value = raw.take(raw.varint())
        pairs.append((key.take(key.varint()), value))
    return pairs


def _key_value_list(pairs: list[tuple[bytes, bytes | None]]) -> bytes:
    size = len(pairs)
    out = bytearray([(size << 4 | STRUCT) if size < 15 else (0xF0 | STRUCT)])
    if size >= 15:
        out += _varint(size)
    for key, value in pairs:
        fields = [_Field(1, BINARY, _binary(key))]
        if value is not None:
            fields.append(_Field(2, BINARY, _binary(value)))
        out += _struct(fields)
    return bytes(out)


def with_key_value(footer: bytes, key: bytes, value: bytes) -> bytes:
    """`footer` (an encoded `FileMetaData`) with `key` set to `value` in its key-value
    metadata: appended, or replacing the value of an entry with that key; every other field
    as it was. Raises `FooterPatchError` if `footer` does not decode."""
    reader = _Reader(footer)
    fields = reader.struct_fields()
    if reader.pos != len(footer):
        raise FooterPatchError(f"{len(footer) - reader.pos} bytes after the footer's end")
    current = next((f for f in fields if f.id == KEY_VALUE_FIELD), None)
    if current is not None and current.type != LIST:
        raise FooterPatchError(f"key_value_metadata has type {current.type}, not a list")
    pairs = [] if current is None else _key_values(current.payload)
    pairs = [(k, v) for k, v in pairs if k != key] + [(key, value)]
    patched = _Field(KEY_VALUE_FIELD, LIST, _key_value_list(pairs))
    others = [f for f in fields if f.id != KEY_VALUE_FIELD]
    return _struct(sorted([*others, patched], key=lambda f: f.id))


def set_key_value(path: Path, key: bytes, value: bytes) -> None:
    """Set `key` to `value` in the key-value metadata of the Parquet file at `path`, in place:
    the footer is read, patched (`with_key_value`) and written over the old one, the file
    truncated to its new end and synced. The data pages are neither read nor moved. Raises
    `FooterPatchError` for a file that is not plain Parquet (an encrypted footer, a bad
    magic or length), `OSError` if it cannot be read or written. Not atomic: patch a file
    nothing else reads yet (the merge patches Spark's part file before renaming it)."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 12:
            raise FooterPatchError(f"{path}: {size} bytes is not a Parquet file")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] == ENCRYPTED_MAGIC:
            raise FooterPatchError(f"{path}: an encrypted footer cannot be patched")
        if tail[4:] != MAGIC:
            raise FooterPatchError(f"{path} does not end with {MAGIC!r}")
        length = int.from_bytes(tail[:4], "little")
        start = size - 8 - length
        if start < len(MAGIC):
            raise FooterPatchError(f"{path}: a footer of {length} bytes does not fit")
        f.seek(start)
        footer = f.read(length)
        patched = with_key_value(footer, key, value)
        f.seek(start)
        f.write(patched + len(patched).to_bytes(4, "little") + MAGIC)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())
