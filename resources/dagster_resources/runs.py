"""What Dagster knows about a stream's runs: which are in flight, which died, which ended.

Every run leasehold requests is tagged with its stream (`STREAM_TAG`; a run of the stream's
asset checks with `CHECKS_TAG`) and with the process that executes it (`PROCESS_TAG`: host, pid
and the process's start time, so a reused pid is not mistaken for the run) — from its creation
when `leasehold run` executes it in process, else once its resources are set up. A run worker
the daemon's code server launched is failed by that server when it exits; but nothing in Dagster
notices that a run `leasehold run` executes in its own process was SIGKILLed, or a run whose
code server died with it — such a run would stay STARTED forever, holding a queue slot and
looking like it still covers its partitions; one `leasehold run` created and never started would
look queued forever, and no tick would ask for its partitions again. The discovery sensor asks
`fail_dead_runs` at every tick: a run whose process is gone from this host is marked failed
(canceled, if it was canceling) within one tick. Runs on other hosts are left to Dagster's own
monitoring."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DeleteDynamicPartitionsRequest,
    RunsFilter,
)

log = logging.getLogger(__name__)

STREAM_TAG = "leasehold/stream"
CHECKS_TAG = "leasehold/checks"
MERGE_TAG = "leasehold/merge"
"""A merge run of the stream's table partitions (its range tags name dates, not sources)."""
PUBLISH_TAG = "leasehold/publish"
"""A publication run of the stream's table partitions (its range tags name dates)."""
ROLLUP_TAG = "leasehold/rollup"
"""A rollup run of the stream's table partitions (its range tags name dates)."""
GC_TAG = "leasehold/gc"
CLEANUP_TAG = "leasehold/cleanup"
"""A garbage-collection run of the stream's table."""
DUE_ONLY_TAG = "leasehold/merge_due_only"
"""A sensor's merge or publication run does only what is due when it gets there; a
hand-launched one merges every partition of its range that has unmerged objects, or publishes
every partition of its range (an up-to-date one is left as it is)."""
CLOSED_DUE_NOW = "closed"
"""`DUE_ONLY_TAG`'s value on `leasehold run`'s merge runs: what is due, and every closed
partition with a pending merge job as if it were due (`MergeSchedule.due(closed_now=True)`):
`leasehold run` ends with every committed row published, and a closed partition publishes
merged objects only."""
PROCESS_TAG = "leasehold/process"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
PARTITION = "dagster/partition"
EXPECTED_COUNT = "leasehold/partition_count"
RETRY_TAG = "leasehold/retry"

NOT_STARTED = (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING)
IN_FLIGHT = (*NOT_STARTED, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING)
ENDED_BADLY = (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
ENDED = (DagsterRunStatus.SUCCESS, *ENDED_BADLY)


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def process_identity() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or ''}"


