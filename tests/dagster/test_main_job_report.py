"""What `leasehold run` reports: the state its invocation ended in, not every setback on the way.

A partition one run could not ingest is often ingested by a later run of the same invocation
(the next discovery tick asks for work a failed run left behind at once). Found by the chaos
test on DynamoDB: a lease lost to a slow renewal failed one partition of the range run, the
retry run of the same invocation committed it, and `leasehold run` still printed it as not
ingested and exited 3 with every partition COMPLETED.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dagster import Definitions

from coordination_assets.main_job import run_stream
from resources.coordination.items import LeaseToken, PartitionStatus
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.runner import IngestionRunner
from resources.ingestion.sample_data import write_sample_sources
from resources.stores.settings import StoreSettings
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams


class HandingBackLake(LakeResource):
    """When the run commits `commit_key`, the lease another owner holds on `held_key` is
    handed back: by then the run has been refused that partition (a chunk takes its leases
    before it commits any), and the next tick finds it UNASSIGNED with no run covering it."""

    commit_key: str = ""
    held_key: str = ""
    held_owner: str = ""
    held_epoch: int = 0

    def ingestion_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> IngestionRunner:
        store = coordination.store
        token = LeaseToken(
            store.source_identifier(stream), self.held_key, self.held_owner, self.held_epoch
        )

        def hand_back(step: str, key: str) -> None:
            if step == "committed" and key == self.commit_key:
                store.give_up(token)

        return super().ingestion_runner(stream, coordination, spark, owner, on_step=hand_back)


def test_a_partition_a_later_run_ingested_is_not_reported_failed(tmp_path: Path, spark) -> None:
    sources = tmp_path / "sources"
    first, second = (
        p.relative_to(sources).as_posix()
        for p in write_sample_sources(sources, objects=2, records_per_object=5)
    )
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}"
    )
    env = PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)
    store = env.store()
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, [first, second])
    held = store.acquire(sid, second, "another-run", 600)
    lake = HandingBackLake(
        streams_path=str(streams),
        work_dir=str(tmp_path / "work"),
        commit_key=first,
        held_key=second,
        held_owner="another-run",
        held_epoch=held.epoch,
    )
    defs = Definitions(
        resources={
            "coordination": env.coordination(),
            "lake": lake,
            "spark": SparkResource(),
            "catalog": env.catalog(),
        }
    )
    lines: list[str] = []
    report = run_stream(defs, env.instance(), STREAM, log=lines.append)

    # The range run was refused the second partition; the retry run ingested it.
    assert report.runs == 2 and report.retry_runs == 1, lines
    assert "1 partitions failed" in lines[0] and lines[1].endswith(": ok"), lines
    assert report.materialized == 2
    statuses = {i.partition_key: i.status for i in store.iter_items(sid)}
    assert statuses == {first: PartitionStatus.COMPLETED, second: PartitionStatus.COMPLETED}
    # ... so nothing is reported as not ingested, and `leasehold run` exits 0.
    assert report.failed_partitions == []
    assert "failed: 0" in report.describe()
