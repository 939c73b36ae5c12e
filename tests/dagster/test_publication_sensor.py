"""The publication sensor, the published-table asset, its checks, the GC job and `leasehold run`'s
publication loop against a real Dagster instance, store, catalog file and Spark."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from dagster import (
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    RunRequest,
    SensorResult,
    build_sensor_context,
    materialize,
)

from coordination_assets.main_job import run_stream
from coordination_assets.publication import (
    FAILED_PUBLICATIONS,
    build_gc_job,
    build_publication_asset,
    build_publication_checks,
    build_publication_sensor,
    table_asset_key,
)
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.instance import write_instance_yaml
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    DUE_ONLY_TAG,
    GC_TAG,
    PUBLISH_TAG,
    RANGE_END,
    RANGE_START,
)
from resources.ingestion.sample_data import write_sample_sources
from resources.objects.factory import object_store_for
from resources.publication.checks import CHECKS
from resources.publication.manifest import parse_spectrum_json
from resources.publication.outcome import FAILED, PublicationOutcome
from resources.publication.publisher import Publisher
from tests.dagster.test_discovery_sensor import queue
from tests.dagster.test_merge_sensor import DATES, env, ingest, merge_tick, run_merge
from tests.support.pipeline_env import STREAM, PipelineEnv

__all__ = ["env"]  # the fixture, shared with the merge sensor's tests


def publish_tick(instance, resources, cursor: str | None = None) -> SensorResult:
    with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        result = build_publication_sensor(STREAM)(ctx)
    assert isinstance(result, SensorResult)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(f"{STREAM}_dates", request.partition_keys)
    return result


def run_publish(instance, resources, request: RunRequest):
    return materialize(
        [build_publication_asset(STREAM)],
        instance=instance,
        resources=resources,
        tags=request.tags,
        raise_on_error=False,
    )


def published(outcome) -> dict[str, dict]:
    """dt -> the metadata of its materialization in the run."""
    return {
        str(e.partition): {k: v.value for k, v in e.materialization.metadata.items()}
        for e in outcome.get_asset_materialization_events()
    }


def committed_rows(env: PipelineEnv, dt: str) -> int:
    return sum(o.row_count for o in env.store().ledger_objects(STREAM, dt))


def catalog(env: PipelineEnv):
    """The stream's publication target, opened afresh as an engine opens it: nothing cached
    from the runs."""
    return env.catalog().target(env.lake().stream(STREAM).table_format, env.lake())


def test_live_partitions_are_published_then_switched_after_their_merge(env: PipelineEnv, spark):
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)  # three objects on each of three past days, not merged
    first = publish_tick(instance, resources)
    assert list(instance.get_dynamic_partitions(f"{STREAM}_dates")) == DATES
    (request,) = first.run_requests
    assert request.tags[PUBLISH_TAG] == STREAM and request.tags[DUE_ONLY_TAG] == "true"
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (DATES[0], DATES[-1])

    live = run_publish(instance, resources, request)
    assert live.success
    events = published(live)
    assert sorted(events) == DATES
    objects = object_store_for(resources["lake"].stream(STREAM).table)
    for dt, metadata in events.items():
        assert metadata["kind"] == "live" and metadata["switched"] is False
        assert (metadata["seq"], metadata["manifest_version"], metadata["upper"]) == (1, 0, 3)
        assert metadata["files"] == 3 and metadata["rows"] == committed_rows(env, dt)
        assert metadata["dagster/row_count"] == metadata["rows"]  # what Dagster plots
        assert metadata["switched_now"] is False
        partition = catalog(env).partition(STREAM, dt)
        assert partition is not None
        assert (partition.location, partition.seq) == (metadata["location"], 1)
        manifest = metadata["manifest"]
        entries = parse_spectrum_json(objects.get_bytes(objects.key_of(manifest)), manifest)
        assert len(entries) == 3
    idle = publish_tick(instance, resources, first.cursor)
    assert not idle.run_requests and "up to date" in str(idle.skip_reason)

    (merge,) = merge_tick(instance, resources).run_requests
    assert run_merge(instance, resources, merge).success
    (request,) = publish_tick(instance, resources, idle.cursor).run_requests
    switched = run_publish(instance, resources, request)
    assert switched.success
    for dt, metadata in published(switched).items():
        assert metadata["kind"] == "merged" and metadata["switched_now"] is True
        assert (metadata["seq"], metadata["manifest_version"], metadata["upper"]) == (2, 3, 3)
        assert metadata["files"] == 1 and metadata["rows"] == committed_rows(env, dt)
        assert catalog(env).partition(STREAM, dt).seq == 2  # type: ignore[union-attr]

    checks = build_publication_checks(STREAM)
    check_run = materialize(
        [build_publication_asset(STREAM), *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
    )
    evaluations = check_run.get_asset_check_evaluations()
    assert sorted(e.check_name for e in evaluations) == sorted(CHECKS)
    assert all(e.passed for e in evaluations), [e.metadata for e in evaluations]


def test_a_publication_run_in_flight_is_not_asked_for_twice(env: PipelineEnv, spark):
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    first = publish_tick(instance, resources)
    (request,) = first.run_requests
    queued = queue(instance, request)
    waiting = publish_tick(instance, resources, first.cursor)
    assert not waiting.run_requests and "in flight" in str(waiting.skip_reason)
    instance.report_run_failed(queued)  # failed before it published anything: asked again
    (retry,) = publish_tick(instance, resources, waiting.cursor).run_requests
    assert (retry.tags[RANGE_START], retry.tags[RANGE_END]) == (DATES[0], DATES[-1])


def test_the_instance_runs_one_publication_and_one_gc_at_a_time_per_stream(tmp_path: Path):
    """The queue's limits: per value of the tag (the stream), so streams do not wait on each
    other."""
    write_instance_yaml(tmp_path)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    for tag in (PUBLISH_TAG, GC_TAG):
        (limit,) = [limit for limit in limits if limit["key"] == tag]
        assert limit == {"key": tag, "limit": 1, "value": {"applyLimitPerUniqueValue": True}}


def test_publications_dagster_missed_are_recorded_without_a_run(env: PipelineEnv, spark):
    """A publication run killed after the ledger and catalog took its publications, before
    Dagster recorded them: the next tick records them from the ledger, once."""
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    first = publish_tick(instance, resources)
    (request,) = first.run_requests
    publisher = resources["catalog"].publisher(STREAM, resources["coordination"], resources["lake"])
    assert [o.outcome for o in publisher.publish(DATES[:2])] == ["published", "published"]
    instance.report_run_failed(queue(instance, request, DagsterRunStatus.STARTED))

    result = publish_tick(instance, resources, first.cursor)
    assert sorted(str(e.partition) for e in result.asset_events) == DATES[:2]
    for event in result.asset_events:
        assert event.metadata["seq"].value == 1
        assert "ended badly" in str(event.metadata["recorded_by"].value)
        instance.report_runless_asset_event(event)
    (retry,) = result.run_requests  # the third day is still due
    assert retry.tags[RANGE_START] == retry.tags[RANGE_END] == DATES[2]
    assert not publish_tick(instance, resources, result.cursor).asset_events


class OneFailingCatalog(CatalogResource):
    """Its publisher fails `failing_dt` as a catalog that stays unreachable would."""

    failing_dt: str = ""

    def publisher(
        self, stream: str, coordination: CoordinationResource, lake: LakeResource
    ) -> Publisher:
        publisher = super().publisher(stream, coordination, lake)
        publish, failing = publisher.publish, self.failing_dt

        def fail_one(dts: Sequence[str]) -> list[PublicationOutcome]:
            done = {o.dt: o for o in publish([dt for dt in dts if dt != failing])}
            unreachable = PublicationOutcome(
                failing, FAILED, "CatalogError: unreachable", None, False
            )
            return [done.get(dt, unreachable) for dt in dts]

        publisher.publish = fail_one  # type: ignore[method-assign]
        return publisher


def test_a_failed_publication_fails_the_run_after_the_others_are_recorded(env: PipelineEnv, spark):
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    first = publish_tick(instance, resources)
    (request,) = first.run_requests
    failing = {
        **resources,
        "catalog": OneFailingCatalog(
            catalog_path=str(env.root / "catalog.json"),
            iceberg_catalog_path=str(env.root / "iceberg" / "catalog.db"),
            failing_dt=DATES[1],
        ),
    }
    outcome = run_publish(instance, failing, request)
    assert not outcome.success
    assert sorted(published(outcome)) == [DATES[0], DATES[2]]
    (failure,) = [e for e in outcome.all_events if e.is_step_failure]
    (line,) = failure.step_failure_data.user_failure_data.metadata[FAILED_PUBLICATIONS].value
    assert line.startswith(f"dt={DATES[1]}: failed: CatalogError: unreachable")
    (retry,) = publish_tick(instance, resources, first.cursor).run_requests
    assert retry.tags[RANGE_START] == retry.tags[RANGE_END] == DATES[1]


def test_the_gc_job_reclaims_what_the_switch_superseded(env: PipelineEnv, spark):
    """With no safety delay, the superseded live manifests go, and the small objects the
    published merge covers unless a retained Iceberg snapshot still serves them; what the
    current publication names stays, and the checks still pass."""
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    (request,) = publish_tick(instance, resources).run_requests
    assert run_publish(instance, resources, request).success
    (merge,) = merge_tick(instance, resources).run_requests
    assert run_merge(instance, resources, merge).success
    (request,) = publish_tick(instance, resources).run_requests
    assert run_publish(instance, resources, request).success

    now = {**resources, "catalog": env.catalog(gc_safety_delay_seconds=0.0)}
    result = build_gc_job(STREAM).execute_in_process(resources=now, instance=instance)
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_OUTPUT]
    metadata = {k: v.value for k, v in output.step_output_data.metadata.items()}
    small = env.store().ledger_objects(STREAM)
    assert metadata["files"] == sum(v for k, v in metadata.items() if k.startswith("files_"))
    assert metadata["bytes"] == sum(v for k, v in metadata.items() if k.startswith("bytes_"))
    if env.lake().stream(STREAM).table_format == "manifests":
        assert metadata["files"] >= len(small) + len(DATES) * 2  # + each live version's manifests
        assert not any(Path(o.url.removeprefix("file://")).exists() for o in small)
    else:
        # The Iceberg snapshot before the switch is retained and still serves the small objects
        # (time travel): only the superseded live manifest versions go.
        assert metadata["files"] >= len(DATES) * 2
        assert all(Path(o.url.removeprefix("file://")).exists() for o in small)
    (observation,) = instance.fetch_observations(table_asset_key(STREAM), limit=10).records
    assert observation.asset_observation.metadata["files"].value == metadata["files"]
    checks = build_publication_checks(STREAM)
    check_run = materialize(
        [build_publication_asset(STREAM), *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
    )
    assert all(e.passed for e in check_run.get_asset_check_evaluations())


LINE = re.compile(
    rf"^{STREAM} dt=(2026-01-0[123]): published v1 \(merged, switched now\): 1 file, (\d+) rows, "
    r"manifest file://\S+/_manifests/dt=\1/merged-\S+/manifest\.json$"
)


def test_leasehold_run_publishes_after_merging(env: PipelineEnv, spark):
    """`leasehold run`'s loop: ingest, merge, then switch and publish each closed day, one
    line each; the summary shows each table partition's version and files; the checks run
    include the publication checks."""
    write_sample_sources(env.root / "sources", objects=9, records_per_object=20)
    defs = Definitions(resources=env.resources())
    lines: list[str] = []
    report = run_stream(defs, env.instance(), STREAM, log=lines.append)

    matches = [m for m in map(LINE.match, lines) if m]
    assert sorted(m[1] for m in matches) == DATES, lines
    assert all(int(m[2]) == committed_rows(env, m[1]) for m in matches)
    assert report.publish_runs == 1 and report.switched_now == 3 and not report.not_published
    summary = report.describe()
    assert "table partitions: 3 published (3 merged, 0 live), 0 not published" in summary
    for dt in DATES:
        rows = committed_rows(env, dt)
        assert f"  dt={dt}: v1 (merged, ids 1..3), 1 file, {rows} rows" in summary
    assert set(CHECKS) <= set(report.checks) and all(report.checks.values()), report.checks

    again = run_stream(defs, env.instance(), STREAM, log=lines.append)
    assert again.publish_runs == 0 and not again.publications
    assert again.table == report.table
