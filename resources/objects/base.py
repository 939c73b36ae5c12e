"""The object store interface, shared by the local directory and S3 (`local`, `s3`).

Keys are paths relative to the store's root URL (`file:///lake/events`, `s3://bucket/events`).
Listing is in key order strictly after a cursor — S3's `StartAfter` — which is what makes
discovery O(new objects) per tick. Spark never writes to S3 here: it writes locally and
`move_file` publishes the result.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.errors import ComponentUnreachableError, LeaseholdError


class ObjectStoreError(LeaseholdError):
    """An object store call that failed (the message names the call and the object)."""


class ObjectStoreUnreachableError(ObjectStoreError, ComponentUnreachableError):
    """An object store call failed after its bounded retries (endpoint down, throttling, no
    credentials): the message names the call and the object or prefix."""

    component = "an object store"


@dataclass(frozen=True)
class ObjectInfo:
    """One object as a listing gives it."""

    key: str
    size: int
    modified_ms: int
    """When the object was last written (local: its mtime; S3: `LastModified`, whole seconds):
    garbage collection deletes nothing younger than its safety delay, so a file written by an
    attempt that has not committed yet is never taken for an orphan."""
    etag: str = ""
    """Its fingerprint (`resources/objects/fingerprint.py`): S3's ETag without quotes, a local
    file's `mtime-<ns>-<size>`; empty where unknown."""


