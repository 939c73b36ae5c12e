"""What the source reader hands the runner: the files it staged for each work unit and what it
could not read (`SourceBatchResult`, `StagedFile`), and the shapes of the callables the runner
is given to fetch, read and publish. Shared by the reader, the quarantine and table writers and
the runner, so none of them imports the runner."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StagedFile:
    """A local file written by the reader, to be published under `dt`."""

    dt: str
    local_path: Path
    row_count: int
    content_length: int
    schema_version: int = 1


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


ReadBatch = Callable[..., Future[dict[str, SourceBatchResult]]]
"""(source key -> local file, staging dir, attempt id, source key -> unit key[, source key ->
quarantine line offset]) -> per unit results, once staged. It returns when the batch is read;
the staged files may still be being written."""
Fetch = Callable[[str, Path], Path]
"""(source key, scratch dir) -> a local path holding the source object's bytes."""
Publish = Callable[[Path, str], str]
"""(local file, object key under the table root) -> its URL; moves the file."""
