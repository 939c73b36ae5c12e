"""`leasehold run` over a historical backfill: objects for past dates land over several runs.

Closing waits for ingestion to catch up, so no date closes while discovery has not reached the
end of its listing; and after every `leasehold run` the published table — read as an engine
reads it, catalog then manifest then files — holds exactly the committed rows, delayed ones
included (a closed partition's pending merge is due at once within `leasehold run`)."""

from __future__ import annotations

import json
from collections import Counter

from dagster import Definitions

from coordination_assets.main_job import run_stream
from resources.dagster_resources.lake import LakeResource
from resources.publication.reader import read_partition
from tests.dagster.test_merge_sensor import env
from tests.support.pipeline_env import STREAM, PipelineEnv

__all__ = ["env"]

_records = iter(range(1, 1_000_000))


def land(env: PipelineEnv, wave: str, dts: list[str], records: int = 5) -> None:
    """One source object per date under `wave/` (keys sort after the earlier waves', as a
    date-prefixed source's would), `records` rows each, all on that past date."""
    for i, dt in enumerate(dts):
        path = env.root / "sources" / wave / f"part-{i:03d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(
                {
                    "event_id": f"e{next(_records):08d}",
                    "user_id": "u1",
                    "amount": 1.0,
                    "event_time": f"{dt}T{10 + j:02d}:00:00Z",
                }
            )
            for j in range(records)
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def published_ids(env: PipelineEnv, dts: set[str]) -> Counter[str]:
    """Event ids of the published table: catalog -> manifest -> files, nothing cached."""
    catalog = env.catalog().target(env.lake().stream(STREAM).table_format, env.lake())
    ids: Counter[str] = Counter()
    for dt in sorted(dts):
        ids.update(read_partition(catalog, STREAM, dt).column("event_id").to_pylist())
    return ids


def committed(env: PipelineEnv) -> tuple[Counter[str], set[str]]:
    rows = env.table_rows()
    return Counter(r["event_id"] for r in rows), {o.dt for o in env.store().ledger_objects(STREAM)}


def defs_listing(env: PipelineEnv, per_tick: int) -> Definitions:
    """The pipeline's resources with discovery listing at most `per_tick` objects a tick."""
    resources = env.resources()
    resources["lake"] = LakeResource(
        streams_path=str(env.streams_path),
        work_dir=str(env.root / "work"),
        max_objects_per_tick=per_tick,
    )
    return Definitions(resources=resources)


def test_a_backfill_closes_nothing_before_catching_up_and_publishes_every_committed_row(
    env: PipelineEnv, spark
) -> None:
    instance = env.instance()
    defs = defs_listing(env, per_tick=2)
    lines: list[str] = []

    # Wave 1, three past dates; a run cut short after one discovery tick (2 of 3 objects):
    # discovery has not caught up, so nothing closes, yet everything committed is published
    # (open partitions: live manifests).
    land(env, "w1", ["2026-01-01", "2026-01-02", "2026-01-03"])
    first = run_stream(defs, instance, STREAM, max_ticks=1, log=lines.append)
    assert first.partitions == 2
    store = env.store()
    assert store.table_partitions(STREAM) and not any(
        p.closed for p in store.table_partitions(STREAM)
    )
    ids, dts = committed(env)
    assert len(dts) == 2 and published_ids(env, dts) == ids

    # The rest of wave 1: discovery reaches the end of the listing, every date closes, is
    # merged and switched in the same run.
    second = run_stream(defs, instance, STREAM, log=lines.append)
    assert not second.not_ingested and not second.not_merged and not second.not_published
    partitions = env.store().table_partitions(STREAM)
    assert [p.dt for p in partitions if p.closed] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert all(p.switched and p.merge_due_at_ms is None for p in partitions)
    ids, dts = committed(env)
    assert len(dts) == 3 and published_ids(env, dts) == ids

    # Wave 2: late data for closed dates (delayed objects) and a new past date. The delayed
    # objects' merges are due after `merge.delayed_interval` — within `leasehold run`, now.
    land(env, "w2", ["2026-01-01", "2026-01-03", "2026-01-04"])
    third = run_stream(defs, instance, STREAM, log=lines.append)
    assert not third.not_merged and not third.not_published
    delayed = [o for o in env.store().ledger_objects(STREAM) if o.delayed]
    assert sorted(o.dt for o in delayed) == ["2026-01-01", "2026-01-03"]
    partitions = env.store().table_partitions(STREAM)
    assert all(p.closed and p.switched and p.merge_due_at_ms is None for p in partitions)
    ids, dts = committed(env)
    assert len(dts) == 4 and published_ids(env, dts) == ids
    assert third.checks and all(third.checks.values()), third.checks