def process_alive(identity: str) -> bool | None:
    """True/False for a process of this host; None when it ran elsewhere (we can't tell)."""
    parts = identity.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, pid, started = parts[0], int(parts[1]), parts[2]
    if host != socket.gethostname():
        return None
    if started:
        return _start_ticks(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tag_run_process(instance: DagsterInstance, run: DagsterRun) -> None:
    """Record which process executes `run`, so a tick can tell when it died."""
    if run.tags.get(PROCESS_TAG) != process_identity():
        instance.add_run_tags(run.run_id, {PROCESS_TAG: process_identity()})


def _runs(
    instance: DagsterInstance, stream: str, statuses: Sequence[DagsterRunStatus], **filters: Any
) -> list[DagsterRun]:
    return [
        r.dagster_run
        for r in instance.get_run_records(
            RunsFilter(tags={STREAM_TAG: stream}, statuses=list(statuses), **filters)
        )
    ]


# Statuses a run whose process died can be left in. NOT_STARTED: `leasehold run` creates its
# runs tagged with its own process and starts them in that process, so one of those that is
# NOT_STARTED with its process gone never will start. Not QUEUED: the daemon's queue holds runs
# no process has taken yet, and a re-executed run carries its parent's tags, process included.
DIES_IN = (
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
)


def fail_dead_runs(instance: DagsterInstance, stream: str) -> list[str]:
    """Mark the stream's runs — ingestion, merges, publications, rollups, garbage collections,
    source clean-ups and checks — whose process is gone failed (or canceled); their run ids."""
    dead = []
    runs = {
        run.run_id: run
        for tags in (
            {STREAM_TAG: stream},
            {MERGE_TAG: stream},
            {PUBLISH_TAG: stream},
            {ROLLUP_TAG: stream},
            {GC_TAG: stream},
            {CLEANUP_TAG: stream},
            {CHECKS_TAG: stream},
        )
        for run in (
            r.dagster_run for r in instance.get_run_records(RunsFilter(tags=tags, statuses=DIES_IN))
        )
    }
    for run in runs.values():
        identity = run.tags.get(PROCESS_TAG)
        if identity is None or process_alive(identity) is not False:
            continue
        message = f"leasehold: the run's process ({identity}) is gone (killed or crashed)"
        log.warning("%s: run %s: %s", stream, run.run_id, message)
        if run.status is DagsterRunStatus.CANCELING:
            instance.report_run_canceled(run, message)
        else:
            instance.report_run_failed(run, message)
        dead.append(run.run_id)
    return dead


@dataclass(frozen=True)
class RunSpan:
    """The partitions a run covers: a range (positional) or one partition."""

    first: str
    last: str
    started: bool
    created_ms: int
    """When the run was created: it holds no lease taken before, so a lease that expired
    before then is someone else's, and the run will take it when it gets there."""


def in_flight_spans(instance: DagsterInstance, stream: str, tag: str = STREAM_TAG) -> list[RunSpan]:
    """The spans of the stream's runs in flight: ingestion runs, or with `tag=MERGE_TAG` its
    merge runs (`PUBLISH_TAG`: its publication runs)."""
    spans = []
    records = instance.get_run_records(RunsFilter(tags={tag: stream}, statuses=list(IN_FLIGHT)))
    for record in records:
        run = record.dagster_run
        span = span_of(run)
        if span is not None:
            created_ms = int(record.create_timestamp.timestamp() * 1000)
            spans.append(RunSpan(span[0], span[1], run.status not in NOT_STARTED, created_ms))
    return spans


def in_flight_positions(
    instance: DagsterInstance, stream: str, position: Mapping[str, int], tag: str = STREAM_TAG
) -> list[tuple[RunSpan, range]]:
    """The stream's runs in flight (as `in_flight_spans`) whose ends are both in `position`
    (partition key -> its place in the dynamic partitions), each with the positions its range
    covers: a range run is positional, so what it covers is what lies between its ends now."""
    covering = []
    for span in in_flight_spans(instance, stream, tag):
        first, last = position.get(span.first), position.get(span.last)
        if first is not None and last is not None:
            covering.append((span, range(first, last + 1)))
    return covering


def span_of(run: DagsterRun) -> tuple[str, str] | None:
    if RANGE_START in run.tags and RANGE_END in run.tags:
        return run.tags[RANGE_START], run.tags[RANGE_END]
    if PARTITION in run.tags:
        return run.tags[PARTITION], run.tags[PARTITION]
    return None


def ended_since(
    instance: DagsterInstance,
    stream: str,
    after_s: float,
    statuses: Sequence[DagsterRunStatus] = ENDED,
    tags: Sequence[str] = (STREAM_TAG,),
) -> tuple[list[DagsterRun], float]:
    """The stream's runs (tagged with one of `tags` = stream) that ended (with one of
    `statuses`) after `after_s` (epoch seconds), and the newest update time among them: the
    caller's next `after_s`."""
    records = [
        record
        for tag in tags
        for record in instance.get_run_records(
            RunsFilter(
                tags={tag: stream},
                statuses=list(statuses),
                updated_after=datetime.fromtimestamp(after_s, tz=timezone.utc),
            )
        )
    ]
    newest = max((r.update_timestamp.timestamp() for r in records), default=after_s)
    return [r.dagster_run for r in records], newest


def apply_partition_requests(
    instance: DagsterInstance,
    requests: Sequence[AddDynamicPartitionsRequest | DeleteDynamicPartitionsRequest],
) -> None:
    """What the daemon does with a tick's dynamic-partition requests, for a tick evaluated in
    process (`leasehold run`): add, or delete (retention), in order."""
    for request in requests:
        if isinstance(request, DeleteDynamicPartitionsRequest):
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
        else:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
