"""Source clean-up's global state, as others read it: how far clean-up went and what it removed.

Clean-up (`resources/cleanup`) writes it under the stream's `cleanup` global-state lease; the
completeness check and `leasehold status` read it to say why the source holds fewer objects
than the work units list, and may not import clean-up (it sits above them), so the names both
agree on live here, below both. Pure: a JSON object in, a JSON object out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from resources.coordination.lease_store import LeaseStore

CLEANUP_STATE = "cleanup"
"""The global-state item source clean-up keeps its cursor and counts in."""


@dataclass(frozen=True)
class CleanupState:
    """Where clean-up is (`cursor`) and what it has removed since it first ran."""

    cursor: str | None = None
    """Every COMPLETED work unit up to this completion priority is done (its objects archived
    or deleted, or never to be: a dead letter); None: none yet."""
    archived: int = 0
    """Source objects copied to `archive_to`, then deleted."""
    deleted: int = 0
    """Source objects deleted (delete mode)."""
    gone: int = 0
    """Objects found already gone when their turn came (removed by someone else, or by a pass
    that stopped before it could count them): expected missing from the source too."""
    bytes: int = 0
    """Bytes of the objects archived or deleted."""
    passes: int = 0
    last_pass_ms: int | None = None

    @property
    def cleaned(self) -> int:
        """Objects clean-up took out of the source, by whichever way."""
        return self.archived + self.deleted + self.gone

    def added(
        self, archived: int = 0, deleted: int = 0, gone: int = 0, size: int = 0
    ) -> CleanupState:
        """These counts added (pure)."""
        return replace(
            self,
            archived=self.archived + archived,
            deleted=self.deleted + deleted,
            gone=self.gone + gone,
            bytes=self.bytes + size,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> CleanupState:
        """From the stored JSON object; missing fields take their defaults (`{}`: never ran)."""
        known = {k: state[k] for k in cls.__dataclass_fields__ if k in state}
        return cls(**known)


def read_cleanup_state(store: LeaseStore, stream: str) -> CleanupState:
    """The stream's clean-up state, read without its lease: for display and the checks (the
    counts only grow, so a stale read is merely older). Raises the store errors."""
    return CleanupState.from_json(store.read_global_state(stream, CLEANUP_STATE))
