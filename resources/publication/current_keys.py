"""`CurrentKeys`: a date's current publication under a dedupe policy, as a merge of its small
objects uses it (`resources.compaction.merge_runner`): what it serves, and its key index, read
only when asked (a merge of objects it all covers needs no index)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from resources.dedupe.key_index import KeyIndex
from resources.dedupe.served import ServedState
from resources.publication.deduped_files import DedupedFiles
from resources.publication.publication_state import served_state
from resources.stores.base import CoordinationStore


@dataclass(frozen=True)
class CurrentKeys:
    """What a date's current publication serves, and how to read its key index."""

    state: ServedState
    read_index: Callable[[], KeyIndex]

    def index(self) -> KeyIndex:
        """Raises `ObjectStoreError`, `KeyIndexError`."""
        return self.read_index()


def current_keys(
    store: CoordinationStore, deduped: DedupedFiles, table: str, dt: str
) -> CurrentKeys | None:
    """`CurrentKeys` of `table`'s `dt` (None: never published, or published without a policy).
    Raises the store's errors, `ObjectStoreError`, `ServedStateError`."""
    publications = store.publications(table, dt)
    if not publications:
        return None
    state = served_state(deduped.objects, publications[-1])
    if state is None:
        return None
    return CurrentKeys(state, partial(deduped.key_index, publications[-1], state))
