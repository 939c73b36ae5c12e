"""Errors of the coordination store. Each names what it is about; the store never swallows one."""

from __future__ import annotations

from resources.coordination.items import LeaseItem, LeaseToken, PartitionStatus
from resources.errors import ComponentUnreachableError, ConfigError, LeaseholdError


class LeaseStoreError(LeaseholdError):
    """Base of every error the coordination store raises."""


class PartitionNotFoundError(LeaseStoreError):
    """No lease item for the named source partition."""

    def __init__(self, source_identifier: str, partition_key: str) -> None:
        super().__init__(f"no lease item for {source_identifier!r} / {partition_key!r}")
        self.source_identifier = source_identifier
        self.partition_key = partition_key


class PartitionUnavailableError(LeaseStoreError):
    """The named partition exists but cannot be acquired now; `current` says why."""

    def __init__(self, current: LeaseItem) -> None:
        detail = current.status.value
        if current.status is PartitionStatus.ASSIGNED:
            detail += f" to {current.owner} (epoch {current.epoch})"
        super().__init__(f"{current.partition_key!r} is not available: {detail}")
        self.current = current


class PartitionNotOwnedError(LeaseStoreError):
    """A fenced write was refused: the owner or epoch moved on (or the item is gone)."""

    def __init__(self, token: LeaseToken, action: str) -> None:
        super().__init__(
            f"{action} refused for {token.partition_key!r}: {token.owner} no longer holds "
            f"epoch {token.epoch} of it (lease lost or taken over)"
        )
        self.token = token
        self.action = action


class StoreUnavailableError(LeaseStoreError, ComponentUnreachableError):
    """The store could not be reached (or kept throttling) within the retry bound."""

    component = "the lease store"


class StoreRefusedError(LeaseStoreError, ComponentUnreachableError):
    """The store refused a call that no retry would change — access denied, no credentials, a
    table (of the file, or the DynamoDB table itself) missing, a file opened read-only — and
    nothing was written. The message names the store, the operation and the driver's own
    error."""

    component = "the lease store"


class StoreNotFoundError(LeaseStoreError):
    """The configured store does not exist, and what was asked (a read, a check) must not
    create it: an empty store in the wrong place would answer "nothing there" instead."""

    def __init__(self, location: str, reason: str = "no lease store") -> None:
        super().__init__(f"{reason}: {location}; `leasehold run` creates it")
        self.location = location
        self.reason = reason


class StoreConfigError(ConfigError):
    """Invalid store configuration, detected before any work. `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="lease store configuration")
