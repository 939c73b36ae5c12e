"""`source_cleaner`: a stream's `SourceCleaner` with its source and archive stores opened, the
one way the CLI and the Dagster job build it."""

from __future__ import annotations

from resources.cleanup.cleaner import SourceCleaner
from resources.objects.factory import object_store_for
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig


def source_cleaner(
    config: StreamConfig,
    store: CoordinationStore,
    *,
    endpoint_url: str | None,
    region: str | None,
    objects_per_pass: int,
    owner: str,
    timeout_s: float,
) -> SourceCleaner:
    """The stream's cleaner: its source store, and its `archive_to` store in archive mode, on
    the lake's S3 endpoint and region. Opens no connection yet (a client is built, not used).
    Raises `ObjectStoreError` for a URL that is neither file:// nor s3://."""
    archive_to = config.source_cleanup.archive_to
    return SourceCleaner(
        config,
        store,
        object_store_for(config.source, endpoint_url=endpoint_url, region=region),
        None
        if archive_to is None
        else object_store_for(archive_to, endpoint_url=endpoint_url, region=region),
        objects_per_pass=objects_per_pass,
        owner=owner,
        timeout_s=timeout_s,
    )
