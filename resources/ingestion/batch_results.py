"""What the reader hands the runner: the objects its tasks wrote for each work unit and what they
could not read (`SourceBatchResult`, `StagedFile`, `ChunkRead`), and the shapes of the callables
the runner is given to read (`ReadBatch`, `ReadLarge`). Shared by the reader and the runner, so
neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from resources.ingestion.work_units import UnitObject
from resources.ledger.provenance import Sources


@dataclass(frozen=True)
class StagedFile:
    """An object a Spark task wrote for a unit, at its final URL, to be committed under `dt`
    (a quarantine object: the day it was read)."""

    dt: str
    url: str
    row_count: int
    content_length: int
    schema_version: int = 1
    sources: Sources = ()
    """A table object's source objects, in row order (`resources.ledger.provenance`)."""


@dataclass
class SourceBatchResult:
    """What the reader produced for one work unit (the objects it read of it)."""

    rows_read: int = 0
    rows_quarantined: int = 0
    table_files: list[StagedFile] = field(default_factory=list)
    quarantine_files: list[StagedFile] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Objects that could not be read at all, and why; the others were read."""
    unreadable: str | None = None
    """Set when nothing of the unit could be read: why."""
    schema_version: int = 1
    """The stream's schema version its table objects were written with."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this read added to the schema (`schema_evolution: add`), by name."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields outside the schema left out of the table (`schema_evolution: ignore`): records
    holding each, by name."""


ReadBatch = Callable[[dict[str, list[UnitObject]], str], dict[str, SourceBatchResult]]
"""(unit key -> its objects to read, in order; attempt id) -> a result per unit, its objects
written (`task_reader.TaskReader.read`)."""
ReadLarge = Callable[[str, UnitObject, dict[str, int], str], list["ChunkRead"]]
"""(unit key, its one object, where its commits reached: offset and line; attempt id) -> the
chunks read from there, in order (`task_reader.TaskReader.read_large`)."""


@dataclass
class ChunkRead:
    """One chunk of a large object, as read: what to commit, and where the next one starts."""

    result: SourceBatchResult
    offset: int
    line: int
    last: bool
