"""`LeaseKeeper`: KCL's renewer for a whole run, one thread for every lease it holds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from resources.coordination.errors import LeaseStoreError
from resources.coordination.lease import Lease, LeaseLostError

log = logging.getLogger(__name__)
# Leases named in one log message; a pass over hundreds of leases in an outage logs one summary.
NAMED = 5


class LeaseKeeper:
    """KCL's renewer for a whole run: one thread renews every held lease when it is due.

    A range run holds hundreds of leases while Spark reads their sources; a thread each would be
    hundreds of threads and renewals in lockstep. Leases handed to the keeper are not started
    themselves. Renewal is per lease (each is its own fenced write) so one lost lease never
    affects the others.

    Renewal is tied to progress: a pass renews only while `progressing()` says the work the
    leases wait on moves (the Spark job reading them, `SparkWatch.progressing`). A job that
    hangs then no longer keeps its units from other runs: unrenewed, its leases expire at their
    ownership timeout even if the process lives on.
    """

    def __init__(
        self, renew_interval_s: float, progressing: Callable[[], bool] = lambda: True
    ) -> None:
        self.renew_interval_s = renew_interval_s
        self.progressing = progressing
        self._withheld = False
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._closing = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> Lease:
        with self._lock:
            self._leases[id(lease)] = lease
        return lease

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(id(lease), None)

    def held(self) -> list[Lease]:
        with self._lock:
            return [lease for lease in self._leases.values() if not lease.done]

    def renew_due(self) -> None:
        """Renew every held lease once. Failures are logged, one summary per pass: a lease lost
        is dropped; any other failure is tried again next pass (the lease is lost at its local
        deadline if renewal keeps failing). While the work makes no progress, nothing is
        renewed (said once)."""
        held = self.held()
        if not self.progressing():
            if held and not self._withheld:
                log.warning(
                    "not renewing %d leases: the work they wait on makes no progress; they "
                    "expire at their ownership timeout unless it moves again",
                    len(held),
                )
            self._withheld = True
            return
        self._withheld = False
        lost: list[str] = []
        failed: list[tuple[Lease, Exception]] = []
        for lease in held:
            if lease.lost:
                self.discard(lease)
                lost.append(f"{lease.item.partition_key!r}: {lease.lost_reason}")
                continue
            try:
                lease.renew()
            except LeaseLostError as exc:
                self.discard(lease)
                lost.append(f"{lease.item.partition_key!r}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a store outage, or a bug: logged below
                if lease.lost:  # the local deadline passed during the attempt
                    # mypy keeps `lease.lost` False from the check above; renew() may change it.
                    self.discard(lease)  # type: ignore[unreachable]
                    lost.append(f"{lease.item.partition_key!r}: {lease.lost_reason}")
                elif not lease.done:  # else completed or closed meanwhile: nothing to renew
                    failed.append((lease, exc))
        if lost:
            log.warning(
                "%d of %d leases lost, no longer renewed: %s", len(lost), len(held), _named(lost)
            )
        if failed:
            # A store error says what failed; anything else may be a bug: show where.
            bug = next((e for _, e in failed if not isinstance(e, LeaseStoreError)), None)
            log.warning(
                "renewing %d of %d leases failed, next try in %g s: %s",
                len(failed),
                len(held),
                self.renew_interval_s,
                _named([f"{lease.item.partition_key!r}: {exc}" for lease, exc in failed]),
                exc_info=bug,
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.renew_interval_s):
            self.renew_due()

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop renewing and hand back every lease still held (unfinished work). Safe to
        call again, from another thread too: a lease is handed back once."""
        with self._closing:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            self._hand_back()

    def _hand_back(self) -> None:
        for lease in self.held():
            try:
                lease.release()  # logs a store failure itself
            except Exception:  # noqa: BLE001 - the other leases must still be handed back
                log.error(
                    "could not hand back the lease on %r; it is free once its ownership "
                    "timeout passes",
                    lease.item.partition_key,
                    exc_info=True,
                )


def _named(entries: list[str]) -> str:
    shown = "; ".join(entries[:NAMED])
    return shown if len(entries) <= NAMED else f"{shown}; and {len(entries) - NAMED} more"
