"""The partition supplier's global state as lease items, one node at a time: part of
`LeaseStore`, built on its leases (moved out of lease_store.py as it was)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from resources.coordination.errors import PartitionUnavailableError
from resources.coordination.items import NOT_GIVEN, ItemType, LeaseItem, LeaseToken


class GlobalStateLeases:
    """The global-state half of `LeaseStore`, which provides the leases it is built on."""

    if TYPE_CHECKING:  # provided by LeaseStore (resources/coordination/lease_store.py)

        def source_identifier(
            self, stream: str, item_type: ItemType = ItemType.PARTITION
        ) -> str: ...
        def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None: ...
        def create_partitions(
            self,
            source_identifier: str,
            partition_keys: Sequence[str],
            progress_state: str | None = None,
            progress_states: Sequence[str | None] | None = None,
        ) -> int: ...
        def acquire(
            self, source_identifier: str, partition_key: str, owner: str, timeout_s: float
        ) -> LeaseItem: ...
        def renew(
            self, token: LeaseToken, timeout_s: float, progress_state: str | None = NOT_GIVEN
        ) -> LeaseItem: ...
        def give_up(
            self, token: LeaseToken, progress_state: str | None = NOT_GIVEN
        ) -> LeaseItem: ...

    def acquire_global_state(
        self, stream: str, name: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        """Lease the global-state item `name`, creating it on first use: the item as written,
        or None while another owner holds it. Its progress state *is* the global state (a
        JSON object). Raises the store errors."""
        sid = self.source_identifier(stream, ItemType.GLOBAL)
        if self.get(sid, name) is None:
            self.create_partitions(sid, [name], progress_state="{}")
        try:
            return self.acquire(sid, name, owner, timeout_s)
        except PartitionUnavailableError:
            return None

    def read_global_state(self, stream: str, name: str) -> dict[str, Any]:
        """Read without a lease: for display. Never act on it without holding the lease.
        `{}` when the item does not exist yet. Raises the store errors."""
        item = self.get(self.source_identifier(stream, ItemType.GLOBAL), name)
        return (
            {} if item is None or item.progress_state is None else json.loads(item.progress_state)
        )

    def update_global_state(
        self, token: LeaseToken, state: dict[str, Any], timeout_s: float
    ) -> LeaseItem:
        """Save `state` (a JSON object) as the global state and extend the lease to now +
        `timeout_s`, in one fenced write. Returns the item as written. Raises
        `PartitionNotOwnedError` when `token` no longer holds (another node took the state
        over: stop), and the store errors."""
        return self.renew(token, timeout_s, progress_state=json.dumps(state, sort_keys=True))

    def release_global_state(
        self, token: LeaseToken, state: dict[str, Any] | None = None
    ) -> LeaseItem:
        """Hand the global state back, saving `state` in the same write when given (a tick
        that has nothing else to write saves its progress at no extra cost). Fenced: returns
        the item as written. Raises `PartitionNotOwnedError` when `token` no longer holds, and
        the store errors."""
        if state is None:
            return self.give_up(token)
        return self.give_up(token, progress_state=json.dumps(state, sort_keys=True))
