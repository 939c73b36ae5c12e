"""Source changes, on both store backends: one record per stream, key and new fingerprint,
idempotent when seen again, listed by stream (or key), moved between states; apart from the
lease items."""

from __future__ import annotations

import pytest

from resources.coordination.source_changes import (
    ACKNOWLEDGED,
    APPENDED,
    PENDING,
    SourceChange,
)
from resources.stores.base import CoordinationStore

pytestmark = pytest.mark.contract


def change(key: str, etag: str, seen_ms: int = 1000) -> SourceChange:
    return SourceChange(key, etag, 12, "e0", 12, key, seen_ms)


def test_a_change_is_recorded_once_and_seen_again_as_it_was(store: CoordinationStore) -> None:
    sid = store.source_identifier("events")
    first = store.record_changes(sid, [change("a|b c", "e1"), change("z", "e1")])
    assert first == [change("a|b c", "e1"), change("z", "e1")]
    assert store.set_change_state(sid, first[0], APPENDED)
    again = store.record_changes(sid, [change("a|b c", "e1", seen_ms=5000), change("a|b c", "e2")])
    assert again == [change("a|b c", "e1").with_state(APPENDED), change("a|b c", "e2")]
    assert store.source_changes(sid) == [
        change("a|b c", "e1").with_state(APPENDED),
        change("a|b c", "e2"),
        change("z", "e1"),
    ]
    assert store.source_changes(sid, "z") == [change("z", "e1")]
    assert store.source_changes(store.source_identifier("other")) == []
    assert list(store.iter_items(sid)) == [] and sid not in store.source_identifiers()


def test_a_state_moves_only_on_a_record_that_exists(store: CoordinationStore) -> None:
    sid = store.source_identifier("events")
    assert store.source_changes(sid) == []
    assert not store.set_change_state(sid, change("a", "e1"), ACKNOWLEDGED)
    store.record_changes(sid, [change("a", "e1")])
    assert store.set_change_state(sid, change("a", "e1"), ACKNOWLEDGED)
    assert [c.state for c in store.source_changes(sid)] == [ACKNOWLEDGED]
    with pytest.raises(ValueError, match="no source change state"):
        store.set_change_state(sid, change("a", "e1"), "gone")
    assert PENDING == change("b", "e").state
