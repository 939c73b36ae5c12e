"""End to end on S3: sources and table objects in buckets on a loopback S3 server, coordination
in DynamoDB on the same server — the production configuration, over real HTTP."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import boto3
import pytest
from dagster import AssetSelection, materialize

from coordination_assets.ingestion import (
    build_ingestion_asset,
    build_ingestion_checks,
    partitions_for,
)
from resources.ingestion.partition_keys import from_partition_key
from resources.ingestion.sample_data import write_sample_sources
from resources.stores.settings import StoreSettings
from tests.dagster.test_discovery_sensor import tick
from tests.ingestion.test_ingestion_crash import launch, wait_for
from tests.support.pipeline_env import STREAM, PipelineEnv, source_ids, write_streams

pytestmark = pytest.mark.slow


@pytest.fixture
def s3_env(aws_server, tmp_path: Path, spark) -> PipelineEnv:
    s3 = boto3.client("s3", endpoint_url=aws_server.endpoint_url, region_name="us-east-1")
    src_bucket, lake_bucket = f"src-{uuid.uuid4().hex[:8]}", f"lake-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src_bucket)
    s3.create_bucket(Bucket=lake_bucket)
    local = tmp_path / "sources"
    write_sample_sources(local, objects=6, records_per_object=100, malformed_every=53)
    for path in local.rglob("*.jsonl"):
        s3.upload_file(str(path), src_bucket, f"events/{path.relative_to(local).as_posix()}")
    streams = write_streams(
        tmp_path / "streams.yaml", f"s3://{src_bucket}/events", f"s3://{lake_bucket}/events"
    )
    settings = StoreSettings(
        backend="dynamodb",
        table_name=f"coord-{uuid.uuid4().hex[:8]}",
        endpoint_url=aws_server.endpoint_url,
    )
    env = PipelineEnv(
        tmp_path, settings, streams, s3_endpoint_url=aws_server.endpoint_url, ownership_timeout_s=4
    )
    env.s3 = s3  # type: ignore[attr-defined]
    env.lake_bucket = lake_bucket  # type: ignore[attr-defined]
    return env


def lake_keys(env: PipelineEnv) -> set[str]:
    s3, bucket = env.s3, env.lake_bucket  # type: ignore[attr-defined]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {f"s3://{bucket}/{o['Key']}" for p in pages for o in p.get("Contents", [])}


def test_s3_end_to_end_exactly_once(s3_env: PipelineEnv, tmp_path: Path) -> None:
    env = s3_env
    instance, resources = env.instance(), env.resources()
    (run,) = tick(env, instance, resources, None).run_requests
    assert run.tags["leasehold/partition_count"] == "6"

    # A first attempt dies after publishing its objects to S3, before committing.
    first_key = instance.get_dynamic_partitions(partitions_for(STREAM).name)[0]
    env.key = from_partition_key(first_key)  # type: ignore[attr-defined]
    marker = tmp_path / "published"
    child = launch(env, marker, "published", 600)
    try:
        wait_for(marker, child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    orphaned = lake_keys(env)
    assert orphaned, "the dead attempt's objects are in the bucket"
    time.sleep(env.ownership_timeout_s + 0.5)

    # The range run ingests all six, the first one again under a new epoch.
    asset = build_ingestion_asset(STREAM)
    result = materialize([asset], instance=instance, resources=resources, tags=run.tags)
    assert result.success and len(result.get_asset_materialization_events()) == 6
    expected = source_ids(env.root / "sources")
    seen = Counter(r["event_id"] for r in env.table_rows())
    assert seen == expected and set(seen.values()) == {1}
    assert env.quarantined() == 600 - sum(expected.values())
    ledger = {o.url for o in env.store().ledger_objects(STREAM)}
    assert orphaned <= lake_keys(env) and not (orphaned & ledger)  # orphans never read

    again = materialize([asset], instance=instance, resources=resources, tags=run.tags)
    # Nothing ingested twice: each partition is only recorded again, as already complete.
    assert again.success and {
        (
            e.materialization.metadata["outcome"].value,
            e.materialization.metadata["recorded_before"].value,
        )
        for e in again.get_asset_materialization_events()
    } == {("already_complete", True)}
    recorded = instance.fetch_materializations(asset.key, limit=100).records
    assert len(recorded) == 12  # each partition's commit, then recorded again
    latest = {}  # newest first: the latest record of each partition, with its commit's counts
    for record in recorded:
        latest.setdefault(record.partition_key, record.asset_materialization)
    assert len(latest) == 6
    assert sum(m.metadata["rows_written"].value for m in latest.values()) == sum(expected.values())
    assert Counter(r["event_id"] for r in env.table_rows()) == expected

    checks = build_ingestion_checks(STREAM)
    evaluated = materialize(
        [asset, *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
    ).get_asset_check_evaluations()
    assert {e.check_name: e.passed for e in evaluated} == {
        "rows_reconcile": True,
        "unique_record_ids": True,
        "lease_health": True,
        "source_completeness": True,
        "changed_sources": True,
    }
