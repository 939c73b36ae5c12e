"""A held lease: acquired, renewed in the background, released on exit.

KCL splits lease work into a taker (acquires), a renewer (keeps leases alive) and a refresher
(notices loss). Here one `Lease` is all three for one partition: `LeaseHolder.hold()` takes it,
a daemon thread renews it every `renew_interval_s`, and loss is noticed two ways — a renewal
refused by the store (someone else's epoch), or the local deadline passing without a successful
renewal (store unreachable: we must assume someone else may take over). After a loss every
owner write raises `LeaseLostError`; the store's fencing refuses it anyway, this only fails
earlier and louder.

Default timing, chosen for Dagster runs (`LeaseTiming`): ownership 60 s, renewal every 15 s.
Data Prepper's 10 minutes means a crashed run's partitions sit idle for 10 minutes before a
retry can take them; KCL's 10 s fails over fast but a Spark job submission, a GC pause or a
busy SQLite writer can stall a Python process for seconds, and a lease lost to a stall costs a
whole redone partition. 60 s with four renewal chances per period tolerates a ~45 s stall and
still lets a retried Dagster run (seconds to launch) take over within about a minute.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from resources.coordination.backoff import ReopenBackoff
from resources.coordination.errors import LeaseStoreError, PartitionNotOwnedError
from resources.coordination.items import NOT_GIVEN, LeaseItem, LeaseToken
from resources.coordination.lease_store import LeaseStore
from resources.errors import ConfigError
from resources.settings import Settings, at_least, positive, setting


class LeaseLostError(LeaseStoreError):
    """Ownership was lost; the work must stop and must not commit."""


class LeaseTimingError(ConfigError):
    """Invalid lease timing configuration (`TimingSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="lease timing configuration")


@dataclass(frozen=True)
class TimingSettings(Settings):
    """The coordination resource's timing, declared once (defaults: the module docstring)."""

    config_error = LeaseTimingError

    ownership_timeout_seconds: float = setting(
        60.0,
        env="LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS",
        doc="how long an acquired lease is ours without a renewal: a crashed owner's "
        "partitions are retried this long after its last renewal",
        check=positive,
    )
    renew_interval_seconds: float | None = setting(
        None,
        env="LEASEHOLD_RENEW_INTERVAL_SECONDS",
        doc="background renewal period (default: a quarter of the ownership timeout); at most "
        "a third of it",
        check=positive,
    )
    # A CLOSED partition waits `reopen_after_seconds` after its first close, twice as long
    # after each further one, at most `reopen_max_seconds`; jittered down by up to half
    # (`resources.coordination.backoff`). With the defaults the five closes before the dead
    # letter wait 1, 2, 4, 8 and 16 minutes; the cap matters once `max_closed_count` is raised:
    # an object fixed by hand is then picked up again within the hour, never days later.
    reopen_after_seconds: float = setting(
        60.0,
        env="LEASEHOLD_REOPEN_AFTER_SECONDS",
        doc="a CLOSED partition (unreadable object) is retried after, doubled per close",
        check=at_least(0),
    )
    reopen_max_seconds: float = setting(
        3600.0,
        env="LEASEHOLD_REOPEN_MAX_SECONDS",
        doc="the longest a CLOSED partition waits, however often it was closed",
        check=at_least(0),
    )
    max_closed_count: int = setting(
        5,
        env="LEASEHOLD_MAX_CLOSED_COUNT",
        doc="closes before a partition is dead-lettered",
        check=at_least(0),
    )
    # The discovery sensor asks for an UNASSIGNED partition again as soon as no run in flight
    # covers it; one UNASSIGNED this long means that is not happening (no sensor running, the
    # run queue stuck), and `lease_health` reports it. Longer than a busy run queue's wait.
    unassigned_retry_after_seconds: float = setting(
        1800.0,
        env="LEASEHOLD_UNASSIGNED_RETRY_AFTER_SECONDS",
        doc="lease_health reports a partition UNASSIGNED for longer than this as waiting",
        check=at_least(1),
    )

    def validate(self) -> TimingSettings:
        super().validate()
        if self.renew_interval > self.ownership_timeout_seconds / 3:
            raise LeaseTimingError(
                "renew_interval_seconds",
                "must be at most a third of ownership_timeout_seconds "
                f"(got {self.renew_interval_seconds} for a {self.ownership_timeout_seconds} s "
                "timeout)",
            )
        if self.reopen_max_seconds < self.reopen_after_seconds:
            raise LeaseTimingError(
                "reopen_max_seconds",
                f"must be at least reopen_after_seconds (got {self.reopen_max_seconds} for "
                f"{self.reopen_after_seconds})",
            )
        return self

    @property
    def renew_interval(self) -> float:
        if self.renew_interval_seconds is None:
            return self.ownership_timeout_seconds / 4
        return self.renew_interval_seconds

    def lease_timing(self) -> LeaseTiming:
        return LeaseTiming(
            ownership_timeout_s=self.ownership_timeout_seconds,
            renew_interval_s=self.renew_interval,
            reopen_after_s=self.reopen_after_seconds,
            reopen_max_s=self.reopen_max_seconds,
            max_closed_count=self.max_closed_count,
        )


@dataclass(frozen=True)
class LeaseTiming:
    """What a held `Lease` needs of `TimingSettings`: its defaults and validation are those
    (a `LeaseTimingError` names the resource field, e.g. `renew_interval_seconds`)."""

    ownership_timeout_s: float = TimingSettings.ownership_timeout_seconds
    renew_interval_s: float = TimingSettings.ownership_timeout_seconds / 4
    reopen_after_s: float = TimingSettings.reopen_after_seconds
    reopen_max_s: float = TimingSettings.reopen_max_seconds
    max_closed_count: int = TimingSettings.max_closed_count

    def __post_init__(self) -> None:
        TimingSettings(
            ownership_timeout_seconds=self.ownership_timeout_s,
            renew_interval_seconds=self.renew_interval_s,
            reopen_after_seconds=self.reopen_after_s,
            reopen_max_seconds=self.reopen_max_s,
            max_closed_count=self.max_closed_count,
        ).validate()

    @property
    def reopen_backoff(self) -> ReopenBackoff:
        return ReopenBackoff(self.reopen_after_s, self.reopen_max_s)


def new_owner_id() -> str:
    """Host, pid and a random part: unique per holder, readable in `leasehold status`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


log = logging.getLogger(__name__)


class Lease:
    """A held lease, renewed in the background while the work runs; the work checks `lost` and stops
    when it is."""

    def __init__(
        self,
        store: LeaseStore,
        item: LeaseItem,
        timing: LeaseTiming,
        on_lost: Callable[[Lease], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.timing = timing
        self._item = item
        self._on_lost = on_lost
        self._monotonic = monotonic
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._lost_reason: str | None = None
        self._finished = False
        # Local deadline, measured on the monotonic clock from *before* the store call: a
        # conservative bound on when another owner may be allowed to take over.
        self._deadline = monotonic() + timing.ownership_timeout_s
        self._thread: threading.Thread | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def item(self) -> LeaseItem:
        return self._item

    @property
    def token(self) -> LeaseToken:
        return self._item.token

    @property
    def epoch(self) -> int:
        return self._item.epoch

    @property
    def progress(self) -> Any:
        return self._item.progress

    @property
    def lost(self) -> bool:
        if self._lost_reason is None and not self._finished and self._monotonic() >= self._deadline:
            self._mark_lost("ownership timeout passed without a successful renewal")
        return self._lost_reason is not None

    @property
    def done(self) -> bool:
        """Finished (completed, closed, given up) or lost: nothing more to renew."""
        return self._finished or self._lost_reason is not None

    @property
    def lost_reason(self) -> str | None:
        return self._lost_reason if self.lost else None

    def check(self) -> None:
        """Call between units of work: raises once ownership is gone."""
        if self.lost:
            raise LeaseLostError(
                f"lease on {self._item.partition_key!r} (epoch {self._item.epoch}) lost: "
                f"{self._lost_reason}"
            )

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
        self._stop.set()
        if self._on_lost is not None:
            self._on_lost(self)

    # -- owner writes --------------------------------------------------------------------------

    def _owner_write(self, write: Callable[[LeaseToken], LeaseItem], final: bool) -> LeaseItem:
        with self._lock:
            self.check()
            started = self._monotonic()
            try:
                item = write(self.token)
            except PartitionNotOwnedError as exc:
                self._mark_lost(str(exc))
                raise LeaseLostError(str(exc)) from exc
            self._item = item
            if final:
                self._finished = True
                self._stop.set()
            else:
                self._deadline = started + self.timing.ownership_timeout_s
            return item

    def renew(self, progress_state: Any = NOT_GIVEN) -> LeaseItem:
        state = progress_state if progress_state is NOT_GIVEN else json.dumps(progress_state)
        return self._owner_write(
            lambda t: self.store.renew(t, self.timing.ownership_timeout_s, state), final=False
        )

    def save_progress(self, progress: Any) -> LeaseItem:
        return self.renew(progress)

    def complete(self, progress: Any = NOT_GIVEN) -> LeaseItem:
        state = progress if progress is NOT_GIVEN else json.dumps(progress)
        return self._owner_write(lambda t: self.store.complete(t, state), final=True)

    def close(self, reason: str = "", progress: Any = NOT_GIVEN) -> LeaseItem:
        state = progress if progress is NOT_GIVEN else json.dumps(progress)
        return self._owner_write(
            lambda t: self.store.close(
                t, self.timing.reopen_backoff, self.timing.max_closed_count, reason, state
            ),
            final=True,
        )

    def give_up(self) -> LeaseItem:
        return self._owner_write(self.store.give_up, final=True)

    def commit(self, write: Callable[[LeaseToken], LeaseItem], final: bool = True) -> LeaseItem:
        """Run a backend commit (ledger + COMPLETED in one transaction) fenced by this lease;
        with `final=False`, a commit that keeps the lease (a unit committed in several
        transactions), which extends ownership like a renewal."""
        return self._owner_write(write, final=final)

    # -- background renewal ----------------------------------------------------------------------

    def start(self) -> Lease:
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"lease-renewer:{self._item.partition_key}", daemon=True
        )
        self._thread.start()
        return self

    def _renew_loop(self) -> None:
        key = self._item.partition_key
        while not self._stop.wait(self.timing.renew_interval_s):
            if self.lost:
                log.warning("lease on %r (epoch %d) lost: %s", key, self.epoch, self._lost_reason)
                return
            try:
                self.renew()
            except LeaseLostError as exc:
                log.warning("lease on %r lost, renewal stopped: %s", key, exc)
                return
            except LeaseStoreError as exc:
                # Store trouble: tried again next interval; `lost` turns true at the deadline.
                log.warning(
                    "renewing the lease on %r (epoch %d) failed, next try in %g s: %s",
                    key,
                    self.epoch,
                    self.timing.renew_interval_s,
                    exc,
                )
            except Exception:  # noqa: BLE001 - a renewer must never die silently mid-lease
                if self._finished:  # completed or closed meanwhile: nothing left to renew
                    return
                log.error(
                    "renewing the lease on %r (epoch %d) failed unexpectedly, next try in %g s",
                    key,
                    self.epoch,
                    self.timing.renew_interval_s,
                    exc_info=True,
                )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Lease:
        return self if self._thread else self.start()

    def release(self) -> None:
        """Unfinished and still ours: hand it back at once rather than make the next owner wait
        out the timeout. A failure here is harmless: the timeout frees it anyway."""
        if not self.done:
            try:
                self.give_up()
            except LeaseStoreError as exc:
                log.warning(
                    "could not hand back the lease on %r (epoch %d); it is free once its "
                    "ownership timeout passes: %s",
                    self._item.partition_key,
                    self.epoch,
                    exc,
                )

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.release()
