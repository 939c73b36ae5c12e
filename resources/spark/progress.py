"""Whether a Spark job makes progress; one that makes none within a bound, cancelled.

A job whose executors cannot reach the driver never runs a task, and Spark waits for ever: the
master launches executor after executor, each dies, and the run that asked — holding leases,
renewing them — hangs with it. `SparkWatch.job` runs a job's action under a tag of its own while
a thread samples the application's progress every second; when nothing has moved for
`LEASEHOLD_SPARK_STALL_SECONDS` the tag's jobs are interrupted and the action raises
`SparkStalledError`, one sentence naming the cause (for a classic driver, the address the
executors were told to call back). `progressing()` is what the lease keeper asks before each
renewal, so leases are renewed while work moves, not merely while the process lives.

Progress, sampled app-wide (`ProgressSample`): a stage appearing or finishing tasks, a task
running, an executor registering. A task that runs counts as progress for as long as it runs:
its executor heartbeats, and Spark itself reschedules the tasks of an executor that stops
(`spark.network.timeout`); each of a task's object-store calls is bounded by the store client's
timeouts.

Classic sessions are sampled through `SparkContext.statusTracker()` (and the JVM's executor
list); Spark Connect sessions through the progress the server streams with each operation
(`registerProgressHandler`), which knows no executors. May import nothing of the project but
`resources.errors` and `resources.settings`.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from resources.errors import ComponentUnreachableError

log = logging.getLogger(__name__)

POLL_S = 1.0
STALL_VARIABLE = "LEASEHOLD_SPARK_STALL_SECONDS"


class SparkStalledError(ComponentUnreachableError):
    """A Spark job made no progress within the bound and was cancelled."""

    component = "Spark"


@dataclass(frozen=True)
class ProgressSample:
    """What the application shows at one moment: tasks finished (completed or failed) per
    active stage, tasks running, executors registered (None: not known, or the driver runs the
    tasks itself). `known` False: the session reports no progress at all (a Spark Connect
    server older than 4.0), so none can be judged missing."""

    finished: Mapping[int, int] = field(default_factory=dict)
    running: int = 0
    executors: int | None = None
    known: bool = True


class StallClock:
    """The last moment a job made progress, from samples; pure (the caller gives the time)."""

    def __init__(self, bound_s: float, now: float) -> None:
        self.bound_s = bound_s
        self.last_progress = now
        self.most_executors: int | None = None
        self._finished: dict[int, int] = {}

    def observe(self, sample: ProgressSample, now: float) -> None:
        moved = (
            not sample.known
            or sample.running > 0
            or any(
                count > self._finished.get(stage, -1) for stage, count in sample.finished.items()
            )
        )
        self._finished.update(sample.finished)
        if sample.executors is not None:
            if self.most_executors is None or sample.executors > self.most_executors:
                moved = moved or sample.executors > (self.most_executors or 0)
                self.most_executors = sample.executors
        if moved:
            self.last_progress = now

    def stalled(self, now: float) -> bool:
        return now - self.last_progress >= self.bound_s


@dataclass(frozen=True)
class JobTags:
    """How a session tags the jobs its thread starts, and cancels them by tag: a classic
    session's `SparkContext` job tags (cancelled from any thread), a Connect session's
    operation tags."""

    add: Callable[[str], None]
    remove: Callable[[str], None]
    cancel: Callable[[str], object]


@dataclass
class _Job:
    what: str
    clock: StallClock
    cancelled: str | None = None
    """Why the watch cancelled it, once it has."""


class SparkWatch:
    """Runs a session's jobs under a stall bound. `tags`, `sample` and `cause` are the session
    kind's (`classic_watch`, `connect_watch`); `cause(clock)` says why a job stalled."""

    def __init__(
        self,
        tags: JobTags,
        bound_s: float,
        sample: Callable[[], ProgressSample],
        cause: Callable[[StallClock], str],
        poll_s: float = POLL_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tags = tags
        self.bound_s = bound_s
        self.sample = sample
        self.cause = cause
        self.poll_s = poll_s
        self.now = now
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()

    def progressing(self) -> bool:
        """False while a watched job has gone `bound_s` without progress (or was cancelled
        for it): leases held for it are then not renewed."""
        at = self.now()
        with self._lock:
            jobs = list(self._jobs.values())
        return not any(j.cancelled or j.clock.stalled(at) for j in jobs)

    @contextmanager
    def job(self, what: str) -> Iterator[None]:
        """Run the action inside under a tag of its own; raise `SparkStalledError` if it was
        cancelled for want of progress (any other error passes through)."""
        tag = f"leasehold-{uuid.uuid4().hex[:12]}"
        job = _Job(what, StallClock(self.bound_s, self.now()))
        done = threading.Event()
        self.tags.add(tag)
        with self._lock:
            self._jobs[tag] = job
        watcher = threading.Thread(
            target=self._watch, args=(tag, job, done), name="spark-watch", daemon=True
        )
        watcher.start()
        try:
            yield
        except Exception as exc:
            if job.cancelled:
                raise SparkStalledError(job.cancelled) from exc
            raise
        finally:
            done.set()
            watcher.join()
            self.tags.remove(tag)
            with self._lock:
                self._jobs.pop(tag, None)
        if job.cancelled:  # the action ended as the interrupt went out: it is still refused
            raise SparkStalledError(job.cancelled)

    def _watch(self, tag: str, job: _Job, done: threading.Event) -> None:
        while not done.wait(self.poll_s):
            if job.cancelled:
                # Again at every poll until the action ends: a cancel reaches only the jobs
                # already submitted, and on a loaded driver the action may submit its job
                # after the bound ran out (a doctor's probe once hung so, for ever).
                self.tags.cancel(tag)
                continue
            try:
                job.clock.observe(self.sample(), self.now())
            except Exception:  # noqa: BLE001 - a failed sample is no progress; said once
                log.debug("sampling Spark's progress failed", exc_info=True)
            if job.clock.stalled(self.now()):
                job.cancelled = f"{job.what}: {self.cause(job.clock)}"
                # Said by the error the job raises; here for --verbose and the run's log.
                log.info("cancelling the Spark job: %s", job.cancelled)
                self.tags.cancel(tag)


# -- classic sessions ---------------------------------------------------------------------------


def classic_watch(spark: Any, bound_s: float, poll_s: float = POLL_S) -> SparkWatch:
    """A watch over a classic session's application (a `local[...]` master or a cluster's)."""
    context = spark.sparkContext
    master = context.master
    local = master.startswith("local")

    def sample() -> ProgressSample:
        tracker = context.statusTracker()
        finished, running = {}, 0
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            if info is not None:
                finished[stage] = info.numCompletedTasks + info.numFailedTasks
                running += info.numActiveTasks
        executors = None
        if not local:  # the JVM's list holds the driver too
            executors = max(len(context._jsc.sc().statusTracker().getExecutorInfos()) - 1, 0)
        return ProgressSample(finished, running, executors)

    def cause(clock: StallClock) -> str:
        conf = context.getConf()
        address = f"{conf.get('spark.driver.host', '?')}:{conf.get('spark.driver.port', '?')}"
        return stall_cause(master, address, clock, bound_s)

    # Not the session's `addTag`/`interruptTag`: a classic session finds a tag to interrupt
    # among those of the calling thread only, and the watch interrupts from its own thread.
    tags = JobTags(context.addJobTag, context.removeJobTag, context.cancelJobsWithTag)
    return SparkWatch(tags, bound_s, sample, cause, poll_s)


def stall_cause(master: str, driver: str, clock: StallClock, bound_s: float) -> str:
    """One sentence: why a classic driver's job made no progress for `bound_s` seconds."""
    took = f"in {bound_s:g} s ({STALL_VARIABLE})"
    if clock.most_executors == 0:
        host = driver.rsplit(":", 1)[0]
        if is_loopback(host):
            return (
                f"no executor registered with the driver {took}: the executors were told to "
                f"call it back at {driver}, a loopback address no other host reaches; set "
                "spark.driver.host to an address of this host the workers reach "
                "(LEASEHOLD_SPARK_CONF or spark-defaults.conf)"
            )
        return (
            f"no executor registered with the driver {took}: the executors were told to call "
            f"it back at {driver} (spark.driver.host, spark.driver.port); either the workers "
            f"cannot reach that address, or the master {master} has no free cores or memory "
            "for spark.executor.cores and spark.executor.memory"
        )
    on = f" on {clock.most_executors} executors" if clock.most_executors else ""
    return f"no task started or finished{on} {took}; the job was cancelled"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- Spark Connect ------------------------------------------------------------------------------


def connect_watch(spark: Any, bound_s: float, where: str, poll_s: float = POLL_S) -> SparkWatch:
    """A watch over a Spark Connect session: its progress is what the server streams back with
    each operation, every `spark.connect.progress.reportInterval` (2 s), also while no task
    runs. Until a first report arrives the session is not judged (`known`)."""
    latest: dict[str, ProgressSample] = {}
    lock = threading.Lock()

    def handler(stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        finished = {s.stage_id: s.num_completed_tasks for s in stages or ()}
        with lock:
            previous = latest.get("now", ProgressSample())
            # Every report is news: the server sends one only while the operation runs.
            latest["now"] = ProgressSample({**previous.finished, **finished}, inflight_tasks)

    spark.registerProgressHandler(handler)

    def sample() -> ProgressSample:
        with lock:
            return latest.get("now", ProgressSample(known=False))

    def cause(clock: StallClock) -> str:
        return (
            f"the Spark Connect server {where} reported no task started or finished in "
            f"{bound_s:g} s "
            f"({STALL_VARIABLE}); the operation was interrupted"
        )

    tags = JobTags(spark.addTag, spark.removeTag, spark.interruptTag)
    return SparkWatch(tags, bound_s, sample, cause, poll_s)


def watch_for(spark: Any, bound_s: float, remote: str | None = None) -> SparkWatch:
    """The watch for `spark`'s kind of session (`remote`: its Connect URL, for messages)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return connect_watch(spark, bound_s, remote or "in use")
    return classic_watch(spark, bound_s)
