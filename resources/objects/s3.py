"""The S3 object store (`s3://bucket/prefix` URLs), also any S3-compatible endpoint.

boto3's own retries are off: every call goes through `call_with_retries` (bounded, with jitter),
and a call that still fails raises `ObjectStoreError` naming the action and the object.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow.parquet as pq

from resources.aws_calls import aws_client, call_aws
from resources.objects.base import (
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnreachableError,
    parquet_footer,
    parquet_footer_length,
)
from resources.objects.fingerprint import bare_etag
from resources.retry import RetryPolicy

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CopySourceTypeDef, DeleteTypeDef

T = TypeVar("T")

log = logging.getLogger(__name__)

DELETE_BATCH = 1000
"""Keys one DeleteObjects request removes at most (S3's limit)."""
COPY_OBJECT_MAX = 5 * 1024**3
"""The largest object one CopyObject request copies (S3's limit); a bigger one is copied in
parts (UploadPartCopy) by boto3's managed copy."""

FOOTER_GUESS = 64 * 1024
"""Bytes of an object's tail read for its Parquet footer at first (ours are a few KiB)."""


class S3ObjectStore(ObjectStore):
    """The object store as an S3 bucket and prefix (`s3://`), every call retried with bounded
    backoff."""

    list_page_size = 1000
    """Keys per list request (S3's maximum); the contract tests lower it to cross pages."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.prefix = prefix.strip("/")
        self.root_url = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.retry = retry or RetryPolicy()
        self.client = aws_client(
            "s3",
            endpoint_url=endpoint_url,
            region=region or "us-east-1",
            # Discovery HEADs objects 16 at a time (resources/ingestion/notification_discovery.py).
            max_pool_connections=32,
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, action: str, key: str, fn: Callable[[], T]) -> T:
        what = f"S3 {action} of s3://{self.bucket}/{self._key(key)}"

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return ObjectStoreUnreachableError(f"{what} failed after {attempts} attempts: {exc}")

        return call_aws(what, fn, policy=self.retry, give_up=give_up, logger=log)

    def list_after(self, start_after: str | None, limit: int) -> list[ObjectInfo]:
        base = self._key("") if self.prefix else ""
        start = self._key(start_after) if start_after is not None else base
        return list(itertools.islice(self._pages(base, start), limit))

    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        return self._pages(self._key(prefix), None)

    def _pages(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """Objects under `prefix` (a bucket key prefix), in key order, one page per request,
        fetched only as far as the caller reads."""
        base = self._key("") if self.prefix else ""
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": prefix,
            "MaxKeys": self.list_page_size,
        }
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        while True:
            page = self._call("list", "", partial(self.client.list_objects_v2, **kwargs))
            for obj in page.get("Contents", []):
                modified = int(obj["LastModified"].timestamp() * 1000)
                etag = bare_etag(obj.get("ETag"))
                yield ObjectInfo(obj["Key"][len(base) :], obj["Size"], modified, etag)
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

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

    def head_bytes(self, key: str, n: int) -> bytes:
        """One ranged GET of the first `n` bytes (`read_range`)."""
        return self.read_range(key, 0, n)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """One ranged GET (none for an empty range: S3 refuses a range past an object's end)."""
        from botocore.exceptions import ClientError

        if end <= start:
            return b""

        def get() -> Any:
            return self.client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{end - 1}"
            )

        try:
            body: bytes = self._call("ranged get", key, get)["Body"].read()
            return body
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # `start` at or past the object's end
            raise ObjectStoreError(f"S3 ranged get of {self.url(key)} failed: {exc}") from exc

    def put_bytes(self, key: str, data: bytes | memoryview) -> str:
        body = data if isinstance(data, bytes) else bytes(data)  # botocore sends bytes or files
        self._call(
            "put",
            key,
            lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body),
        )
        return self.url(key)

    def size(self, key: str) -> int | None:
        info = self.info(key)
        return None if info is None else info.size

    def info(self, key: str) -> ObjectInfo | None:
        """One HEAD: `ContentLength`, `LastModified` and the `ETag` without quotes."""
        from botocore.exceptions import ClientError

        try:
            head = self._call(
                "head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            )
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise ObjectStoreError(f"S3 head of {self.url(key)} failed: {exc}") from exc
        modified = int(head["LastModified"].timestamp() * 1000)
        return ObjectInfo(key, int(head["ContentLength"]), modified, bare_etag(head.get("ETag")))

    def parquet_metadata(self, key: str) -> pq.FileMetaData:
        """Ranged reads of the tail only: one GET of the last `FOOTER_GUESS` bytes holds the
        footer of any ordinary object (a whole small object comes back as it is); a bigger
        footer costs a second GET of exactly its length."""
        url = self.url(key)
        tail = self._tail(key, FOOTER_GUESS)
        length = parquet_footer_length(tail, url)
        if length + 8 > len(tail):
            tail = self._tail(key, length + 8)
        return parquet_footer(tail, url)

    def _tail(self, key: str, n: int) -> bytes:
        from botocore.exceptions import ClientError

        def get() -> Any:
            return self.client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes=-{n}"
            )

        try:
            body: bytes = self._call("ranged get", key, get)["Body"].read()
            return body
        except ClientError as exc:
            raise ObjectStoreError(f"S3 ranged get of {self.url(key)} failed: {exc}") from exc

    def delete(self, key: str) -> None:
        self._call(
            "delete",
            key,
            lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key)),
        )

    def delete_many(self, keys: Sequence[str]) -> None:
        """DeleteObjects, up to `DELETE_BATCH` keys per request."""
        keys = list(keys)
        for start in range(0, len(keys), DELETE_BATCH):
            chunk = keys[start : start + DELETE_BATCH]
            request: DeleteTypeDef = {
                "Objects": [{"Key": self._key(k)} for k in chunk],
                "Quiet": True,
            }
            out = self._call(
                "delete",
                chunk[0],
                partial(self.client.delete_objects, Bucket=self.bucket, Delete=request),
            )
            errors = out.get("Errors", [])
            if errors:
                first = errors[0]
                raise ObjectStoreError(
                    f"S3 delete of {len(errors)} of {len(chunk)} objects under {self.root_url} "
                    f"failed; first s3://{self.bucket}/{first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message')}"
                )

    def copy_to(self, key: str, other: ObjectStore, other_key: str) -> int | None:
        """Server-side (CopyObject; boto3's managed copy in parts past `COPY_OBJECT_MAX`) when
        `other` is S3 on the same endpoint; else through a local file (the base's way)."""
        if not isinstance(other, S3ObjectStore) or other.endpoint_url != self.endpoint_url:
            return super().copy_to(key, other, other_key)
        from botocore.exceptions import ClientError

        size = self.size(key)
        if size is None:
            return None
        bucket, target = other.bucket, other._key(other_key)
        source: CopySourceTypeDef = {"Bucket": self.bucket, "Key": self._key(key)}

        def copy() -> object:
            if size <= COPY_OBJECT_MAX:
                return other.client.copy_object(CopySource=source, Bucket=bucket, Key=target)
            other.client.copy(source, bucket, target)
            return None

        try:
            self._call("copy", key, copy)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None  # deleted since the HEAD (a missing bucket is an error)
            raise ObjectStoreError(f"S3 copy of {self.url(key)} failed: {exc}") from exc
        return size
