"""What a publication under a dedupe policy serves: per ledger file, the file itself or a copy
without the rows that lost (`ServedFile`), kept beside the publication's manifests as
`dedupe.json`, next to its key index `keys.arrow` (`resources/publication/deduped_files.py`).

Readers only read what a manifest names, so a copy written for a publication is read only once
the ledger records that publication; the files of the next publication start from this one's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from resources.dedupe.key_index import KeyIndex
from resources.errors import LeaseholdError

STATE_NAME = "dedupe.json"
INDEX_NAME = "keys.arrow"
"""The key index a publication writes beside its state (an Arrow IPC file: `KeyIndex.to_bytes`)."""
NOTHING = ""
"""A `ServedFile.url` for a ledger file of which nothing is served."""
LEGACY_INDEX_NAME = "keys.parquet"
"""The key index of a state written before `ServedState.index` was kept (a Parquet file)."""
DROPPED_KEY = b"leasehold.dedupe.dropped"
"""A merged object's Parquet metadata: the rows of its range's small objects it does not hold
(records that lost to another of their key), so its rows + these = what the ledger committed."""


class ServedStateError(LeaseholdError):
    """A `dedupe.json` that cannot be read: the publication's files are not known."""


@dataclass(frozen=True)
class ServedFile:
    """One ledger file of a publication and what is served for it."""

    source: str
    """The ledger's URL: a small object (ids `(lower, upper]` = its id) or a merged object."""
    url: str
    """What the manifest names: `source`, or a copy without the rows that lost; `NOTHING`
    when every row of it lost (no file is served for it: an engine skips a file of no rows,
    and a reader of the manifest need not open one)."""
    rows: int
    bytes: int
    lower: int
    upper: int

    @property
    def copied(self) -> bool:
        return self.url not in (self.source, NOTHING)

    @property
    def served(self) -> bool:
        """A file is served for it (not `NOTHING`)."""
        return self.url != NOTHING


@dataclass(frozen=True)
class ServedState:
    """A publication's files under the policy: what it serves and the rows it leaves out."""

    upper: int
    """The ids the publication and its key index cover: `1..upper`."""
    files: tuple[ServedFile, ...]
    committed_rows: int
    """The rows the ledger committed for the files (before the policy)."""
    index: str = INDEX_NAME
    """The name of its key index beside it (`LEGACY_INDEX_NAME` for a state that does not say:
    one written before the index was an Arrow file)."""
    retracted: str = ""
    """The name of the keys replacements retracted, beside it (`retracted_keys`); empty for
    none."""
    retracted_rows: int = 0
    """Of `dropped_rows`, the rows replacements took out (their object was rewritten)."""

    @property
    def served_rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def dropped_rows(self) -> int:
        """Rows committed but not served: the records that lost to another of their key."""
        return self.committed_rows - self.served_rows

    def by_source(self) -> dict[str, ServedFile]:
        return {f.source: f for f in self.files}

    def to_json(self) -> bytes:
        doc = {
            "upper": self.upper,
            "committed_rows": self.committed_rows,
            "index": self.index,
            "files": [asdict(f) for f in self.files],
        }
        if self.retracted:
            doc["retracted"] = self.retracted
            doc["retracted_rows"] = self.retracted_rows
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ServedState:
        """The state `to_json` wrote; raises `ServedStateError` naming `where` otherwise."""
        try:
            doc = json.loads(data)
            files = tuple(ServedFile(**f) for f in doc["files"])
            index = str(doc.get("index", LEGACY_INDEX_NAME))
            if index not in (INDEX_NAME, LEGACY_INDEX_NAME):
                raise ValueError(f"an index named {index!r}")
            retracted, taken_out = str(doc.get("retracted", "")), int(doc.get("retracted_rows", 0))
            committed = int(doc["committed_rows"])
            return cls(int(doc["upper"]), files, committed, index, retracted, taken_out)
        except (ValueError, KeyError, TypeError) as exc:
            raise ServedStateError(f"{where}: not a dedupe state: {exc}") from exc


def dropped_rows(metadata: Any) -> int:
    """`DROPPED_KEY` of a Parquet file's metadata (`pq.FileMetaData`); 0 without it."""
    value = (metadata.metadata or {}).get(DROPPED_KEY)
    return int(value) if value else 0


@dataclass(frozen=True)
class ServedRange:
    """A merge under `first` of a range whose leading small objects the date's current
    publication covers: its inputs start with what that publication serves for them (each
    key's first record already), then the range's small objects committed since."""

    served_rows: int
    """Rows of the leading inputs."""
    left_out: int
    """Committed rows of the covered objects that the publication does not serve."""
    index: KeyIndex | None
    """The publication's key index: a row of the later inputs whose key it holds lost to an
    earlier record. None when there are no later inputs."""
