"""The object store interface, shared by the local directory and S3 (`local`, `s3`).

Keys are paths relative to the store's root URL (`file:///lake/events`, `s3://bucket/events`).
Listing is in key order strictly after a cursor — S3's `StartAfter` — which is what makes
discovery O(new objects) per tick. Spark never writes to S3 here: it writes locally and
`move_file` publishes the result.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from resources.errors import LeaseholdError


class ObjectStoreError(LeaseholdError):
    pass


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(ABC):
    root_url: str

    @abstractmethod
    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        """Up to `limit` objects with key > `start_after`, in key order."""

    @abstractmethod
    def local_copy(self, key: str, scratch: Path) -> Path:
        """A local file with the object's bytes (the object itself for a local store)."""

    @abstractmethod
    def move_file(self, local_path: Path, key: str) -> str:
        """Publish a local file under `key` (moving it); returns the object's URL."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> str: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Idempotent."""

    def url(self, key: str) -> str:
        return f"{self.root_url}/{key}"

    def key_of(self, url: str) -> str:
        prefix = self.root_url + "/"
        if not url.startswith(prefix):
            raise ObjectStoreError(f"{url!r} is not under {self.root_url!r}")
        return url[len(prefix) :]

    def read_column(self, urls: list[str], column: str) -> list[Any]:
        """One column across Parquet objects named by URL (the ledger's names)."""
        values: list[Any] = []
        for url in urls:
            table = pq.read_table(io.BytesIO(self.get_bytes(self.key_of(url))), columns=[column])
            values.extend(table.column(column).to_pylist())
        return values


def object_store_for(
    url: str, *, endpoint_url: str | None = None, region: str | None = None
) -> ObjectStore:
    """The store at `url`: `file://` a local directory, `s3://` a bucket and prefix. (The
    backends are imported here, not at the top: each of them imports this module.)"""
    from resources.objects.local import LocalObjectStore
    from resources.objects.s3 import S3ObjectStore

    if url.startswith("file://"):
        return LocalObjectStore(Path(url[len("file://") :]))
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://") :].partition("/")
        return S3ObjectStore(bucket, prefix, endpoint_url=endpoint_url, region=region)
    raise ObjectStoreError(f"{url!r}: only file:// and s3:// URLs are supported")
