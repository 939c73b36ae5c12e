"""`LeaseKeeper`: KCL's renewer for a whole run, one thread for every lease it holds."""

from __future__ import annotations

import threading

from resources.coordination.lease import Lease, LeaseLostError


class LeaseKeeper:
    """KCL's renewer for a whole run: one thread renews every held lease when it is due.

    A range run holds hundreds of leases while Spark reads their sources; a thread each would be
    hundreds of threads and renewals in lockstep. Leases handed to the keeper are not started
    themselves. Renewal is per lease (each is its own fenced write) so one lost lease never
    affects the others.
    """

    def __init__(self, renew_interval_s: float) -> None:
        self.renew_interval_s = renew_interval_s
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
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
        for lease in self.held():
            if lease.lost:
                self.discard(lease)
                continue
            try:
                lease.renew()
            except LeaseLostError:
                self.discard(lease)
            except Exception:  # noqa: BLE001 - `lost` turns true at the local deadline
                continue

    def _loop(self) -> None:
        while not self._stop.wait(self.renew_interval_s):
            self.renew_due()

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop renewing and hand back every lease still held (unfinished work)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for lease in self.held():
            lease.release()
