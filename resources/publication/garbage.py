"""`GarbageCollector`: deleting what no reader and no ledger state needs any more
(docs/architecture.md).

A table's root holds four kinds of files: small objects (`dt=<dt>/…`, written by ingestion),
merged objects (`merged/dt=<dt>/<epoch>-<uuid>/…`, written by merges), manifest versions
(`_manifests/dt=<dt>/<kind>-<upper>-<token>/…`, written by publication) and orphans of attempts
that never committed. A file is kept if anything may still read it:

- every file a *retained* publication's manifest names, and that manifest version itself (a
  reader holding a version keeps working until its successor has been current for the safety
  delay: `retained`);
- every merged object of the current chain (what the next publication and merge read);
- every file a retained snapshot of the table's Iceberg history references
  (`PublicationTarget.referenced_files`: a reader may time-travel to it), and every file under
  the target's own metadata prefix (`metadata/`) that the table's current metadata names
  (`PublicationTarget.metadata_files`; what expiry drops there the target deletes itself): the
  rest there was written by a commit that never landed — a publisher killed between writing
  its manifests and the catalog's swap, a commit refused or of unknown outcome — and goes like
  any orphan;
- every small object the current publication does not cover through merged ranges (all of them
  before the switch; after it, the ids above `published_upper`) — so a small object goes only
  once a switched publication covering it is current and no retained older manifest names it;
  and every small object a rollup of the stream has not consumed yet (rollups read small
  objects: above a rollup's cursor nothing is deleted, merged and published or not).

Everything else is deleted, but only once it is older than the safety delay: a file written by
an attempt still running (an ingestion or merge about to commit, a publication about to record)
is nothing's yet, and its attempt is bounded by a lease timeout well under the delay.

The order of the reads is what makes that safe: the table root is listed FIRST, then the ledger
is read, then the target's history. A file committed before the ledger read is in the
keep-set; one committed after it was written before the listing and committed since — younger
than the delay, so kept anyway. A file written after the listing is not a candidate at all.
`now` is taken before both, so ages and retention are judged at the earliest moment
(conservatively).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from resources.catalog.target import PublicationTarget
from resources.coordination.items import ItemType
from resources.errors import LeaseholdError
from resources.ledger.model import TablePartition
from resources.ledger.publication import MAX_UNRECORDED_AGE_MS, Publication, retained
from resources.objects.base import ObjectInfo, ObjectStore, ObjectStoreError
from resources.publication.manifest import MANIFESTS_PREFIX, read_spectrum
from resources.rollup.cursor import RollupCursor, rollup_id
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

MERGED_PREFIX = "merged/"
"""Where merges write their objects (`resources.compaction.merge_runner`)."""

SUPERSEDED_MERGED = "superseded merged object"
MERGED_SMALL = "small object merged and published"
EXPIRED_MANIFEST = "expired manifest version"
ORPHAN = "orphan of a failed attempt"
ORPHAN_METADATA = "table metadata of a commit that never landed"
REASONS = (SUPERSEDED_MERGED, MERGED_SMALL, EXPIRED_MANIFEST, ORPHAN, ORPHAN_METADATA)


@dataclass(frozen=True)
class Deletion:
    """One file garbage collection deletes, and why."""

    key: str
    size: int
    reason: str


@dataclass(frozen=True)
class GcPlan:
    """What one collection will delete and which history records it may then forget."""

    deletions: tuple[Deletion, ...]
    forget: dict[str, int]
    """dt -> the first retained publication's `seq`: the history records before it name only
    files this plan deletes (`Ledger.forget_publications` once they are gone)."""
    kept: int
    """Objects under the root that stay (needed, or younger than the safety delay)."""


@dataclass(frozen=True)
class GcReport:
    """What one collection deleted (or would, in a dry run), by reason, and what failed."""

    table: str
    dry_run: bool
    files: int
    """Deleted (a dry run: would be deleted)."""
    bytes: int
    by_reason: dict[str, tuple[int, int]]
    """reason -> (files, bytes), as `files` and `bytes`."""
    forgotten_publications: int
    failed: int = 0
    """Deletions that raised (counted, logged, and left for the next run; no history record is
    forgotten in a run where one failed)."""
    errors: tuple[str, ...] = field(default=())
    """The first few failures' messages."""

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        parts = [f"{self.table}: {verb} {self.files} files ({self.bytes} bytes)"]
        parts += [f"{reason}: {n} ({b} bytes)" for reason, (n, b) in self.by_reason.items()]
        parts.append(f"publication records forgotten: {self.forgotten_publications}")
        if self.failed:
            parts.append(f"FAILED deletions: {self.failed}: {'; '.join(self.errors)}")
        return "; ".join(parts)


MAX_ERRORS_REPORTED = 5


