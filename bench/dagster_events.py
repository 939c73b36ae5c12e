"""Dagster's own cost per partition of a range run, with nothing else in the asset.

    .venv/bin/python bench/dagster_events.py [--partitions 1000] [--repeat 3]

The floor under bench/ingest.py's Dagster path: a `BackfillPolicy.single_run()` asset on a
`DynamicPartitionsDefinition`, materialized in process on a SQLite instance (the embedded
default) over a range of N new partitions, yielding one `AssetMaterialization` with
leasehold's metadata per partition and doing no other work. Measured in the same run:
  - on Dagster's default SQLite instance (one planned event per partition),
  - the same with `DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=true` (one planned event per
    run; Dagster then no longer marks those partitions failed when the run fails), and
  - on leasehold's embedded default instance (`resources/dagster_resources/instance.py`, its
    event log in `dagster_internals.py`: the same SQLite storage with the event log's engines
    and connections kept open, and a run's planned events stored in one transaction per
    shard), as `leasehold run` uses it, and
  - the same with planned events stored one by one (`DAGSTER_EVENT_BATCH_SIZE=0`).
The baseline is the same asset yielding nothing per partition over a 1-partition range. With
`--repeat N` every variant runs N times, alternated, and the best counts (a shared machine).
`bench/event_log_main_job.py` compares the two storages on `leasehold run` itself.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagster import (  # noqa: E402
    AssetExecutionContext,
    AssetMaterialization,
    BackfillPolicy,
    DagsterInstance,
    DynamicPartitionsDefinition,
    asset,
    materialize,
)

from resources.dagster_resources.dagster_internals import EVENT_BATCH_SIZE_VAR  # noqa: E402
from resources.dagster_resources.instance import write_instance_yaml  # noqa: E402

SUBSET_PLANNED = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
METADATA = {
    "rows_read": 5000,
    "rows_written": 4990,
    "rows_quarantined": 10,
    "small_objects": 3,
    "bytes": 123456,
    "table_partitions": "2026-01-01, 2026-01-02",
    "lease_epoch": 1,
    "already_complete": False,
}
partitions = DynamicPartitionsDefinition(name="sources")


@asset(
    partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(), output_required=False
)
def ingested(context: AssetExecutionContext):
    for key in context.partition_keys:
        yield AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=METADATA)


def run_range(n: int, leasehold_instance: bool = False) -> float:
    """Seconds for one range run over `n` fresh partitions on a fresh SQLite instance."""
    home = Path(tempfile.mkdtemp(prefix="leasehold-dagster-events-"))
    if leasehold_instance:
        write_instance_yaml(home, "pooled")
    else:
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = DagsterInstance.from_config(str(home))
    keys = [f"k{i:07d}" for i in range(n)]
    instance.add_dynamic_partitions(partitions.name, keys)
    started = time.perf_counter()
    result = materialize(
        [ingested],
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    assert result.success and len(result.get_asset_materialization_events()) == n
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of every variant, alternated; best counts"
    )
    args = parser.parse_args()
    n = args.partitions
    run_range(10)  # warm imports and code paths
    run_range(10, leasehold_instance=True)

    def with_env(var: str, value: str, leasehold_instance: bool) -> float:
        os.environ[var] = value
        try:
            return run_range(n, leasehold_instance=leasehold_instance)
        finally:
            del os.environ[var]

    variants = {
        "1 partition (baseline)": lambda: run_range(1),
        f"{n} partitions, Dagster defaults": lambda: run_range(n),
        f"{n} partitions, {SUBSET_PLANNED}": lambda: with_env(SUBSET_PLANNED, "true", False),
        f"{n} partitions, leasehold's embedded instance": lambda: run_range(
            n, leasehold_instance=True
        ),
        f"{n} partitions, leasehold's embedded instance, planned events one by one": lambda: (
            with_env(EVENT_BATCH_SIZE_VAR, "0", True)
        ),
    }
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(args.repeat):  # alternated, so a noisy minute hits every variant alike
        for label, measure in variants.items():
            best[label] = min(best[label], measure())
    base = best.pop("1 partition (baseline)")
    print(f"best of {args.repeat}, variants alternated")
    print("| range run | seconds | ms per partition over a 1-partition run |")
    print("| --- | --- | --- |")
    print(f"| 1 partition (baseline) | {base:.2f} | - |")
    for label, seconds in best.items():
        print(f"| {label} | {seconds:.1f} | {(seconds - base) / n * 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
