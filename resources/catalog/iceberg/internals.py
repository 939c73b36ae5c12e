"""Every use of pyiceberg's private API, in one place. Written against pyiceberg 0.12.0
(pyproject pins `>=0.12,<0.13`); `tests/catalog/test_iceberg_target.py`,
`test_iceberg_metadata.py` and `test_iceberg_internals.py` fail loudly when the behaviour relied
on here changes.

Relied on:
- `_OverwriteFiles` (what `UpdateSnapshot.overwrite()` returns) keeps, in every later snapshot,
  a manifest that holds only DELETED entries (its `_existing_manifests` carries any manifest
  with no live entry to delete). `LeaseholdOverwrite._process_manifests` drops such a manifest
  once it was written by an earlier snapshot, as Java's `MergingSnapshotProducer` does (the
  snapshot that deleted the files still lists it: the deletions stay in its history), and then
  merges small manifests with `_ManifestMergeManager` under the table's
  `commit.manifest.min-count-to-merge` / `commit.manifest.target-size-bytes`, as a merge append
  does: the manifest list of a table switched 10,000 times stays as short as of one switched
  100 times. `commit.manifest-merge.enabled` is on unless the table says false (pyiceberg's
  default is off, which would leave one manifest per switch that still holds a live file).
  The manifests a merge replaced (the overwrite's rewritten and delete manifests) were
  written for nothing: `_written_manifests` minus what the snapshot lists are deleted once it
  landed (`LeaseholdOverwrite.delete_unlisted`).
- A producer staged with `Transaction._apply(*producer._commit())` is not registered for
  pyiceberg's own commit retry (`Transaction.commit_transaction` replays registered producers
  against the new head but keeps the other staged updates as they were: leasehold's per-date
  `seq` properties would be written as decided on the old head). Leasehold retries itself,
  re-planning everything on the new head; so the manifests of a commit that failed are deleted
  here (`_clean_all_uncommitted`), as pyiceberg would. pyiceberg's SQL and Glue catalogs apply
  the updates to the table as it is at commit time and raise `ValueError` (before writing
  anything) for a `RemoveSnapshotsUpdate` naming a snapshot already gone.
- `ExpireSnapshots(transaction)` stages its `RemoveSnapshotsUpdate` in a transaction that is
  not autocommitting: expiry lands in the same commit as the switch. It removes snapshots from
  the metadata only: no manifest, manifest list or data file is deleted.
- `update_table_metadata` (what `Transaction.table_metadata` and the SQL and Glue catalogs'
  `_update_and_stage_table` call) ends with `model_copy(deep=True)`: a deep copy of every
  retained snapshot (~100 ms at 500 snapshots here), and `Transaction.table_metadata` runs it
  on EVERY read, about twenty per commit. Each `_apply_table_update` step already returns a
  new frozen `TableMetadata` whose changed lists and dicts are new objects (`model_copy` with
  `update=`), and nothing in pyiceberg or leasehold mutates a metadata's containers in place,
  so `staged_metadata` is the same computation without the copy (the result shares the
  unchanged snapshots with the base: immutable values). `LeaseholdTransaction` computes it
  once per staged state (the table's metadata and the `_updates` tuple: `_stage` replaces
  the tuple) and `ShallowStaging` is the catalogs' commit with it
  (`LeaseholdSqlCatalog`, `LeaseholdGlueCatalog`). `tests/catalog/test_iceberg_internals.py`
  checks that it equals pyiceberg's own result.
- A metadata file is `TableMetadata.model_dump_json()` (`ToOutputFile.table_metadata`), which
  serialises every retained snapshot each time; `ShallowStaging._write_metadata` writes the
  same JSON value with the unchanged snapshots' text reused (`SnapshotJson`), and keeps what
  it wrote in `ParsedMetadata`.
- `pyiceberg.io.pyarrow._check_pyarrow_schema_compatible` checks a data file's schema against
  the table's, as `parquet_file_to_data_file` does.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyiceberg
from pyiceberg.catalog import ICEBERG, METADATA_LOCATION, TABLE_TYPE, Catalog, MetastoreCatalog
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor
from pyiceberg.table import StagedTable, Table, TableProperties, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.table.update.snapshot import (
    ExpireSnapshots,
    _ManifestMergeManager,
    _OverwriteFiles,
)
from pyiceberg.typedef import Identifier
from pyiceberg.utils.config import Config
from pyiceberg.utils.datetime import datetime_to_millis
from pyiceberg.utils.properties import property_as_bool, property_as_int

WRITTEN_AGAINST = "0.12."
"""The pyiceberg release line this module was written against."""

INSTALLED = pyiceberg.__version__

log = logging.getLogger(__name__)


class LeaseholdOverwrite(_OverwriteFiles):
    """An overwrite that drops earlier delete-only manifests and merges small ones."""

    _listed: set[str]
    """The manifests the snapshot lists (set by `_process_manifests`)."""

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        live = [m for m in manifests if not self._delete_only_from_earlier(m)]
        props = self._transaction.table_metadata.properties
        merger: _ManifestMergeManager[Any] = _ManifestMergeManager(
            target_size_bytes=_int(props, TableProperties.MANIFEST_TARGET_SIZE_BYTES),
            min_count_to_merge=_int(props, TableProperties.MANIFEST_MIN_MERGE_COUNT),
            # pyiceberg's default is off; Iceberg's (Java) is on, and so is leasehold's: a
            # table created before the property was set merges too, unless it says false.
            merge_enabled=property_as_bool(props, TableProperties.MANIFEST_MERGE_ENABLED, True),
            snapshot_producer=self,
        )
        merged = merger.merge_manifests(live)
        self._listed = {m.manifest_path for m in merged}
        return merged

    @property
    def listed(self) -> frozenset[str] | None:
        """The manifests the snapshot's manifest list names; None before `_commit` wrote it."""
        found = getattr(self, "_listed", None)
        return None if found is None else frozenset(found)

    def delete_unlisted(self) -> None:
        """Delete the manifests this producer wrote that its snapshot does not list (the
        merge replaced them): written for this commit only, no snapshot ever named them.
        A failure is logged: the commit landed."""
        listed = self.listed
        if listed is None:
            return
        for path in self._written_manifests:
            if path not in listed:
                try:
                    self._io.delete(path)
                except OSError as exc:
                    log.warning("unlisted manifest %s not deleted: %s", path, exc)

    def _delete_only_from_earlier(self, manifest: ManifestFile) -> bool:
        return (
            manifest.added_snapshot_id != self._snapshot_id
            and not manifest.has_added_files()
            and not manifest.has_existing_files()
        )


