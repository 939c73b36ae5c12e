"""A Spark job that makes no progress is cancelled, and its leases are no longer renewed
(resources/spark/progress.py, resources/coordination/keeper.py). The session here is a stand-in
with the three calls the watch makes (`addTag`, `removeTag`, `interruptTag`): what a stalled
job looks like on a real cluster is tests/chaos/test_cluster_hosts.py's."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from resources.coordination.keeper import LeaseKeeper
from resources.spark.progress import (
    JobTags,
    ProgressSample,
    SparkStalledError,
    SparkWatch,
    StallClock,
    is_loopback,
    stall_cause,
)


def test_progress_is_a_stage_moving_a_task_running_or_an_executor_registering() -> None:
    clock = StallClock(10, now=0)
    clock.observe(ProgressSample({1: 0}, 0, 0), 1)  # a stage appears: its job started
    assert clock.last_progress == 1
    clock.observe(ProgressSample({1: 0}, 0, 0), 9)
    assert not clock.stalled(10.9) and clock.stalled(11)
    clock.observe(ProgressSample({1: 0}, 0, 2), 12)  # two executors registered
    assert clock.last_progress == 12 and clock.most_executors == 2
    clock.observe(ProgressSample({1: 0}, 0, 1), 13)  # one lost: no progress
    assert clock.last_progress == 12
    clock.observe(ProgressSample({1: 0}, 1, 1), 20)  # a task runs
    clock.observe(ProgressSample({1: 1}, 0, 1), 25)  # ...and finishes
    clock.observe(ProgressSample({1: 1, 2: 0}, 0, 1), 30)  # the next stage
    assert clock.last_progress == 30
    clock.observe(ProgressSample({2: 0}, 0, 1), 35)
    assert clock.last_progress == 30 and clock.stalled(40)
    clock.observe(ProgressSample(known=False), 41)  # a session that reports nothing
    assert clock.last_progress == 41


def test_the_cause_names_the_callback_address() -> None:
    never = StallClock(60, 0)
    never.observe(ProgressSample({0: 0}, 0, 0), 1)
    loopback = stall_cause("spark://10.9.0.2:7077", "127.0.0.1:40123", never, 60)
    assert "no executor registered with the driver in 60 s" in loopback
    assert "call it back at 127.0.0.1:40123, a loopback address no other host reaches" in loopback
    elsewhere = stall_cause("spark://10.9.0.2:7077", "10.9.0.1:40123", never, 60)
    assert "call it back at 10.9.0.1:40123 (spark.driver.host, spark.driver.port)" in elsewhere
    assert "spark://10.9.0.2:7077 has no free cores" in elsewhere
    ran = StallClock(60, 0)
    ran.observe(ProgressSample({0: 0}, 0, 2), 1)
    assert "no task started or finished on 2 executors in 60 s" in stall_cause(
        "spark://m:7077", "10.9.0.1:1", ran, 60
    )
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["10.9.0.1", "driver.example", "0.0.0.0"]))


class Session:
    """The calls `SparkWatch` makes of a session; `interruptTag` ends the blocked action."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.interrupted: list[str] = []
        self.release = threading.Event()

    def addTag(self, tag: str) -> None:  # noqa: N802 - pyspark's names
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.tags.remove(tag)

    def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
        self.interrupted.append(tag)
        self.release.set()
        return [tag]

    def action(self) -> None:
        """A job that waits until interrupted (or released by the test), then fails as
        Spark's cancelled jobs do."""
        assert self.release.wait(30), "never interrupted"
        if self.interrupted:
            raise RuntimeError("[SPARK_JOB_CANCELLED] Job cancelled")


def watch(session: Session, samples: list[ProgressSample], bound_s: float = 0.5) -> SparkWatch:
    def sample() -> ProgressSample:
        return samples[0] if len(samples) == 1 else samples.pop(0)

    tags = JobTags(session.addTag, session.removeTag, session.interruptTag)
    return SparkWatch(tags, bound_s, sample, lambda clock: "no executor", poll_s=0.05)


def test_a_job_without_progress_is_cancelled_with_one_sentence() -> None:
    session = Session()
    spark = watch(session, [ProgressSample({0: 0}, 0, 0)])
    assert spark.progressing()
    started = time.monotonic()
    with pytest.raises(SparkStalledError, match=r"^reading x: no executor$") as raised:
        with spark.job("reading x"):
            session.action()
    assert time.monotonic() - started < 10
    assert session.interrupted and session.tags == []
    assert "Job cancelled" in str(raised.value.__cause__)
    assert spark.progressing()  # the job is over: nothing is held for it


def test_a_job_submitted_after_the_bound_ran_out_is_cancelled_all_the_same() -> None:
    # On a loaded driver the action may submit its job after the stall was noticed: the
    # cancel then finds nothing to cancel, and the job, once submitted, would wait for ever.
    class LateSession(Session):
        submitted = threading.Event()

        def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
            if not self.submitted.is_set():
                return []  # no job of the tag yet
            return super().interruptTag(tag)

        def action(self) -> None:
            time.sleep(1.0)  # preparing the job: longer than the bound
            self.submitted.set()
            super().action()

    session = LateSession()
    spark = watch(session, [ProgressSample({}, 0, 0)], bound_s=0.3)
    with pytest.raises(SparkStalledError, match=r"^reading z: no executor$"):
        with spark.job("reading z"):
            session.action()
    assert session.interrupted and session.tags == []


def test_a_job_that_moves_is_left_alone() -> None:
    session = Session()
    moving = [ProgressSample({0: n}, 1, 1) for n in range(60)]
    spark = watch(session, moving, bound_s=0.3)
    threading.Timer(1.5, session.release.set).start()
    with spark.job("reading y"):
        session.action()
    assert not session.interrupted and session.tags == []


def test_leases_are_not_renewed_while_the_job_makes_no_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Held:
        done = lost = False
        renewed = 0

        def renew(self) -> None:
            self.renewed += 1

        item: Any = None

    moving = {"now": True}
    keeper = LeaseKeeper(1.0, progressing=lambda: moving["now"])
    lease = Held()
    keeper.add(lease)  # type: ignore[arg-type]
    keeper.renew_due()
    moving["now"] = False
    keeper.renew_due()
    keeper.renew_due()
    assert lease.renewed == 1
    assert caplog.text.count("not renewing 1 leases: the work they wait on makes no progress") == 1
    moving["now"] = True
    keeper.renew_due()
    assert lease.renewed == 2