@dataclass
class _KeepSet:
    """What the ledger says must stay, as keys under the table's root."""

    keys: set[str] = field(default_factory=set)
    prefixes: list[str] = field(default_factory=list)
    """Retained manifest version directories (all of a version's files stay)."""
    recorded: list[str] = field(default_factory=list)
    """Every version directory the ledger's publication history names, retained or not."""
    ledger_small: set[str] = field(default_factory=set)
    """Every small object the ledger holds (kept or not): how a deletion is classified."""
    forget: dict[str, int] = field(default_factory=dict)
    metadata_prefix: str | None = None
    """The target's metadata directory, as a key prefix (how a deletion is classified)."""

    def holds(self, key: str) -> bool:
        return key in self.keys or any(key.startswith(p) for p in self.prefixes)

    def unrecorded_manifest(self, key: str) -> bool:
        return key.startswith(MANIFESTS_PREFIX) and not any(
            key.startswith(p) for p in self.recorded
        )


class GarbageCollector:
    """Deletes a table's files that no retained publication, ledger state or running attempt may
    still read."""

    def __init__(
        self,
        config: StreamConfig,
        store: CoordinationStore,
        objects: ObjectStore,
        *,
        safety_delay_s: float,
        clock_ms: Callable[[], int] | None = None,
        target: PublicationTarget | None = None,
    ) -> None:
        """`target`: the stream's publication target, whose retained history (an Iceberg
        table's snapshots) and metadata are kept too; None: the ledger alone decides."""
        if safety_delay_s < 0:
            raise LeaseholdError(f"the safety delay must be >= 0 seconds, got {safety_delay_s}")
        for name, url in (("source", config.source), ("quarantine", config.quarantine)):
            if (url + "/").startswith(objects.root_url + "/"):
                # Everything under the root that the ledger does not name is an orphan here.
                raise LeaseholdError(
                    f"stream {config.name!r}: its {name} {url} lies under its table's root "
                    f"{objects.root_url}; garbage collection would delete it"
                )
        self.config = config
        self.table = config.name
        self.store = store
        self.objects = objects
        self.safety_delay_ms = int(safety_delay_s * 1000)
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.target = target

    def plan(self) -> GcPlan:
        """What may be deleted now. Reads only: the root first, then the ledger (see the
        module's docstring for why that order)."""
        now = self.clock_ms()
        listed = list(self.objects.list_prefix(""))
        keep = self._keep_set(now)
        self._keep_served(keep)
        deletions: list[Deletion] = []
        kept = 0
        for info in listed:
            if keep.holds(info.key) or not self._old(info, now, keep.unrecorded_manifest(info.key)):
                kept += 1
            else:
                deletions.append(Deletion(info.key, info.size, self._reason(info.key, keep)))
        return GcPlan(tuple(deletions), dict(keep.forget), kept)

    def collect(self, *, dry_run: bool = False) -> GcReport:
        """Delete what `plan` found, then forget the history records whose files are gone. A
        failed deletion is logged and counted in the report, and the run forgets nothing (the
        file is found again, for the same reason, by the next run)."""
        plan = self.plan()
        done: list[Deletion] = []
        errors: list[str] = []
        for d in plan.deletions:
            if dry_run:
                done.append(d)
                continue
            try:
                self.objects.delete(d.key)
            except (ObjectStoreError, OSError) as exc:
                log.error("%s: could not delete %s (%s): %s", self.table, d.key, d.reason, exc)
                errors.append(f"{d.key}: {exc}")
                continue
            done.append(d)
        forgotten = 0
        if errors:
            log.error(
                "%s: %d deletions failed; no publication record forgotten this run",
                self.table,
                len(errors),
            )
        elif dry_run:
            forgotten = sum(self._forgettable(dt, seq) for dt, seq in plan.forget.items())
        else:
            for dt, seq in sorted(plan.forget.items()):
                forgotten += self.store.forget_publications(self.table, dt, seq)
        report = GcReport(
            table=self.table,
            dry_run=dry_run,
            files=len(done),
            bytes=sum(d.size for d in done),
            by_reason=_by_reason(done),
            forgotten_publications=forgotten,
            failed=len(errors),
            errors=tuple(errors[:MAX_ERRORS_REPORTED]),
        )
        log.info("%s", report.describe())
        for reason, (n, size) in report.by_reason.items():
            log.info(
                "%s: %s %d files (%d bytes): %s",
                self.table,
                "would delete" if dry_run else "deleted",
                n,
                size,
                reason,
            )
        return report

    # -- the keep-set ---------------------------------------------------------------------------

    def _keep_set(self, now: int) -> _KeepSet:
        keep = _KeepSet()
        for tp in self.store.table_partitions(self.table):
            self._keep_partition(tp, now, keep)
        return keep

    def _keep_partition(self, tp: TablePartition, now: int, keep: _KeepSet) -> None:
        dt = tp.dt
        publications = self.store.publications(self.table, dt)
        kept = retained(publications, now, self.safety_delay_ms) if publications else []
        for p in publications:
            version_key = self._key(p.location)
            if version_key is not None:
                keep.recorded.append(version_key.rstrip("/") + "/")
        for p in kept:
            self._keep_version(p, keep)
        if kept and kept[0].seq > publications[0].seq:
            keep.forget[dt] = kept[0].seq
        for r in self.store.merge_ranges(self.table, dt):
            if not r.is_sentinel and r.url is not None:
                self._keep_url(r.url, keep.keys)
        covered = min(
            _covered_upper(tp, publications[-1] if publications else None),
            self._rolled_up(dt),
        )
        for o in self.store.ledger_objects(self.table, dt):
            key = self._key(o.url)
            if key is None:
                continue
            keep.ledger_small.add(key)
            if o.object_id > covered:
                keep.keys.add(key)

    def _keep_served(self, keep: _KeepSet) -> None:
        """What the target's history serves and the metadata its current state names
        (`PublicationTarget`'s `referenced_files`, `metadata_prefix`, `metadata_files`; a
        target that cannot name its metadata files keeps its whole prefix). Raises
        `CatalogError` (nothing is deleted when the history cannot be read whole)."""
        if self.target is None or self.target.table(self.table) is None:
            return
        prefix = self.target.metadata_prefix(self.table)
        key = None if prefix is None else self._key(prefix)
        if key is not None:
            keep.metadata_prefix = key if key.endswith("/") else key + "/"
            in_use = self.target.metadata_files(self.table)
            if in_use is None:
                keep.prefixes.append(keep.metadata_prefix)
            for url in in_use or ():
                self._keep_url(url, keep.keys)
        for url in self.target.referenced_files(self.table) or ():
            self._keep_url(url, keep.keys)

    def _rolled_up(self, dt: str) -> int:
        """The ids every rollup of the stream has consumed for `dt`: a small object above them
        is kept, merged and published or not (the rollup reads small objects)."""
        uptos = [
            RollupCursor.of(None if item is None else item.progress).upto
            for item in (
                self.store.get(
                    self.store.source_identifier(rollup_id(self.table, spec), ItemType.ROLLUP_JOB),
                    dt,
                )
                for spec in self.config.rollups
            )
        ]
        return min(uptos, default=sys.maxsize)

    def _keep_version(self, p: Publication, keep: _KeepSet) -> None:
        """A retained version: its directory (both manifests) and every file it names. A
        manifest that cannot be read stops the whole plan: what it names is unknown, and
        guessing could delete a file a reader is reading."""
        version_key = self._key(p.location)
        if version_key is None:
            raise LeaseholdError(
                f"{self.table} dt={p.dt}: publication {p.seq}'s manifest {p.location} is not "
                f"under the table's root {self.objects.root_url}"
            )
        keep.prefixes.append(version_key if version_key.endswith("/") else version_key + "/")
        try:
            entries = read_spectrum(self.objects, p.location)
        except (ObjectStoreError, OSError) as exc:
            raise LeaseholdError(
                f"{self.table} dt={p.dt}: cannot read retained publication {p.seq}'s manifest "
                f"{p.location}: {exc}; nothing is deleted"
            ) from exc
        for e in entries:
            self._keep_url(e.url, keep.keys)

    def _keep_url(self, url: str, keys: set[str]) -> None:
        key = self._key(url)
        if key is not None:
            keys.add(key)

    def _key(self, url: str) -> str | None:
        """The key of a URL under the table's root; None (it cannot be listed here) if not."""
        try:
            return self.objects.key_of(url)
        except ObjectStoreError:
            log.warning("%s: %s is not under the table's root; ignored", self.table, url)
            return None

    def _forgettable(self, dt: str, before_seq: int) -> int:
        return sum(p.seq < before_seq for p in self.store.publications(self.table, dt))

    # -- deciding -------------------------------------------------------------------------------

    def _old(self, info: ObjectInfo, now: int, unrecorded_manifest: bool) -> bool:
        """Older than the safety delay; a manifest no publication record names (a publisher
        may still record it) also older than twice the age at which the ledger stops
        accepting it (`MAX_UNRECORDED_AGE_MS`: clocks may differ)."""
        min_age = self.safety_delay_ms
        if unrecorded_manifest:
            min_age = max(min_age, 2 * MAX_UNRECORDED_AGE_MS)
        return now - info.modified_ms > min_age

    @staticmethod
    def _reason(key: str, keep: _KeepSet) -> str:
        if keep.metadata_prefix is not None and key.startswith(keep.metadata_prefix):
            return ORPHAN_METADATA
        if key.startswith(MERGED_PREFIX):
            return SUPERSEDED_MERGED
        if key in keep.ledger_small:
            return MERGED_SMALL
        if key.startswith(MANIFESTS_PREFIX):
            return EXPIRED_MANIFEST
        return ORPHAN


def _covered_upper(tp: TablePartition, current: Publication | None) -> int:
    """The ids the current publication covers through merged ranges (0: none). The partition's
    row and the last history record were read at different moments: the smaller is taken."""
    if current is None or not current.switched or not tp.switched:
        return 0
    return min(current.upper, tp.published_upper)


def _by_reason(deletions: Iterable[Deletion]) -> dict[str, tuple[int, int]]:
    totals: dict[str, tuple[int, int]] = {}
    for d in deletions:
        n, size = totals.get(d.reason, (0, 0))
        totals[d.reason] = (n + 1, size + d.size)
    return {r: totals[r] for r in REASONS if r in totals}