def _int(props: dict[str, str], key: str) -> int:
    default = getattr(TableProperties, _DEFAULTS[key])
    value = property_as_int(props, key, default)
    assert value is not None
    return value


_DEFAULTS = {
    TableProperties.MANIFEST_TARGET_SIZE_BYTES: "MANIFEST_TARGET_SIZE_BYTES_DEFAULT",
    TableProperties.MANIFEST_MIN_MERGE_COUNT: "MANIFEST_MIN_MERGE_COUNT_DEFAULT",
}


def staged_metadata(
    base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str | None = None
) -> TableMetadata:
    """`update_table_metadata(base, updates, metadata_location=...)` without the final deep
    copy: `base` with `updates` applied (the metadata log extended when `metadata_location`,
    the base's own, is given). Raises what pyiceberg raises for an update that does not apply
    (`ValueError`, `ValidationError`)."""
    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == new.last_updated_ms:
            now = datetime_to_millis(datetime.now().astimezone())
            new = new.model_copy(update={"last_updated_ms": now})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


class LeaseholdTransaction(Transaction):
    """A transaction whose staged metadata is computed once per staged state, not per read."""

    _staged: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        staged = self._staged
        if staged is None or staged[0] is not base or staged[1] is not updates:
            staged = (base, updates, staged_metadata(base, updates))
            self._staged = staged
        return staged[2]


