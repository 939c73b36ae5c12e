"""`CoordinationStore`: leases and the ledger in one store, and the commits they share.

A commit (docs/architecture.md) writes the ledger and the lease item in one transaction, so one
store implements both interfaces. What a commit decides is here, once: the size check, the
lease transition (COMPLETED, or renewed for chunked work), the ids (`assign_ids`), the metrics
and what a refusal means. A backend only writes it all as one transaction (`_commit`). A merge
commit is the same shape: the job lease's give-up transition, its metrics and refusal are
here, and so is what it writes (`merge_writes`: the range, the sentinel, the partition's new
bounds and due time); the backend's `_commit_merge` writes them and the lease together. A
publication's bookkeeping is here too (`stamped_publication`, `forget_bound`): each backend
only writes the record and the partition's new current version as one transaction
(`_record_publications`), with the lease's renewal when fenced (`record_fenced_publication`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from resources.coordination import metrics as m
from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import NOT_GIVEN, LeaseItem, LeaseToken
from resources.coordination.lease_store import LeaseStore
from resources.coordination.object_claims import ObjectClaims
from resources.coordination.source_changes import SourceChanges
from resources.coordination.transitions import Transition
from resources.errors import LeaseholdError
from resources.ledger.ledger import Ledger
from resources.ledger.merge import (
    SENTINEL_UPPER,
    CommitDue,
    MergeCommit,
    MergeCommitResult,
    MergeRange,
    next_merge_due,
)
from resources.ledger.model import (
    CommitResult,
    SmallObject,
    TablePartition,
    check_commit_size,
    group_by_partition,
)
from resources.ledger.publication import Publication, check_publication
from resources.ledger.rollup_state import (
    KEYS_PER_TRANSACTION,
    KeyWrite,
    RollupKeyMovedError,
    RollupLedger,
)
from resources.ledger.schema_versions import SchemaRegistry, SchemaVersionTakenError
from resources.rollup.aggregates import Aggregate, Value
from resources.rollup.state import (
    KeyState,
    Mode,
    Removal,
    apply_batch,
    apply_served,
    replay_partials,
)
from resources.schema.columns import ColumnSpec
from resources.schema.versions import SchemaOrigin, SchemaVersion, next_version, version_holding

SCHEMA_RACES = 50
"""Reads-then-puts of a schema version before giving up: each lost race means another writer
recorded a version meanwhile, so this bounds how many versions may land during one call."""

KEY_RACES = 5
"""Reads-then-writes of one chunk of rollup keys before giving up: a key moves between them
only when a writer without the lease writes, which the fence keeps out."""

PUBLICATIONS_PER_TRANSACTION = 49
"""Publications recorded in one fenced transaction at most: DynamoDB's `TransactWriteItems`
takes 100 actions, and each takes two (the partition, its history record) beside the lease's."""

TablePartitionObjects = dict[tuple[str, str], list[SmallObject]]


@dataclass(frozen=True)
class MergeWrites:
    """What a merge commit writes, decided from the partition and the chain as its transaction
    read them (after `check_merge` passed)."""

    written: MergeRange | None
    """The merged range (new, or the open one rewritten); None when nothing was merged."""
    sentinel: MergeRange | None
    """The chain's sentinel, on the partition's first merge only."""
    merged_upper: int
    desired_manifest_version: int
    due_at_ms: int | None
    """The partition's next `merge_due_at_ms` (`next_merge_due`); None: no pending job."""

    def result(self) -> MergeCommitResult:
        return MergeCommitResult(self.written, self.due_at_ms, self.desired_manifest_version)


