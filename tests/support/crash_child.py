"""One Dagster run of the ingestion asset in its own process, stoppable at a chosen step.

`pause_at` ("published": objects written, commit not yet made; "committed": committed, Dagster
not yet told) makes the runner write `<marker>` and sleep there (until `pause_s` passes or the
test creates `<marker>.release`), so the test can SIGKILL or SIGSTOP the process at exactly
that moment, or let it go on once another process has done its part. The run's outcome goes
to `<marker>.result`.

Optional: `partition_range` ([first, last]) runs a range instead of `partition_key`,
`chunk_size` sets the runner's chunks, and `pause_nth` pauses at that occurrence of the step
(the n-th partition to reach it) rather than the first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dagster import materialize

from coordination_assets.ingestion import build_ingestion_asset
from resources.dagster_resources.asset_metadata import COLUMN_SCHEMA
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.runner import IngestionRunner
from resources.stores.settings import StoreSettings
from tests.support.pipeline_env import STREAM, PipelineEnv


class PausingLake(LakeResource):
    pause_at: str = ""
    pause_s: float = 0.0
    pause_nth: int = 1
    marker: str = ""

    def ingestion_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> IngestionRunner:
        reached: list[str] = []

        def pause(step: str, key: str) -> None:
            if step == self.pause_at:
                reached.append(key)
            if step == self.pause_at and len(reached) == self.pause_nth:
                Path(self.marker).write_text(f"{step} {key}")
                release = Path(self.marker + ".release")
                deadline = time.monotonic() + self.pause_s
                while time.monotonic() < deadline and not release.exists():
                    time.sleep(0.05)

        return super().ingestion_runner(stream, coordination, spark, owner, on_step=pause)


def main() -> None:
    args = json.loads(sys.argv[1])
    env = PipelineEnv(
        root=Path(args["dagster_home"]).parent,
        settings=StoreSettings(**args["settings"]),
        streams_path=Path(args["streams_path"]),
        s3_endpoint_url=args["s3_endpoint_url"],
        ownership_timeout_s=args["ownership_timeout_s"],
    )
    lake = PausingLake(
        streams_path=args["streams_path"],
        s3_endpoint_url=args["s3_endpoint_url"],
        work_dir=args["work_dir"],
        pause_at=args["pause_at"],
        pause_s=args["pause_s"],
        pause_nth=args.get("pause_nth", 1),
        marker=args["marker"],
        chunk_size=args.get("chunk_size", LakeResource.model_fields["chunk_size"].default),
    )
    if "partition_range" in args:
        first, last = args["partition_range"]
        which = {
            "tags": {
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
            }
        }
    else:
        which = {"partition_key": args["partition_key"]}
    result = materialize(
        [build_ingestion_asset(STREAM)],
        instance=env.instance(),
        resources={"coordination": env.coordination(), "lake": lake, "spark": SparkResource()},
        raise_on_error=False,
        **which,
    )
    failures = [
        e.step_failure_data.error.message
        for e in result.all_events
        if e.event_type_value == "STEP_FAILURE" and e.step_failure_data.error
    ]
    materialized = [  # the counts (the column schema is no JSON value)
        {k: v.value for k, v in e.materialization.metadata.items() if k != COLUMN_SCHEMA}
        for e in result.get_asset_materialization_events()
    ]
    Path(args["marker"] + ".result").write_text(
        json.dumps({"success": result.success, "failures": failures, "materialized": materialized})
    )


if __name__ == "__main__":
    main()
