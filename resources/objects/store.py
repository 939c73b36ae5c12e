"""Object stores: a local directory (the embedded default) and S3, behind one interface.

Keys are paths relative to the store's root URL (`file:///lake/events`, `s3://bucket/events`).
Listing is in key order strictly after a cursor — S3's `StartAfter` — which is what makes
discovery O(new objects) per tick. Spark never writes to S3 here: it writes locally and
`move_file` publishes the result.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq

from resources.errors import LeaseholdError
from resources.retry import RetryPolicy, call_with_retries

T = TypeVar("T")

log = logging.getLogger(__name__)


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


class LocalObjectStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root_url = "file://" + str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise ObjectStoreError(f"key {key!r} escapes {self.root}")
        return path

    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        if not self.root.is_dir():
            return []
        keys = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name.startswith(".") or name.endswith(".tmp"):
                    continue  # in-flight writes, never source objects
                key = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
                if start_after is None or key > start_after:
                    keys.append(key)
        keys.sort()
        return [ObjectInfo(k, (self.root / k).stat().st_size) for k in keys[:limit]]

    def local_copy(self, key: str, scratch: Path) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise ObjectStoreError(f"{self.url(key)} does not exist")
        return path

    def move_file(self, local_path: Path, key: str) -> str:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
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

    def put_bytes(self, key: str, data: bytes) -> str:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return self.url(key)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class S3ObjectStore(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.root_url = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.retry = retry or RetryPolicy()
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region or "us-east-1",
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=30),
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, action: str, key: str, fn: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, ClientError):
                code = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                return code in ("SlowDown", "InternalError", "RequestTimeout") or status >= 500
            return isinstance(exc, BotoCoreError)

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return ObjectStoreError(
                f"S3 {action} of s3://{self.bucket}/{self._key(key)} failed after "
                f"{attempts} attempts: {exc}"
            )

        def retrying(exc: BaseException, attempts: int, delay: float) -> None:
            log.warning(
                "S3 %s of s3://%s/%s failed (attempt %d of %d), retrying in %.2f s: %s",
                action,
                self.bucket,
                self._key(key),
                attempts,
                self.retry.max_attempts,
                delay,
                exc,
            )

        return call_with_retries(
            fn, policy=self.retry, is_retryable=retryable, on_give_up=give_up, on_retry=retrying
        )

    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        base = self._key("") if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base}
        kwargs["StartAfter"] = self._key(start_after) if start_after is not None else base
        while len(out) < limit:
            page = self._call("list", "", lambda kw=dict(kwargs): self.client.list_objects_v2(**kw))
            for obj in page.get("Contents", []):
                out.append(ObjectInfo(obj["Key"][len(base) :], obj["Size"]))
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return out[:limit]

    def local_copy(self, key: str, scratch: Path) -> Path:
        from botocore.exceptions import ClientError

        target = scratch / uuid.uuid4().hex / Path(key).name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._call(
                "download",
                key,
                lambda: self.client.download_file(self.bucket, self._key(key), str(target)),
            )
        except ClientError as exc:
            raise ObjectStoreError(f"{self.url(key)}: {exc}") from exc
        return target

    def move_file(self, local_path: Path, key: str) -> str:
        self._call(
            "upload",
            key,
            lambda: self.client.upload_file(str(local_path), self.bucket, self._key(key)),
        )
        local_path.unlink()
        return self.url(key)

    def get_bytes(self, key: str) -> bytes:
        out = self._call(
            "get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        )
        return out["Body"].read()

    def put_bytes(self, key: str, data: bytes) -> str:
        self._call(
            "put",
            key,
            lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data),
        )
        return self.url(key)

    def delete(self, key: str) -> None:
        self._call(
            "delete",
            key,
            lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key)),
        )


def object_store_for(
    url: str, *, endpoint_url: str | None = None, region: str | None = None
) -> ObjectStore:
    if url.startswith("file://"):
        return LocalObjectStore(Path(url[len("file://") :]))
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://") :].partition("/")
        return S3ObjectStore(bucket, prefix, endpoint_url=endpoint_url, region=region)
    raise ObjectStoreError(f"{url!r}: only file:// and s3:// URLs are supported")