def merge_writes(
    merge: MergeCommit,
    partition: TablePartition | None,
    ranges: Sequence[MergeRange],
    epoch: int,
    now_ms: int,
) -> MergeWrites:
    """The same in every backend, so only how each writes it differs: `partition` and `ranges`
    as read (None: the partition does not exist), `epoch` the merge job lease's."""
    table, dt = merge.table, merge.dt
    next_id = 1 if partition is None else partition.next_object_id
    merged_upper = 0 if partition is None else partition.merged_upper
    desired = -1 if partition is None else partition.desired_manifest_version
    written = sentinel = None
    m = merge.merged
    if m is not None:
        written = MergeRange(
            table,
            dt,
            m.lower,
            m.upper,
            m.url,
            m.content_length,
            m.row_count,
            epoch,
            now_ms,
            m.schema_version,
        )
        if not ranges:
            sentinel = MergeRange(table, dt, None, SENTINEL_UPPER, None, 0, 0, 0, now_ms)
        merged_upper = desired = m.upper
    due = next_merge_due(
        now_ms=now_ms,
        merged_upper=merged_upper,
        last_committed_id=next_id - 1,
        carry_over=merge.carry_over,
        interval_s=(
            merge.delayed_interval_s
            if partition is not None and partition.closed and merge.delayed_interval_s is not None
            else merge.interval_s
        ),
    )
    return MergeWrites(written, sentinel, merged_upper, desired, due)


def stamped_publication(
    partition: TablePartition | None, publication: Publication, now_ms: int
) -> Publication:
    """The record `record_publication` stores, decided from the partition as its transaction
    read it: `check_publication` first (raising, nothing written), then the next `seq` and
    the moment it became current. Whatever `seq`/`published_at_ms` the caller put in are
    ignored: only the ledger orders publications."""
    check_publication(partition, publication, now_ms)
    assert partition is not None  # check_publication refuses a missing partition
    return replace(publication, seq=partition.publication_seq + 1, published_at_ms=now_ms)


