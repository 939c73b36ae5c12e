"""Publication: which manifest version readers of a table partition are served
(docs/architecture.md).

Every published table partition is located by an immutable, versioned manifest, never by a
prefix. Before the switch a manifest lists its live small objects (ids `1..upper`); once the
partition is closed and its merge chain covers every live id, it switches and a manifest lists
the chain's merged objects (covering `1..upper`, `upper` the chain's end). After the switch
every merge commit raises `desired_manifest_version` (= `merged_upper`), and the partition is
published again: delayed objects become visible once merged.

A publication's *version* orders them: `(switched, upper)`. The ledger records one only if it
is newer than the partition's current one (`check_publication`, called inside the backend's
transaction), so a partition never moves back to an older version, and assigns it the next
`seq` (1, 2, ...), which the catalog keeps beside the partition's location to refuse an older
one too. A *revision* serves the current version again with other files (`revises` names the
`seq` it replaces): recorded only while that one is current, so of two racing revisions, or a
revision racing a newer version, one is refused. `current_manifest_version` keeps Prism's
meaning: -1 never published, 0 live, >0 the merged version (its `upper`).

Publication records are kept as history: a record is superseded when the next one is recorded,
and garbage collection keeps every file a record names until its successor has been current
for the safety delay (`retained`), so a reader holding an older version keeps working.
Everything here is pure; both backends call it inside their transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from resources.errors import LeaseholdError
from resources.ledger.merge import MergeRange
from resources.ledger.model import RegisteredObject, TablePartition

MAX_UNRECORDED_AGE_MS = 10 * 60 * 1000
"""How old a version's manifests may be when the ledger records it (see `written_at_ms`)."""

PublicationKind = Literal["live", "merged"]
LIVE: PublicationKind = "live"
MERGED: PublicationKind = "merged"


@dataclass(frozen=True)
class Publication:
    """One published manifest version of a table partition."""

    table: str
    dt: str
    seq: int
    """1, 2, ... per table partition, assigned by `Ledger.record_publication` (0 before)."""
    switched: bool
    """True: the manifest lists merged objects; False: live small objects."""
    upper: int
    """The ids the manifest covers are `1..upper` (live: listed one by one; switched: through
    the merge ranges up to `upper`)."""
    location: str
    """The version's directory URL (`<table>/_manifests/dt=<dt>/<kind>-<upper>-<token>/`): it
    holds `manifest.json` (Redshift Spectrum) and `symlink/manifest` (Hive symlink text); the
    catalog partition points at its `symlink/` directory."""
    files: int
    rows: int
    bytes: int
    published_at_ms: int
    """When the ledger recorded it (set by `record_publication`): the moment it became current
    and its predecessor superseded."""
    written_at_ms: int = 0
    """When the publisher began writing its manifests (0: not said). `record_publication`
    refuses a version written more than `MAX_UNRECORDED_AGE_MS` ago, and garbage collection
    keeps an unrecorded version at least twice that long: a publisher paused between writing
    and recording can never make current a version whose manifests were collected."""
    revises: int = 0
    """The `seq` of the publication this one revises (0: none, a new version): the same
    version `(switched, upper)` served again with other files — a key that another date's
    record took (`dedupe.scope: table`), rows retracted. Recorded only while that one is
    still the partition's current publication (`check_publication`)."""

    @property
    def version(self) -> tuple[bool, int]:
        return (self.switched, self.upper)

    @property
    def manifest_version(self) -> int:
        """Prism's `current_manifest_version` once this is current: 0 live, `upper` merged."""
        return self.upper if self.switched else 0


class StalePublicationError(LeaseholdError):
    """The partition already has this version or a newer one: nothing was recorded (the
    attempt's manifest files are orphans for garbage collection)."""

    def __init__(
        self, publication: Publication, current: tuple[bool, int], why: str | None = None
    ) -> None:
        super().__init__(
            f"{publication.table} dt={publication.dt}: version {publication.version} "
            + (why or f"is not newer than the current {current}")
        )
        self.publication = publication
        self.current = current


def current_version(tp: TablePartition) -> tuple[bool, int] | None:
    """The partition's current publication version; None if never published."""
    if tp.current_manifest_version < 0:
        return None
    return (tp.switched, tp.published_upper)


def publication_due(tp: TablePartition) -> PublicationKind | None:
    """What the partition should be published as now, None if it is up to date.

    Switched: again as merged whenever the chain went past what is published (`current <
    desired`). Not switched: as merged (the switch) once it is closed and the chain covers
    every live id — never for a partition that was never merged; else as live whenever live
    ids (`live_upper`) were committed past what is published.
    """
    last = live_upper(tp)
    if tp.switched:
        return MERGED if tp.merged_upper > tp.published_upper else None
    if switch_ready(tp):
        return MERGED
    if last > 0 and (tp.current_manifest_version < 0 or last > tp.published_upper):
        return LIVE
    return None


def live_upper(tp: TablePartition) -> int:
    """The last id a live publication may cover: every committed id while the partition is
    open, only its live ids (`1..last_live_object_id`) once it is closed. Delayed objects
    become visible when merged: a live manifest naming them would be followed by a switch to a
    chain that need not reach them yet (it only has to cover the live ids), and readers would
    see their records vanish until the next merge."""
    last = tp.next_object_id - 1
    return last if tp.last_live_object_id is None else min(last, tp.last_live_object_id)