class ObjectStore(ABC):
    """Objects under one root URL, keyed by paths relative to it: a local directory
    (`LocalObjectStore`) or an S3 bucket and prefix (`S3ObjectStore`).

    A write is whole and atomic: a reader sees an object entirely or not at all (locally a
    temporary name renamed onto the key, on S3 one request). Listings are in key order.
    Errors, as each method's "Raises" names them: `ObjectStoreError` names the object and
    the action — on S3 a call still failing after the bounded, jittered retry (throttling,
    5xx, no connection), everywhere a key that escapes the root. What a method does not map
    comes as the backend's own error: `OSError` locally (disk full, permissions), botocore's
    `ClientError` on S3 (access denied, no such bucket)."""

    root_url: str

    @abstractmethod
    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        """Up to `limit` objects with key > `start_after` (None: from the first), in key
        order: discovery's cursor (S3's `StartAfter`). Read-only. Raises `ObjectStoreError`
        (S3: a page still failing after the retry)."""

    @abstractmethod
    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix` ("" = all), in key order, fetched a page
        at a time: garbage collection walks a whole table root without holding it in memory
        at once (S3) and without a cursor of its own. An object written during the walk may
        or may not appear. Read-only. Raises `ObjectStoreError` while iterating (S3: a page
        still failing after the retry)."""

    @abstractmethod
    def local_copy(self, key: str, scratch: Path) -> Path:
        """A local file with the object's bytes: the object itself for a local store (not to
        be changed or deleted), a download under `scratch` for S3 (the caller removes
        `scratch`). Raises `ObjectStoreError` when the object does not exist or cannot be
        fetched (S3: after the retry)."""

    @abstractmethod
    def move_file(self, local_path: Path, key: str) -> str:
        """Publish a local file under `key`, moving it (`local_path` is gone afterwards) and
        replacing any object there, atomically for readers; returns the object's URL. Its
        age (`ObjectInfo.modified_ms`) starts now. Raises `ObjectStoreError` (S3: the upload
        still failing after the retry; the local file is then kept), `OSError` locally."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """The object's whole content. Raises `ObjectStoreError` (S3: after the retry); an
        absent object raises the backend's own error (`FileNotFoundError` locally,
        botocore's `ClientError` `NoSuchKey` on S3): a caller that may meet one asks `size`
        first."""

    def get_buffer(self, key: str) -> bytes | memoryview:
        """`get_bytes`, for content that is large and only read (a key index): raises as it
        does. Here `get_bytes`; a local store maps the file instead of copying it."""
        return self.get_bytes(key)

    def head_bytes(self, key: str, n: int) -> bytes:
        """The object's first `n` bytes (all of it when shorter): enough to sample a source
        without fetching whole objects. Here by reading it all; backends read only the head.
        Raises as `get_bytes` does (S3 raises `ObjectStoreError` for an absent object too)."""
        return self.get_bytes(key)[:n]

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes `start` to `end` (exclusive) of the object, fewer where it ends sooner (none
        from `start` at or past its end): a Spark task reading its byte range of a large object.
        Here by reading it all; backends read only the range. Raises as `get_bytes` does."""
        return self.get_bytes(key)[start:end]

    @abstractmethod
    def put_bytes(self, key: str, data: bytes | memoryview) -> str:
        """Write `data` (bytes, or a view of them) as the object `key`, replacing any,
        atomically for readers; returns its URL. Raises `ObjectStoreError` (S3: after the
        retry), `OSError` locally."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object `key`. Idempotent: an absent object is no error. Raises
        `ObjectStoreError` (S3: after the retry), `OSError` locally."""

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each object of `keys`, as `delete` does (an absent one is no error). Here
        one call per key; S3 removes up to 1,000 per request. Raises as `delete` does; S3
        also `ObjectStoreError` naming the first key a batch could not remove (the others of
        the batch are gone: calling again is harmless)."""
        for key in keys:
            self.delete(key)

    def copy_to(self, key: str, other: ObjectStore, other_key: str) -> int | None:
        """Copy the object `key` to `other` under `other_key`, replacing any object there,
        atomically for readers (as `move_file`); the source is left as it is. Returns the
        bytes copied, None when `key` does not exist (nothing written). Here through a local
        file under a temporary directory; S3 to S3 on one endpoint copies server-side.
        Raises `ObjectStoreError` (S3: after the retry), `OSError` locally."""
        if self.size(key) is None:
            return None
        with tempfile.TemporaryDirectory(prefix="leasehold-copy-") as scratch:
            staged = Path(scratch) / "object"
            try:
                fetched = self.local_copy(key, Path(scratch))
            except ObjectStoreError:
                if self.size(key) is None:
                    return None  # deleted meanwhile
                raise
            if Path(scratch) in fetched.parents:
                fetched.replace(staged)
            else:  # the object itself (a local store): never moved away
                shutil.copyfile(fetched, staged)
            size = staged.stat().st_size
            other.move_file(staged, other_key)
        return size

    @abstractmethod
    def size(self, key: str) -> int | None:
        """The object's length in bytes, None if it does not exist: how a check confirms an
        object the ledger names is there, in full, without reading it. Raises
        `ObjectStoreError` (S3: a HEAD failing otherwise than not found, after the retry)."""

    def info(self, key: str) -> ObjectInfo | None:
        """The object as a listing would give it now — size and fingerprint (`etag`) — None if
        it does not exist: how clean-up makes sure an object is still the content that was
        ingested. Here from `size` alone (the fingerprint unknown: sizes are compared);
        backends give the fingerprint. Raises as `size` does."""
        size = self.size(key)
        return None if size is None else ObjectInfo(key, size, 0)

    def parquet_metadata(self, key: str) -> pq.FileMetaData:
        """A Parquet object's footer (row count, row groups, schema). Here by reading the
        whole object; backends override it to read only the footer. Raises
        `ObjectStoreError` when the object is not Parquet or its footer is unreadable (and
        when it is absent, in the backends; here as `get_bytes` does)."""
        return parquet_footer(self.get_bytes(key), self.url(key))

    def url(self, key: str) -> str:
        """The URL of `key`: `root_url/key` (what the ledger records). Pure: raises
        nothing."""
        return f"{self.root_url}/{key}"

    def key_of(self, url: str) -> str:
        """The key of `url` in this store (the inverse of `url`). Raises `ObjectStoreError`
        when `url` is not under `root_url`."""
        prefix = self.root_url + "/"
        if not url.startswith(prefix):
            raise ObjectStoreError(f"{url!r} is not under {self.root_url!r}")
        return url[len(prefix) :]

    def read_column(self, urls: list[str], column: str) -> pa.ChunkedArray:
        """One column across Parquet objects named by URL (the ledger's names), as Arrow: a
        check counts millions of record ids, which as Python objects cost seconds (BENCHMARKS.md,
        "The whole main job"). Read by name: an object that lacks the column (written with a
        schema version before it was added) gives a null per row, typed as the objects that
        hold it (`pa.null()` when none does). Raises `ObjectStoreError` for an object that
        cannot be fetched, `pa.ArrowException` for one that is not Parquet."""
        read: list[pa.Array | int] = []  # an object's chunks, or its row count if it lacks it
        for url in urls:
            with pq.ParquetFile(io.BytesIO(self.get_bytes(self.key_of(url)))) as file:
                if column in file.schema_arrow.names:
                    read.extend(file.read(columns=[column]).column(column).chunks)
                else:
                    read.append(file.metadata.num_rows)
        held = [c for c in read if not isinstance(c, int)]
        # a merged object (Spark) and a small one (pyarrow) may differ in type
        first = held[0].type if held else pa.null()
        chunks = [
            pa.nulls(c, first) if isinstance(c, int) else c if c.type == first else c.cast(first)
            for c in read
        ]
        return pa.chunked_array(chunks, first)


PARQUET_MAGIC = b"PAR1"


def parquet_footer(tail: bytes, url: str) -> pq.FileMetaData:
    """The metadata of a Parquet object from its last bytes: they must hold the whole footer
    (`<footer><4-byte little-endian length>PAR1`). pyarrow parses it without the rest of
    the file, so a remote object needs no more than a ranged read of its tail."""
    length = parquet_footer_length(tail, url)
    if length + 8 > len(tail):
        raise ObjectStoreError(f"{url}: the footer needs {length + 8} bytes, got {len(tail)}")
    try:
        return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))
    except (pa.ArrowException, OSError) as exc:
        raise ObjectStoreError(f"{url}: unreadable Parquet footer: {exc}") from exc


def parquet_footer_length(tail: bytes, url: str) -> int:
    """The footer's length from an object's last 8 bytes; refuses what is not Parquet."""
    if len(tail) < 12 or tail[-4:] != PARQUET_MAGIC:
        raise ObjectStoreError(f"{url} is not a Parquet object (no trailing {PARQUET_MAGIC!r})")
    return int.from_bytes(tail[-8:-4], "little")
