"""The local object store: a directory, the embedded default (`file://` URLs).

Writes are atomic: a file is moved into place (or copied under a temporary name, then renamed),
so a reader or a listing never sees half an object; in-flight temporary names are never listed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.objects.base import (
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    parquet_footer_length,
)
from resources.objects.fingerprint import file_etag


class LocalObjectStore(ObjectStore):
    """The object store as a local directory (`file://`)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root_url = "file://" + str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise ObjectStoreError(f"key {key!r} escapes {self.root}")
        return path

    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        """In key order after `start_after`, walking only what can hold such keys: a directory
        whose every key sorts before `start_after` is skipped unread, and the walk stops at
        `limit`. So a discovery tick costs what is new plus the one directory its cursor is in,
        not the whole source (as S3's `StartAfter` does)."""
        keys = list(itertools.islice(self._keys_after(self.root, "", start_after), limit))
        return list(self._infos(keys, limit))

    def _keys_after(self, directory: Path, prefix: str, start_after: str | None) -> Iterator[str]:
        """Keys under `directory` (whose keys start with `prefix`) after `start_after`, in key
        order. Entries are ordered as their keys are: a directory `d` by `d/`, so `d.txt` comes
        before everything in `d` (`.` sorts before `/`)."""
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        named = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                if not entry.is_symlink():  # as os.walk: a linked directory is not walked
                    named.append((f"{prefix}{entry.name}/", entry))
            elif not entry.name.endswith(".tmp"):  # in-flight writes, never source objects
                named.append((f"{prefix}{entry.name}", entry))
        for key, entry in sorted(named, key=lambda pair: pair[0]):
            if not key.endswith("/"):
                if start_after is None or key > start_after:
                    yield key
            elif start_after is None or key > start_after or start_after.startswith(key):
                # A directory key below the cursor that the cursor is not inside holds only
                # keys below it: skipped unread.
                yield from self._keys_after(Path(entry.path), key, start_after)

    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        # Walk only the deepest directory the prefix names in full ("merged/dt=x/" -> merged/dt=x).
        directory, _, _ = prefix.rpartition("/")
        start = self._path(directory) if directory else self.root
        keys = sorted(k for k in self._keys(start) if k.startswith(prefix))
        return self._infos(keys, len(keys))

    def _keys(self, start: Path) -> Iterator[str]:
        if not start.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name.startswith(".") or name.endswith(".tmp"):
                    continue  # in-flight writes, never source objects
                yield name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")

    def _infos(self, keys: list[str], limit: int) -> Iterator[ObjectInfo]:
        """Each key's size and mtime, read as it is reached; one deleted since the walk is
        skipped (it is no longer an object)."""
        for key in keys[:limit]:
            try:
                st = (self.root / key).stat()
            except FileNotFoundError:
                continue
            yield _info(key, st)

    def local_copy(self, key: str, scratch: Path) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise ObjectStoreError(f"{self.url(key)} does not exist")
        return path

    def move_file(self, local_path: Path, key: str) -> str:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        # The object's age starts now, not when the local file was written: garbage collection
        # takes an old enough object nothing names for an orphan. (Before the rename, so the
        # object never appears with the old mtime.)
        os.utime(local_path)
        try:
            os.replace(local_path, target)
        except OSError:  # another filesystem: copy to a temp name, then rename atomically
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, target)
            local_path.unlink()
        return self.url(key)

    def get_bytes(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def get_buffer(self, key: str) -> bytes | memoryview:
        """A read-only map of the file: its pages are read as they are used, and the mapping
        keeps them even if the key is replaced or removed meanwhile."""
        path = self._path(key)
        if not path.stat().st_size:  # an empty file cannot be mapped
            return b""
        return memoryview(pa.memory_map(str(path)).read_buffer())

    def head_bytes(self, key: str, n: int) -> bytes:
        return self.read_range(key, 0, n)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        with self._path(key).open("rb") as f:
            f.seek(start)
            return f.read(max(end - start, 0))

    def put_bytes(self, key: str, data: bytes | memoryview) -> str:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return self.url(key)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def size(self, key: str) -> int | None:
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    def info(self, key: str) -> ObjectInfo | None:
        """One `stat`: size, mtime and the fingerprint `mtime-<ns>-<size>`."""
        path = self._path(key)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return _info(key, st) if path.is_file() else None

    def parquet_metadata(self, key: str) -> pq.FileMetaData:
        """Only the footer is read: pyarrow seeks to the end of the file."""
        path = self._path(key)
        if not path.is_file():
            raise ObjectStoreError(f"{self.url(key)} does not exist")
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 12))
            parquet_footer_length(f.read(), self.url(key))  # refuses what is not Parquet
        try:
            return pq.read_metadata(path)
        except (pa.ArrowException, OSError) as exc:
            raise ObjectStoreError(f"{self.url(key)}: unreadable Parquet footer: {exc}") from exc


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    """A file's `ObjectInfo` from its `stat`: its fingerprint is its mtime (ns) and size."""
    return ObjectInfo(
        key, st.st_size, st.st_mtime_ns // 1_000_000, file_etag(st.st_mtime_ns, st.st_size)
    )
