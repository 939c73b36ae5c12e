"""What a check pass evaluates: what changed since the check last passed, or everything.

A check that judged every table partition and every source object on every pass would cost
what history holds, and `leasehold run`, the checks sensor and CI run them after every run
(issue 20: the checks were what made an idle run grow with history). Each check remembers
what it last found good — per table partition the state of its row, for the source the key up
to which every object was held by a work unit, for the work units the completion time up to
which every completed one was judged — and its next pass evaluates only what differs: a
partition whose row moved (a commit, a merge, a close, a publication all move it), source
objects after that key, units completed since. Its cost is then what changed since the last
pass.

What an incremental pass cannot see is damage that moves no row: a file deleted or truncated
behind the ledger's back, an object landing behind the remembered key (discovery's
reconciliation pass leases those; until then only a full pass reports it). So every
`FULL_AUDIT_EVERY_MS` a pass is a full audit by itself, `leasehold check --full` runs one on
demand, and a pass that fails forgets everything: the next one is full again, so a failure
never turns into a pass by being skipped.

The memory is one global-state item per check and table in the lease store (Data Prepper's
GLOBAL items, as the discovery cursor), written under its lease; losing it costs one full pass,
never a wrong verdict.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from resources.check_outcome import CheckOutcome
from resources.coordination.lease_store import LeaseStore
from resources.ledger.model import TablePartition

log = logging.getLogger(__name__)

FULL_AUDIT_EVERY_MS = 24 * 3600 * 1000
"""How old the last full pass may be before a pass is full by itself: the daily audit."""

MAX_REMEMBERED_DATES = 4000
"""Partition states kept per check (the latest dates): eleven years of days, a few hundred KB
at most, inside a DynamoDB item. A date forgotten is evaluated again, nothing worse."""

MEMORY_LEASE_S = 60.0


def partition_state(tp: TablePartition) -> list[Any]:
    """Everything of a partition's row that a commit, merge, close, switch or publication
    changes: equal states mean nothing the ledger knows of happened to it in between."""
    return [
        tp.next_object_id,
        tp.last_live_object_id,
        tp.merged_upper,
        tp.desired_manifest_version,
        tp.switched,
        tp.publication_seq,
        tp.published_upper,
    ]


@dataclass
class CheckScope:
    """One pass's scope. A check asks it which partitions to judge (`changed`) and where to
    resume listing the source (`source_after`), and tells it how far it got (`source_reached`)."""

    full: bool
    remembered: dict[str, list[Any]] = field(default_factory=dict)
    source_after: str | None = None
    """List the source after this key (None: from its start)."""
    source_covering: list[str] = field(default_factory=list)
    """The keys of the work units holding objects past `source_after` (`UnitCoverage`)."""
    evaluated: dict[str, list[Any]] = field(default_factory=dict)
    skipped: int = 0
    source_reached: tuple[str | None, list[str]] | None = None
    """Set by the source check: every object up to this key is held by a work unit, and the
    units reaching past it; None: nothing new (the next pass resumes where this one did)."""
    full_at_ms: int = 0
    """When the last full pass ran (this one, once it is kept, if it is full)."""
    completed_upto: str | None = None
    """For checks that judge work units as they complete: every unit completed up to this
    priority was judged (None: judge them all). The check sets it to how far it got."""
    dead_letters: list[str] = field(default_factory=list)
    """For `lease_health`: the dead letters found so far, for the next pass to read again."""

    @classmethod
    def everything(cls) -> CheckScope:
        """A full pass that remembers nothing: for callers without a store to keep memory in."""
        return cls(full=True)

    def changed(self, partitions: Iterable[TablePartition]) -> list[TablePartition]:
        """The partitions to judge: all of them in a full pass, else those whose row differs
        from the one the check last passed on (or that it never judged)."""
        todo = []
        for tp in partitions:
            state = partition_state(tp)
            if not self.full and self.remembered.get(tp.dt) == state:
                self.skipped += 1
                continue
            self.evaluated[tp.dt] = state
            todo.append(tp)
        return todo

    def note(self) -> str:
        """What the summary says of the scope."""
        if self.full:
            return " (full audit)"
        if self.skipped:
            return f" ({self.skipped} unchanged since the last pass not read again)"
        return ""


class CheckMemory:
    """One check's memory for one table of a stream, in the lease store's global state."""

    def __init__(self, store: LeaseStore, stream: str, check: str, table: str) -> None:
        self.store, self.stream = store, stream
        self.name = f"check/{table}/{check}"

    def scope(self, full: bool = False) -> CheckScope:
        state = self.store.read_global_state(self.stream, self.name)
        due = self.store.now_ms() - int(state.get("full_at_ms", 0)) >= FULL_AUDIT_EVERY_MS
        if full or due:
            return CheckScope(full=True)
        return CheckScope(
            full=False,
            remembered=dict(state.get("dates", {})),
            source_after=state.get("source"),
            source_covering=list(state.get("covering", [])),
            full_at_ms=int(state.get("full_at_ms", 0)),
            completed_upto=state.get("completed_upto"),
            dead_letters=list(state.get("dead_letters", [])),
        )

    def remember(self, scope: CheckScope, outcome: CheckOutcome) -> None:
        """Keep what this pass found good; forget everything when it failed with an error (a
        warning — an object not discovered yet, a dead letter — is no verdict on what was
        judged)."""
        if outcome.failed and outcome.severity == "error":
            state: dict[str, Any] = {}
        else:
            # A full scope starts from nothing remembered, so this is the same for both.
            dates = {**scope.remembered, **scope.evaluated}
            kept = sorted(dates)[-MAX_REMEMBERED_DATES:]
            source, covering = scope.source_reached or (scope.source_after, scope.source_covering)
            state = {
                "dates": {dt: dates[dt] for dt in kept},
                "source": source,
                "covering": covering,
                "full_at_ms": self.store.now_ms() if scope.full else scope.full_at_ms,
                "completed_upto": scope.completed_upto,
                "dead_letters": scope.dead_letters,
            }
        owner = f"checks-{uuid.uuid4().hex[:12]}"
        item = self.store.acquire_global_state(self.stream, self.name, owner, MEMORY_LEASE_S)
        if item is None:
            # Another pass of the same check is saving: its memory is as good as this one's.
            log.info("%s: another pass holds its memory; this pass's is not kept", self.name)
            return
        self.store.release_global_state(item.token, state)


def with_memory(
    store: LeaseStore,
    stream: str,
    table: str,
    check: str,
    judge: Callable[[CheckScope], CheckOutcome],
    full: bool = False,
) -> CheckOutcome:
    """Run `judge` on the scope the check's memory gives, keep what it found, and say in the
    outcome how much it judged (in a passing summary, and always in the metadata)."""
    memory = CheckMemory(store, stream, check, table)
    scope = memory.scope(full)
    outcome = judge(scope)
    memory.remember(scope, outcome)
    return replace(
        outcome,
        # A pass says what it read; a failure stands whatever the scope was.
        summary=outcome.summary + (scope.note() if outcome.passed else ""),
        metadata={**outcome.metadata, "full_audit": scope.full, "unchanged_skipped": scope.skipped},
    )