def switch_ready(tp: TablePartition) -> bool:
    """Closed, merged at least once, and every live id (`1..last_live_object_id`) covered."""
    return (
        tp.last_live_object_id is not None
        and tp.merged_upper > 0
        and tp.merged_upper >= tp.last_live_object_id
    )


def check_publication(
    tp: TablePartition | None, publication: Publication, now_ms: int | None = None
) -> None:
    """Raise `StalePublicationError` unless `publication` may become the partition's current
    one: newer than the current version (a revision: of the current publication, at its
    version; else `StalePublicationError`), covering only what the ledger holds (a live one:
    `live_upper`, never a delayed id; a merged one: ids the chain covers), and (given `now_ms`,
    the ledger's clock) written less than `MAX_UNRECORDED_AGE_MS` ago."""
    if tp is None:
        raise LeaseholdError(
            f"{publication.table} dt={publication.dt}: no such table partition to publish"
        )
    current = current_version(tp)
    if publication.revises:
        _check_revision(tp, publication, current)
    elif current is not None and publication.version <= current:
        raise StalePublicationError(publication, current)
    age_ms = (
        0 if now_ms is None or not publication.written_at_ms else now_ms - publication.written_at_ms
    )
    if age_ms > MAX_UNRECORDED_AGE_MS:
        raise StalePublicationError(
            publication,
            current or (False, 0),
            f"was written {age_ms / 1000:.0f} s ago, more than "
            f"{MAX_UNRECORDED_AGE_MS / 1000:.0f} s: garbage collection may have taken its "
            "manifests",
        )
    if publication.switched:
        if publication.upper == tp.merged_upper > 0:
            return
        # The chain a merged manifest lists is the current one only while its end is the
        # partition's `merged_upper` (every merge commit raises it): a manifest of an older
        # chain may name a rewritten range's superseded object, which garbage collection
        # deletes once it is older than the safety delay. Refused as stale: the publisher
        # reads the chain again at its next attempt.
        if 0 < publication.upper < tp.merged_upper:
            raise StalePublicationError(
                publication,
                current or (False, 0),
                f"lists an older chain: a merge moved its end to {tp.merged_upper}",
            )
        raise LeaseholdError(
            f"{publication.table} dt={publication.dt}: a merged publication up to "
            f"{publication.upper} is outside the chain, which ends at {tp.merged_upper}"
        )
    limit = live_upper(tp)
    if publication.upper < 1 or publication.upper > limit:
        raise LeaseholdError(
            f"{publication.table} dt={publication.dt}: a {kind_of(publication)} publication up "
            f"to {publication.upper} is outside 1..{limit}"
        )


def _check_revision(
    tp: TablePartition, publication: Publication, current: tuple[bool, int] | None
) -> None:
    """A revision is of the current publication, at its version."""
    if tp.publication_seq != publication.revises:
        raise StalePublicationError(
            publication,
            current or (False, 0),
            f"revises publication {publication.revises}, but the current one is "
            f"{tp.publication_seq}",
        )
    if publication.version != current:
        raise LeaseholdError(
            f"{publication.table} dt={publication.dt}: a revision of publication "
            f"{publication.revises} at version {publication.version}, not its {current}"
        )


def kind_of(publication: Publication) -> PublicationKind:
    return MERGED if publication.switched else LIVE


def retained(
    publications: Sequence[Publication], now_ms: int, safety_delay_ms: int
) -> list[Publication]:
    """The records whose files must be kept: the current one (last by seq) and every one whose
    successor became current less than `safety_delay_ms` ago (a reader may still hold it)."""
    ordered = sorted(publications, key=lambda p: p.seq)
    kept = [
        p
        for p, successor in zip(ordered, ordered[1:], strict=False)
        if successor.published_at_ms > now_ms - safety_delay_ms
    ]
    return kept + ordered[-1:]


@dataclass(frozen=True)
class DataFile:
    """One file a manifest lists."""

    url: str
    content_length: int
    row_count: int


def live_files(objects: Sequence[RegisteredObject], upper: int) -> list[DataFile]:
    """A live manifest's files: the small objects with ids `1..upper`, by id."""
    return [
        DataFile(o.url, o.content_length, o.row_count)
        for o in sorted(objects, key=lambda o: o.object_id)
        if o.object_id <= upper
    ]


def merged_files(ranges: Sequence[MergeRange]) -> list[DataFile]:
    """A merged manifest's files: every range's merged object, by upper (the sentinel has
    none)."""
    return [
        DataFile(r.url, r.content_length, r.row_count)
        for r in sorted(ranges, key=lambda r: r.upper)
        if not r.is_sentinel and r.url is not None
    ]


def current_data_files(
    objects: Sequence[RegisteredObject], ranges: Sequence[MergeRange]
) -> list[DataFile]:
    """All of a table partition's committed rows, each exactly once, from the files that are
    never garbage-collected while the ledger holds them: the chain's merged objects and the
    small objects above its end. (Small objects a published merge covers may be deleted.)"""
    chain_upper = max((r.upper for r in ranges), default=0)
    return merged_files(ranges) + [
        DataFile(o.url, o.content_length, o.row_count)
        for o in sorted(objects, key=lambda o: o.object_id)
        if o.object_id > chain_upper
    ]
