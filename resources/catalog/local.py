"""The local catalog: one JSON file under the data directory, the embedded default.

Readers take no lock: every write replaces the whole file with `os.replace` of a fully written
and fsynced temporary file beside it, so a reader sees the old catalog or the new one, never
half of one, and a crash mid-write leaves one of the two. Writers serialize on an exclusive
`fcntl` lock of a sibling lock file (not the catalog itself, which `os.replace` swaps under
them) and read-modify-write under it, so `publish_partition`'s seq check and its write are one
step across processes: a partition never moves to an older publication; and `ensure_table` and
`add_columns` grow the column list read under the same lock, so two processes adding columns
at once both land.

The file:
    {"format": 1, "tables": {NAME: {"columns": [{"name", "type"}], "location": URL,
     "partitions": {DT: {"location": URL, "seq": N, "updated_at": ISO-8601}}}}}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from resources.catalog.base import (
    Catalog,
    CatalogError,
    CatalogPartition,
    Column,
    TableDefinition,
    grown_columns,
)

FORMAT = 1

Data = dict[str, Any]


class LocalCatalog(Catalog):
    """The catalog as one JSON file beside the lake, written under a file lock: the default, for a
    single machine."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"LocalCatalog({str(self.path)!r})"

    # -- reading -----------------------------------------------------------------------------

    def _load(self) -> Data:
        """The catalog as it is on disk; a missing file is an empty catalog."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"format": FORMAT, "tables": {}}
        except OSError as exc:
            raise CatalogError(f"catalog file {self.path}: cannot read it: {exc}") from exc
        try:
            data: Data = json.loads(text)
        except ValueError as exc:
            raise CatalogError(f"catalog file {self.path} is corrupt (not JSON): {exc}") from exc
        problem = _shape_problem(data)
        if problem is not None:
            raise CatalogError(f"catalog file {self.path} is corrupt: {problem}")
        return data

    def _table(self, data: Data, name: str) -> Data:
        entry: Data | None = data["tables"].get(name)
        if entry is None:
            raise CatalogError(f"catalog file {self.path} has no table {name!r}")
        return entry

    def table(self, name: str) -> TableDefinition | None:
        entry = self._load()["tables"].get(name)
        return None if entry is None else _definition(name, entry)

    def tables(self) -> list[str]:
        return sorted(self._load()["tables"])

    def partition(self, table: str, dt: str) -> CatalogPartition | None:
        entry = self._table(self._load(), table)["partitions"].get(dt)
        return None if entry is None else _partition(table, dt, entry)

    def partitions(self, table: str) -> list[CatalogPartition]:
        parts = self._table(self._load(), table)["partitions"]
        return [_partition(table, dt, parts[dt]) for dt in sorted(parts)]

    # -- writing -----------------------------------------------------------------------------

    def ensure_table(self, table: TableDefinition) -> None:
        def change(data: Data) -> bool:
            current = data["tables"].get(table.name)
            if current is None:
                data["tables"][table.name] = {
                    "columns": _column_entries(table.columns),
                    "location": table.location,
                    "partitions": {},
                }
                return True
            grown = grown_columns(table.name, _columns(current), table.columns)
            wanted = {"columns": _column_entries(grown), "location": table.location}
            if all(current[k] == v for k, v in wanted.items()):
                return False
            current.update(wanted)
            return True

        self._mutate(change)

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        added: list[Column] = []

        def change(data: Data) -> bool:
            entry = self._table(data, table)
            existing = _columns(entry)
            grown = grown_columns(table, existing, columns)
            added[:] = grown[len(existing) :]
            entry["columns"] = _column_entries(grown)
            return bool(added)

        self._mutate(change)
        return added

    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        def change(data: Data) -> bool:
            parts = self._table(data, table)["partitions"]
            current = parts.get(dt)
            if current is not None and current["seq"] >= seq:
                return False
            parts[dt] = {"location": location, "seq": seq, "updated_at": _now_iso()}
            return True

        return self._mutate(change)

    def _mutate(self, change: Callable[[Data], bool]) -> bool:
        """Read, `change` (True if it changed anything) and write back, all under the lock: a
        write decided on what another process has since replaced is impossible."""
        with self._locked():
            data = self._load()
            changed = change(data)
            if changed:
                self._write(data)
            return changed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CatalogError(f"catalog file {self.path}: cannot open its lock: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, data: Data) -> None:
        """The whole catalog to a temporary file beside the catalog, synced, then renamed over
        it; the directory is synced too so that the rename itself survives a crash."""
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _columns(entry: Data) -> tuple[Column, ...]:
    return tuple(Column(c["name"], c["type"]) for c in entry["columns"])


def _column_entries(columns: Sequence[Column]) -> list[Data]:
    return [{"name": c.name, "type": c.type} for c in columns]


def _definition(name: str, entry: Data) -> TableDefinition:
    return TableDefinition(name=name, columns=_columns(entry), location=entry["location"])


def _partition(table: str, dt: str, entry: Data) -> CatalogPartition:
    return CatalogPartition(table=table, dt=dt, location=entry["location"], seq=entry["seq"])


def _shape_problem(data: Any) -> str | None:
    """What makes `data` not a catalog this code wrote, or None: checked whole on every read so
    that a damaged file fails here, naming itself, instead of as a KeyError somewhere later."""
    if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
        return "no 'tables' object"
    if data.get("format") != FORMAT:
        return f"format {data.get('format')!r}, expected {FORMAT}"
    for name, entry in data["tables"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("location"), str):
            return f"table {name!r} has no location"
        columns = entry.get("columns")
        if not isinstance(columns, list) or not all(
            isinstance(c, dict)
            and isinstance(c.get("name"), str)
            and isinstance(c.get("type"), str)
            for c in columns
        ):
            return f"table {name!r} has malformed columns"
        parts = entry.get("partitions")
        if not isinstance(parts, dict):
            return f"table {name!r} has no partitions object"
        for dt, part in parts.items():
            if (
                not isinstance(part, dict)
                or not isinstance(part.get("location"), str)
                or not isinstance(part.get("seq"), int)
                or isinstance(part.get("seq"), bool)
            ):
                return f"partition {dt!r} of table {name!r} is malformed"
    return None