class ParsedMetadata:
    """The last few metadata files read or written by this process, parsed, by location.

    A metadata file is never rewritten: each commit writes a new one under a new name (its
    version and a UUID) and points the catalog at it, so what a location held once it holds
    for good. The catalogs below read the catalog's pointer as pyiceberg does and parse the
    file only when this does not hold it: a publisher that loads the table it just committed
    parses nothing (pyiceberg parses the whole file, every retained snapshot, on every load)."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._held: OrderedDict[str, TableMetadata] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str) -> TableMetadata | None:
        with self._lock:
            found = self._held.get(location)
            if found is not None:
                self._held.move_to_end(location)
            return found

    def put(self, location: str, metadata: TableMetadata) -> None:
        with self._lock:
            self._held[location] = metadata
            self._held.move_to_end(location)
            while len(self._held) > self._size:
                self._held.popitem(last=False)


PARSED = ParsedMetadata()


class SnapshotJson:
    """The JSON text of a table's snapshots, kept from one metadata file this process writes
    to the next.

    pyiceberg serialises every retained snapshot anew for each metadata file (a model
    serializer in Python per snapshot summary: ~8 ms at 500 snapshots, half the growth of a
    switch's cost with the history). Staged without a deep copy (`staged_metadata`), the next
    metadata holds the same `Snapshot` objects, all but the one added and any an expiry
    rewrote, so their text is reused: kept by object identity, each entry holding its object
    (an id is never reused while held), for the snapshots of the last metadata written per
    table location."""

    def __init__(self, tables: int = 16) -> None:
        self._tables = tables
        self._held: OrderedDict[str, dict[int, tuple[Snapshot, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def metadata_json(self, metadata: TableMetadata, *, exclude_none: bool) -> str:
        """`metadata.model_dump_json(exclude_none=exclude_none)`, the same JSON value (the
        `snapshots` member last)."""
        with self._lock:
            held = self._held.pop(metadata.location, {})
            kept: dict[int, tuple[Snapshot, str]] = {}
            for snapshot in metadata.snapshots:
                entry = held.get(id(snapshot))
                if entry is None or entry[0] is not snapshot:
                    entry = (snapshot, snapshot.model_dump_json(exclude_none=exclude_none))
                kept[id(snapshot)] = entry
            self._held[metadata.location] = kept
            while len(self._held) > self._tables:
                self._held.popitem(last=False)
            parts = [text for _, text in kept.values()]
        rest = metadata.model_dump_json(exclude_none=exclude_none, exclude={"snapshots"})
        assert rest.endswith("}") and rest != "{}"
        return f'{rest[:-1]},"snapshots":[{",".join(parts)}]}}'


SNAPSHOT_JSON = SnapshotJson()


class ShallowStaging(MetastoreCatalog):
    """A metastore catalog (SQL, Glue) whose commit stages the new metadata with
    `staged_metadata` (pyiceberg's own `_update_and_stage_table` for a table being created)."""

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        if current_table is None:
            return super()._update_and_stage_table(None, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        location = current_table.metadata_location
        updated = staged_metadata(current_table.metadata, updates, location)
        provider = load_location_provider(updated.location, updated.properties)
        new_location = provider.new_table_metadata_file_location(
            self._parse_metadata_version(location) + 1
        )
        return StagedTable(
            identifier=table_identifier,
            metadata=updated,
            metadata_location=new_location,
            io=self._load_file_io(properties=updated.properties, location=new_location),
            catalog=self,
        )

    @staticmethod
    def _write_metadata(metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
        # pyiceberg's `ToOutputFile.table_metadata`, the snapshots' JSON reused (`SnapshotJson`)
        exclude_none = not Config().get_bool("legacy-current-snapshot-id")
        text = SNAPSHOT_JSON.metadata_json(metadata, exclude_none=bool(exclude_none))
        data = Compressor.get_compressor(metadata_path).bytes_compressor()(text.encode("utf-8"))
        with io.new_output(metadata_path).create(overwrite=False) as out:
            out.write(data)
        PARSED.put(metadata_path, metadata)

    def _table_at(self, identifier: Identifier, location: str) -> Table | None:
        """The table at `location` from `PARSED`, None when not held there."""
        metadata = PARSED.get(location)
        if metadata is None:
            return None
        io = self._load_file_io(metadata.properties, location)
        return Table(identifier, metadata=metadata, metadata_location=location, io=io, catalog=self)


class LeaseholdSqlCatalog(ShallowStaging, SqlCatalog):
    """pyiceberg's SQL catalog, committing through `ShallowStaging`, loading through
    `ParsedMetadata`."""

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location, namespace = orm_table.metadata_location, orm_table.table_namespace
        if location and namespace and orm_table.table_name:
            identifier = (*Catalog.identifier_to_tuple(namespace), orm_table.table_name)
            if (held := self._table_at(identifier, location)) is not None:
                return held
        table = super()._convert_orm_to_iceberg(orm_table)
        PARSED.put(table.metadata_location, table.metadata)
        return table


class LeaseholdGlueCatalog(ShallowStaging, GlueCatalog):
    """pyiceberg's Glue catalog, committing through `ShallowStaging`, loading through
    `ParsedMetadata`."""

    def _convert_glue_to_iceberg(self, glue_table: Any) -> Table:
        parameters = glue_table.get("Parameters") or {}
        location = parameters.get(METADATA_LOCATION)
        database, name = glue_table.get("DatabaseName"), glue_table.get("Name")
        is_iceberg = str(parameters.get(TABLE_TYPE, "")).lower() == ICEBERG
        if location and database and name and is_iceberg:
            if (held := self._table_at((database, name), location)) is not None:
                return held
        table = super()._convert_glue_to_iceberg(glue_table)
        PARSED.put(table.metadata_location, table.metadata)
        return table


def transaction(table: Table) -> Transaction:
    """A transaction on `table` as loaded (`LeaseholdTransaction`)."""
    return LeaseholdTransaction(table)


def stage_overwrite(
    tx: Transaction,
    deleted: Iterable[DataFile],
    added: Iterable[DataFile],
    snapshot_properties: dict[str, str],
) -> LeaseholdOverwrite:
    """Stage in `tx` one snapshot that deletes `deleted` (entries of the current snapshot) and
    adds `added`, not registered for pyiceberg's commit retry. Returns the producer, for
    `commit`."""
    io = tx._table.io
    has_snapshot = tx.table_metadata.current_snapshot() is not None
    producer = LeaseholdOverwrite(
        operation=Operation.OVERWRITE if has_snapshot else Operation.APPEND,
        transaction=tx,
        io=io,
        snapshot_properties=snapshot_properties,
    )
    for f in deleted:
        producer.delete_data_file(f)
    for f in added:
        producer.append_data_file(f)
    tx._apply(*producer._commit())
    return producer


def stage_expiry(tx: Transaction, snapshot_ids: Iterable[int]) -> None:
    """Stage in `tx` the removal of `snapshot_ids` from the table's metadata."""
    ids = list(snapshot_ids)
    if ids:
        ExpireSnapshots(tx).by_ids(ids).commit()


def commit(tx: Transaction, producer: LeaseholdOverwrite) -> Table:
    """Commit `tx` once (no pyiceberg retry); returns the table as committed (the catalog's
    answer), after deleting the manifests written for it that it does not list. On
    `CommitFailedException` (another writer committed first),
    `ValidationException` or `ValueError` (the catalog could not apply an update to the table
    as it is now: a snapshot to remove is gone) the commit did not land: the manifests written
    for it are deleted and the error raised."""
    try:
        committed = tx.commit_transaction()
    except (CommitFailedException, ValidationException, ValueError):
        producer._clean_all_uncommitted()
        raise
    producer.delete_unlisted()
    return committed


def check_file_schema(schema: Schema, file_schema: pa.Schema, format_version: int) -> None:
    """Raises `ValueError` when a data file's schema does not fit the table's."""
    # pyiceberg types `format_version` as its Literal[1, 2, 3]; the table's own, passed through.
    _check_pyarrow_schema_compatible(schema, file_schema, format_version=format_version)  # type: ignore[arg-type]
