"""What a publication run holds per table partition: its plan (`PublicationPlan`), the switch
waiting for it (`PendingSwitch`) and its outcome (`PublicationOutcome`, as runs, assets and
checks report it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.catalog.target import PartitionSwitch
from resources.ledger.model import TablePartition
from resources.ledger.publication import DataFile, Publication, PublicationKind
from resources.publication.pending_date import Span

PUBLISHED = "published"
UP_TO_DATE = "up_to_date"
CATALOG_REPAIRED = "catalog_repaired"
FAILED = "failed"


@dataclass(frozen=True)
class PublicationOutcome:
    """What publishing one partition did: the outcome, why, and the publication recorded."""

    dt: str
    outcome: str
    """PUBLISHED, UP_TO_DATE, CATALOG_REPAIRED or FAILED (retried by the next run)."""
    message: str
    publication: Publication | None
    """The publication now current: the one recorded (PUBLISHED), the one the table was
    switched back to (CATALOG_REPAIRED); None otherwise."""
    switched_now: bool
    """This publication switched the partition from live to merged objects."""
    location: str = ""
    """Where the target serves `publication` (`served_location`: a manifest version's
    `symlink/` directory, or an Iceberg table's root); empty without a publication."""
    dropped: int = 0
    """Rows committed for the ids it covers that it does not serve: records that lost to
    another record of their key under the stream's dedupe policy, or that a replacement took
    out."""
    retracted: int = 0
    """Of `dropped`, the rows replacements took out (`on_change: replace`)."""

    @property
    def ok(self) -> bool:
        return self.outcome != FAILED

    def metadata(self) -> dict[str, Any]:
        """What the published-table asset records per table partition."""
        p = self.publication
        return {
            "outcome": self.outcome,
            "message": self.message,
            "seq": p.seq if p else 0,
            "manifest_version": p.manifest_version if p else -1,
            "switched": p.switched if p else False,
            "switched_now": self.switched_now,
            "upper": p.upper if p else 0,
            "files": p.files if p else 0,
            "rows": p.rows if p else 0,
            "bytes": p.bytes if p else 0,
            "location": self.location if p else "",
            "dropped_by_key": self.dropped,
            "retracted_rows": self.retracted,
            "revises": p.revises if p else 0,
        }

    def describe(self) -> str:
        p = self.publication
        if p is None or self.outcome not in (PUBLISHED, CATALOG_REPAIRED):
            return f"dt={self.dt}: {self.outcome}" + (f": {self.message}" if self.message else "")
        kind = "merged" if p.switched else "live"
        switched = " (switched)" if self.switched_now else ""
        verb = "published" if self.outcome == PUBLISHED else "catalog repaired to"
        if p.revises:
            switched += f" (a revision of seq {p.revises}: keys taken by another date)"
        return (
            f"dt={self.dt}: {verb} seq {p.seq}, {kind} up to id {p.upper}{switched}: "
            f"{p.files} files, {p.rows} rows, {p.bytes} bytes"
        )


@dataclass(frozen=True)
class PublicationPlan:
    """A partition's due publication before its files are written: the ledger read it came
    from, its kind, the ids `1..upper` it covers in `files` (each covering its `spans`
    entry), and the version directory it will be written to."""

    tp: TablePartition
    kind: PublicationKind
    upper: int
    files: list[DataFile]
    spans: dict[str, Span]
    version_key: str
    written_at_ms: int
    revises: int = 0
    """The `seq` of the current publication this one serves again with other files (0: a new
    version; `Publication.revises`)."""


@dataclass(frozen=True)
class PendingSwitch:
    """A partition of this run waiting for the switch: its outcome once switched, and the
    switch to its publication."""

    outcome: PublicationOutcome
    switch: PartitionSwitch
