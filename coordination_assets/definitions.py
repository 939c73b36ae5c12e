"""The code location: every Dagster definition of leasehold, bound to its resources.

Thin on purpose: domain logic lives in `resources/`; this file only says what exists. Per
stream of `streams.yaml`: an ingestion asset and discovery sensor, a merge asset and merge
sensor, a published-table asset and publication sensor, a rollup asset and rollup sensor when
the stream declares rollups, their checks and the checks sensor, a garbage-collection job and
its hourly schedule, a source clean-up job and its hourly schedule when its `source_cleanup` is
on; each asset with the owners, kinds and columns
the UI shows (`presentation.py`). An invalid streams file, store, catalog or
publication variable fails the code location at load, naming the field.
"""

import warnings

from dagster import Definitions, in_process_executor

from coordination_assets.cleanup import build_cleanup_job, build_cleanup_schedule
from coordination_assets.compaction import (
    build_merge_asset,
    build_merge_checks,
    build_merge_sensor,
)
from coordination_assets.coordination_status import (
    coordination_status,
    coordination_status_schedule,
    lease_health,
)
from coordination_assets.ingestion import (
    build_checks_sensor,
    build_discovery_sensor,
    build_ingestion_asset,
    build_ingestion_checks,
)
from coordination_assets.presentation import Presentation, presented
from coordination_assets.publication import (
    build_gc_job,
    build_gc_schedule,
    build_publication_asset,
    build_publication_checks,
    build_publication_sensor,
)
from coordination_assets.rollups import (
    build_rollup_asset,
    build_rollup_checks,
    build_rollup_sensor,
)
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.streams import LakeSettings

# BackfillPolicy.single_run() is what lets one run ingest a whole range (docs/architecture.md); it
# is stable in practice but still labelled beta, and the warning on every load is noise.
warnings.filterwarnings("ignore", message=".*backfill_policy.*beta")


def build_definitions() -> Definitions:
    """The definitions the environment configures. Which streams exist is read here from the
    environment (`LakeSettings`), never from a resource: `from_env()` binds the resources'
    fields to `EnvVar`s, which resolve only in a run. Each `from_env()` validates its variables
    first, so a bad one fails the code location at load, naming the field."""
    configs = LakeSettings.from_env().streams()
    streams = sorted(configs)
    shown = Presentation.from_env()
    rolled = [s for s in streams if configs[s].rollups]
    checks = {
        s: [
            *build_ingestion_checks(s),
            *build_merge_checks(s),
            *build_publication_checks(s),
            *(build_rollup_checks(s) if s in rolled else []),
        ]
        for s in streams
    }
    gc_jobs = {s: build_gc_job(s) for s in streams}
    cleanup_jobs = {s: build_cleanup_job(s) for s in streams if configs[s].source_cleanup.enabled}
    return Definitions(
        assets=[
            presented(coordination_status, shown, shown.status_kinds()),
            *(
                presented(build(s), shown, kinds, configs[s])
                for build, kinds in (
                    (build_ingestion_asset, shown.ingested_kinds()),
                    (build_merge_asset, shown.merged_kinds()),
                    (build_publication_asset, shown.table_kinds()),
                )
                for s in streams
            ),
            *(build_rollup_asset(s) for s in rolled),
        ],
        asset_checks=[lease_health, *(c for s in streams for c in checks[s])],
        sensors=[
            *(build_discovery_sensor(s) for s in streams),
            *(build_merge_sensor(s) for s in streams),
            *(build_publication_sensor(s) for s in streams),
            *(build_rollup_sensor(s) for s in rolled),
            *(build_checks_sensor(s, checks[s]) for s in streams),
        ],
        jobs=[*gc_jobs.values(), *cleanup_jobs.values()],
        schedules=[
            coordination_status_schedule,
            *(build_gc_schedule(s, gc_jobs[s]) for s in streams),
            *(build_cleanup_schedule(s, j) for s, j in cleanup_jobs.items()),
        ],
        resources={
            "coordination": CoordinationResource.from_env(),
            "lake": LakeResource.from_env(),
            "spark": SparkResource.from_env(),
            "catalog": CatalogResource.from_env(),
        },
        # One asset per run: a step process of its own (the multiprocess default) would cost a
        # process start and, for ingestion, a second SparkSession's worth of memory for nothing;
        # and the run's process is then the one `runs.fail_dead_runs` watches.
        executor=in_process_executor,
    )


defs = build_definitions()