def forget_bound(partition: TablePartition | None, before_seq: int) -> int:
    """Records with `seq` below this may be forgotten: `before_seq`, but never the current one
    (the partition's `publication_seq`), whatever the caller asks: the record of what readers
    are served now is what garbage collection keeps files for."""
    return min(before_seq, 0 if partition is None else partition.publication_seq)


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class CoordinationStore(
    LeaseStore, ObjectClaims, SourceChanges, Ledger, RollupLedger, SchemaRegistry, ABC
):
    """One store holding the leases, object claims, the ledger, rollup state and schema
    versions on one connection, so that a commit can write the ledger and the lease item in
    one transaction: what a backend implements (`SqliteLeaseStore`, `DynamoDbLeaseStore`) and
    what every layer above is given. The fenced operations that span the parts are here, on the
    backends' transactions (`_commit`, `_commit_merge`, `_record_publications`,
    `_write_rollup_keys`).

    Errors are those of its parts: every call may raise the store errors
    (`StoreUnavailableError` within the bounded retry, `StoreRefusedError` for good), a
    fenced write `PartitionNotOwnedError` when its token no longer holds (nothing
    written)."""

    def record_schema(
        self, stream: str, columns: Sequence[ColumnSpec], origin: SchemaOrigin
    ) -> SchemaVersion:
        """The first version of `stream`'s schema holding every one of `columns` (by name): an
        existing one, or the one written now — the latest plus the columns it lacks, in the
        order given (`next_version`; the first version is `columns` themselves). Idempotent
        (asking again for columns a version holds returns it) and safe under concurrency (a
        writer that loses the race for a version number reads again and adds what is still
        missing on top of the winner's). A held name asked for with another type keeps its
        type (`resources.schema.versions.conflicts`).
        Raises `StoreUnavailableError` after `SCHEMA_RACES` lost races, `LeaseStoreError`
        when the store cannot be read or written."""
        for _ in range(SCHEMA_RACES):
            history = self.schema_versions(stream)
            new = next_version(history, columns, origin, self.now_ms())
            if new is None:
                held = version_holding(history, columns)
                return next(v for v in history if v.version == held)
            try:
                self._put_schema_version(stream, new)
            except SchemaVersionTakenError:
                continue
            return new
        raise StoreUnavailableError(
            f"schema of {stream!r}: lost {SCHEMA_RACES} races for a version number in a row"
        )

    @abstractmethod
    def _commit(
        self,
        token: LeaseToken,
        groups: TablePartitionObjects,
        lease_change: Transition,
        record: bool,
        merge_due: Mapping[str, CommitDue],
    ) -> tuple[CommitResult | None, LeaseItem | None]:
        """In ONE transaction, if `lease_change`'s guard holds: register the objects with ids
        from `assign_ids`, write a commit record when `record` (raising `AlreadyCommittedError`
        if there is one), set each of a table's partitions in `groups` due as
        `commit_merge_due(stored due, closed as read, merge_due[table])` says, and apply
        `lease_change`. `(result, None)`, or `(None, the
        lease item as stored)` when the guard refused: then nothing was written."""

    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
        merge_after_s: Mapping[str, float] | None = None,
        delayed_merge_after_s: Mapping[str, float] | None = None,
    ) -> CommitResult:
        objects = list(objects)
        now = self.now_ms()
        delayed = delayed_merge_after_s or {}
        due = {
            t: CommitDue(now + _ms(s), now + _ms(delayed.get(t, s)))
            for t, s in (merge_after_s or {}).items()
        }
        check_commit_size(objects)
        if complete:
            change = self.completion(token, progress_state)
        else:
            change = self.renewal(token, timeout_s, progress_state)
        try:
            result, current = self._commit(
                token, group_by_partition(objects), change, complete, due
            )
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(change.action))
            raise
        if result is None:
            raise self._refused(token, change, current)
        if complete:
            self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return result

    @abstractmethod
    def _commit_merge(
        self, token: LeaseToken, merge: MergeCommit, lease_change: Transition
    ) -> tuple[MergeCommitResult | None, LeaseItem | None]:
        """In ONE transaction, if `lease_change`'s guard holds: `check_merge` against the stored
        chain and `next_object_id` (raising `MergeChainError`, nothing written), write the range
        (and the sentinel on the first merge), the partition's `merged_upper`,
        `desired_manifest_version` and `merge_due_at_ms` (`next_merge_due` of what the
        transaction sees), and apply `lease_change`. `(result, None)`, or `(None, the lease item
        as stored)` when the guard refused: then nothing was written. The guard is decided
        before the chain, so a fenced merge is told it lost its lease, whatever the chain."""

    def commit_merge(self, token: LeaseToken, merge: MergeCommit) -> MergeCommitResult:
        change = self.giving_up(token)
        try:
            result, current = self._commit_merge(token, merge, change)
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(change.action))
            raise
        if result is None:
            raise self._refused(token, change, current)
        return result

    @abstractmethod
    def _record_publications(
        self,
        publications: Sequence[Publication],
        token: LeaseToken | None,
        lease_change: Transition | None,
    ) -> tuple[list[Publication] | None, LeaseItem | None]:
        """In ONE transaction, for each of `publications` (each of another table partition,
        at most `PUBLICATIONS_PER_TRANSACTION`): `stamped_publication` on the partition as
        stored (raising, nothing written), the partition's new current publication and the
        history record; and, when `lease_change` is given (with its `token`), only if its guard
        holds, applying it too. `(the records as stored, None)`, or `(None, the lease item as
        stored)` when the guard refused: then nothing was written. The guard is decided before
        the publications, so a fenced publisher is told it lost its lease, whatever the
        partitions hold."""

    def record_publication(self, publication: Publication) -> Publication:
        """`Ledger.record_publication`: unfenced, one transaction of `_record_publications`.
        Returns the record as stored. Raises `StalePublicationError` (the partition already
        has this version or a newer one; a revision of a publication no longer current), a
        `LeaseholdError` for a publication the ledger cannot hold, and the store errors;
        nothing is written when it raises."""
        stored, _ = self._record_publications([publication], None, None)
        assert stored is not None  # unfenced: nothing to refuse it but the raised errors
        return stored[0]

    def record_publications(self, publications: Sequence[Publication]) -> list[Publication]:
        """Record each of `publications` (each of another table partition) as
        `record_publication` does, all in ONE transaction: every reader of the ledger sees
        all of them current or none (a replacement's dates). Returns the records as stored,
        in order. Raises what `record_publication` raises (for any one of them: then none is
        recorded), and `LeaseholdError` for more than `PUBLICATIONS_PER_TRANSACTION` or two of
        one partition, before anything is written."""
        _check_one_transaction(publications)
        if not publications:
            return []
        stored, _ = self._record_publications(publications, None, None)
        assert stored is not None  # unfenced: nothing to refuse it but the raised errors
        return stored

    def record_fenced_publication(
        self, token: LeaseToken, publication: Publication, *, timeout_s: float = 60.0
    ) -> Publication:
        """Record `publication` as `record_publication` does and, in the same transaction,
        renew `token`'s lease (a table's `ItemType.KEYS_JOB` item) by `timeout_s`: a publisher
        whose lease was taken over can never make its publication current. Returns the record
        as stored (`seq` and `published_at_ms` the ledger's). Raises `PartitionNotOwnedError`
        when `token` no longer holds the lease, whatever the partition holds; then
        `StalePublicationError` when the partition already has this version or a newer one
        (the lease not renewed), a `LeaseholdError` for a publication the ledger cannot hold
        (`check_publication`), and the store errors. Nothing is written when it raises."""
        (stored,) = self.record_fenced_publications(token, [publication], timeout_s=timeout_s)
        return stored

    def record_fenced_publications(
        self, token: LeaseToken, publications: Sequence[Publication], *, timeout_s: float = 60.0
    ) -> list[Publication]:
        """Record each of `publications` (each of another table partition) as
        `record_fenced_publication` does, all in ONE transaction with the lease's renewal:
        every reader of the ledger sees all of them current or none — a key moving from one
        date to another is never served by both. Returns the records as stored, in order.
        Raises what `record_fenced_publication` raises (for any one of them: then none is
        recorded), and `LeaseholdError` for more than `PUBLICATIONS_PER_TRANSACTION` or two of
        one partition, before anything is written."""
        _check_one_transaction(publications)
        if not publications:
            return []
        change = self.renewal(token, timeout_s, NOT_GIVEN)
        try:
            stored, current = self._record_publications(publications, token, change)
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(change.action))
            raise
        if stored is None:
            raise self._refused(token, change, current)
        return stored

    def write_rollup_batch(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        mode: Mode,
        aggregates: Sequence[Aggregate],
        txid: int,
        partials: Mapping[str, Value],
        *,
        timeout_s: float = 60.0,
        after_transaction: Callable[[int], None] | None = None,
        earlier: Collection[int] = (),
    ) -> int:
        """Apply batch `txid`'s partial results (key -> value) to `rollup`'s state of `dt`, in
        transactions of `KEYS_PER_TRANSACTION` keys in key order, each fenced by `token` (the
        rollup job's lease, renewed by `timeout_s` in each) and each key conditional on the
        txid read. Storm's rule decides each key (`apply_batch`): a replay of a batch some keys
        hold already is safe in both modes. An opaque batch also writes every key an earlier
        attempt of it wrote (those holding `txid`) that this attempt has no rows for, with the
        identity: they get their `prev_value` back; `earlier` names the txids of earlier,
        smaller attempts of an opaque batch (`apply_batch`), whose keys count as the batch's.
        `after_transaction(n)` is told after the n-th transaction (where a crash matters).
        Returns how many keys were written. Raises `PartitionNotOwnedError` when fenced (the
        transaction wrote nothing)."""
        if mode is Mode.OPAQUE:
            attempts = {txid, *earlier}
            written_before = [
                k for k, s in self.rollup_states(rollup, dt).items() if s.txid in attempts
            ]
            partials = replay_partials(aggregates, partials, written_before)
        return self._write_rollup_keys_in_order(
            token,
            rollup,
            dt,
            sorted(partials),
            lambda before, key: apply_batch(mode, aggregates, before, txid, partials[key], earlier),
            txid,
            timeout_s,
            after_transaction,
        )

    def write_rollup_values(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        txid: int,
        values: Mapping[str, Value],
        *,
        timeout_s: float = 60.0,
        after_transaction: Callable[[int], None] | None = None,
    ) -> int:
        """Set `rollup`'s state of `dt` to `values` (key -> value) as of `txid`, every other
        key removed: a rollup recomputed from what a publication serves (`apply_served`).
        Written as `write_rollup_batch` writes; a key holding `txid` is left as it is (a
        replay completes the state), and nothing is written while any key holds a later txid.
        Returns how many keys were written or removed. Raises `PartitionNotOwnedError` when
        fenced (the transaction wrote nothing)."""
        stored = self.rollup_states(rollup, dt)
        if any(s.txid > txid for s in stored.values()):
            return 0  # a later publication's state (or part of it) is there: this one is stale
        return self._write_rollup_keys_in_order(
            token,
            rollup,
            dt,
            sorted(values.keys() | stored.keys()),
            lambda before, key: apply_served(before, txid, values.get(key)),
            txid,
            timeout_s,
            after_transaction,
        )

    def _write_rollup_keys_in_order(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        keys: Sequence[str],
        apply: Callable[[KeyState | None, str], KeyState | Removal | None],
        txid: int,
        timeout_s: float,
        after_transaction: Callable[[int], None] | None,
    ) -> int:
        """`keys` (sorted) in transactions of `KEYS_PER_TRANSACTION` (`_write_rollup_chunk`),
        `after_transaction(n)` told after the n-th; how many keys were written."""
        written = 0
        for n, start in enumerate(range(0, len(keys), KEYS_PER_TRANSACTION), 1):
            chunk = keys[start : start + KEYS_PER_TRANSACTION]
            written += self._write_rollup_chunk(token, rollup, dt, chunk, apply, txid, timeout_s)
            if after_transaction is not None:
                after_transaction(n)
        return written

    def _write_rollup_chunk(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        chunk: Sequence[str],
        apply: Callable[[KeyState | None, str], KeyState | Removal | None],
        txid: int,
        timeout_s: float,
    ) -> int:
        """One transaction of `write_rollup_batch`: `chunk`'s keys read, `apply`ed, written
        conditional on the txid read (read again when another writer moved one)."""
        for _ in range(KEY_RACES):
            stored = self.rollup_states(rollup, dt, chunk)
            writes = []
            for key in chunk:
                before = stored.get(key)
                after = apply(before, key)
                if after is not None:
                    expected = None if before is None else before.txid
                    writes.append(KeyWrite(key, expected, after))
            change = self.renewal(token, timeout_s, NOT_GIVEN)
            try:
                done, current = self._write_rollup_keys(token, rollup, dt, writes, change)
            except RollupKeyMovedError:
                continue  # another writer's transaction landed between our read and write
            except StoreUnavailableError:
                self.metrics.incr(token.source_identifier, m.update_errors(change.action))
                raise
            if not done:
                raise self._refused(token, change, current)
            return len(writes)
        raise StoreUnavailableError(
            f"rollup {rollup} dt={dt}: keys kept moving under batch {txid}; "
            "is a second writer running without the lease?"
        )


def _check_one_transaction(publications: Sequence[Publication]) -> None:
    dates = [p.dt for p in publications]
    if len(publications) > PUBLICATIONS_PER_TRANSACTION or len(set(dates)) < len(dates):
        raise LeaseholdError(
            f"{len(publications)} publications of {len(set(dates))} table partitions in one "
            f"transaction: at most {PUBLICATIONS_PER_TRANSACTION}, one per partition"
        )
