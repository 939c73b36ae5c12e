"""`object_store_for`: the object store a URL names. Apart from `base`, which every backend
imports, so that choosing a backend does not make `base` import the backends back."""

from __future__ import annotations

from pathlib import Path

from resources.objects.base import ObjectStore, ObjectStoreError
from resources.objects.local import LocalObjectStore
from resources.objects.s3 import S3ObjectStore


def object_store_for(
    url: str, *, endpoint_url: str | None = None, region: str | None = None
) -> ObjectStore:
    """The store at `url`: `file://` a local directory, `s3://` a bucket and prefix."""
    if url.startswith("file://"):
        return LocalObjectStore(Path(url[len("file://") :]))
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://") :].partition("/")
        return S3ObjectStore(bucket, prefix, endpoint_url=endpoint_url, region=region)
    raise ObjectStoreError(f"{url!r}: only file:// and s3:// URLs are supported")
