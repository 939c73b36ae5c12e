"""`leasehold table ls|files|read`: a published table seen the way an external engine sees it.

Everything here starts at the table's `PublicationTarget` (its stream's `table_format`, over the
catalog `LEASEHOLD_CATALOG` names: the local catalog file or Glue) and follows a partition's
location to its manifest version, as Athena or Spark would; nothing lists a prefix. So what
these commands show is what a user's query gets, and a disagreement with
`leasehold status` (the ledger's view) is itself worth seeing. The ledger is read for one thing
the catalog and the manifests do not say: which schema versions the rows of each partition's
published version were written with (`table ls`), from the ledger objects that version covers
(ids up to its `upper`) — one query of the table's objects, where reading every file's footer
would cost a request or two per file. A store that cannot be read leaves that column unknown,
said on stderr, and the rest as it was.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from resources.aggregation.rollup_table import rollup_table_name
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import MANIFESTS, PublicationTarget, PublishedPartition
from resources.cli.exit_status import EPILOG
from resources.cli.table_history import as_of_arg, iceberg_target, print_history, snapshot_for
from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.objects.factory import object_store_for
from resources.publication.manifest import read_spectrum, version_url_of
from resources.publication.reader import partition_files, read_partition
from resources.settings import DATA_DIR_ENV
from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings

DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

VERSION_DIR = re.compile(r"/(?:(?P<kind>live|merged)-|(?P<state>v))(?P<upper>\d+)-[0-9a-f]+/$")
"""A manifest version directory's URL (`resources.publication.manifest.new_version_key`), or a
rollup table's (`v<position>-<token>`: kind "state")."""


class CatalogNotFoundError(LeaseholdError):
    """The configured local catalog file does not exist: nothing was published there."""


def date_arg(value: str) -> str:
    """argparse type of a table partition's date: `YYYY-MM-DD` (a bad one is exit 2)."""
    try:
        if DATE.fullmatch(value):
            datetime.date.fromisoformat(value)
            return value
    except ValueError:
        pass  # reported below, the same way as a malformed one
    raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)")


def non_negative(value: str) -> int:
    """argparse type of a count (a bad one is exit 2)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count (0, 1, 2, ...)")
    return number


def local_catalog_path(settings: CatalogSettings, table_format: str) -> Path:
    """The local catalog file of `table_format`: the catalog file of `manifests` tables, the
    SQLite file of the Iceberg SQL catalog."""
    if table_format == MANIFESTS:
        return settings.local_path()
    return settings.iceberg_sqlite_path()


def catalog_location(settings: CatalogSettings, table_format: str = MANIFESTS) -> str:
    """Where the catalog is, for messages: the file and the variable that chose it, or the
    Glue database, region and endpoint, or the REST catalog's URI."""
    if settings.catalog == "local":
        path = local_catalog_path(settings, table_format).resolve()
        what = "local catalog" if table_format == MANIFESTS else "local Iceberg catalog"
        variable = (
            "LEASEHOLD_CATALOG_PATH"
            if table_format == MANIFESTS
            else "LEASEHOLD_ICEBERG_CATALOG_PATH"
        )
        if settings.catalog_path if table_format == MANIFESTS else settings.iceberg_catalog_path:
            return f"the {what} {path} ({variable})"
        if DATA_DIR_ENV in os.environ:
            return f"the {what} {path} ({DATA_DIR_ENV}; {variable} unset)"
        return (
            f"the {what} {path} (the default under the working directory: "
            f"{variable} and {DATA_DIR_ENV} unset)"
        )
    if settings.catalog == "rest":
        return f"the Iceberg REST catalog at {settings.iceberg_rest_uri}"
    where = settings.glue_endpoint_url or "AWS"
    account = f", catalog {settings.glue_catalog_id}" if settings.glue_catalog_id else ""
    database = settings.glue_database
    return f"the Glue database {database!r} in {settings.glue_region} at {where}{account}"


def open_reading_target(
    settings: CatalogSettings, table_format: str, lake: LakeSettings
) -> PublicationTarget:
    """The target of `table_format` over the configured catalog, for reading: a local catalog
    file must exist (an empty one in the wrong directory would answer "no such table" for the
    wrong reason). Raises `CatalogNotFoundError`, `CatalogConfigError`,
    `CatalogUnreachableError`."""
    from resources.catalog.opening import target_for

    if settings.catalog == "local" and not local_catalog_path(settings, table_format).exists():
        raise CatalogNotFoundError(
            f"no catalog: {catalog_location(settings, table_format)} does not exist; "
            "publication creates it (`leasehold run`)"
        )
    return target_for(
        settings, table_format, s3_endpoint_url=lake.s3_endpoint_url, s3_region=lake.region
    )


@dataclass(frozen=True)
class Published:
    """One served partition and what its manifest version lists."""

    partition: PublishedPartition
    kind: str | None
    """`live` or `merged`, from the version directory's name (None: not a name leasehold
    writes)."""
    upper: int | None
    urls: list[str]
    schema_versions: tuple[int, int] | None = None
    """The lowest and highest schema version of the rows this version serves
    (`with_schema_versions`); None: not known."""

    def as_json(self) -> dict[str, Any]:
        versions = self.schema_versions
        return {
            "dt": self.partition.dt,
            "seq": self.partition.seq,
            "kind": self.kind,
            "switched": self.kind == "merged",
            "upper": self.upper,
            "files": len(self.urls),
            "schema_versions": (
                None if versions is None else {"min": versions[0], "max": versions[1]}
            ),
            "location": self.partition.location,
        }

    def schema_text(self) -> str:
        """`v1`, `v1..v3`, or `?` when not known."""
        if self.schema_versions is None:
            return "?"
        low, high = self.schema_versions
        return f"v{low}" if low == high else f"v{low}..v{high}"


def with_schema_versions(
    rows: Sequence[Published], objects: Iterable[RegisteredObject]
) -> list[Published]:
    """Each row with the schema versions its rows were written with: the lowest and highest
    `schema_version` of its partition's ledger objects with ids up to the version's `upper` —
    exactly the objects a live version lists, and the ones a merged version's ranges merged
    (their files hold later columns only as nulls). A row stays unknown (None) when its
    location is not a name leasehold writes (no `upper`), when it is a rollup's state (its
    `upper` counts batches, not objects), or when the ledger has none of those objects."""
    versions: dict[str, list[tuple[int, int]]] = {}
    for o in objects:
        versions.setdefault(o.dt, []).append((o.object_id, o.schema_version))
    out = []
    for row in rows:
        served = [
            v
            for object_id, v in versions.get(row.partition.dt, [])
            if row.upper is not None and object_id <= row.upper
        ]
        known = row.kind in ("live", "merged") and bool(served)
        out.append(replace(row, schema_versions=(min(served), max(served)) if known else None))
    return out


class TableReader:
    """The tables of the streams file (each stream's, each rollup's) through their streams'
    `PublicationTarget`s, with the lake's S3 settings."""

    def __init__(self, settings: CatalogSettings, lake: LakeSettings) -> None:
        self.settings = settings
        self.lake = lake
        self.formats = table_formats(lake)
        """table -> the `table_format` it is published in."""
        self._targets: dict[str, PublicationTarget] = {}
        if settings.catalog == "local":
            used = sorted(set(self.formats.values())) or [MANIFESTS]
            if not any(local_catalog_path(settings, f).exists() for f in used):
                open_reading_target(settings, used[0], lake)  # says where it looked, first

    def where(self, table: str | None = None) -> str:
        """Where `table`'s catalog is (default: the first format the streams file uses)."""
        formats = sorted(set(self.formats.values())) or [MANIFESTS]
        table_format = self.formats.get(table or "", formats[0])
        return catalog_location(self.settings, table_format)

    def target(self, table: str) -> PublicationTarget:
        """The target serving `table`; a `LeaseholdError` naming the tables published when
        the table does not exist there (or no stream publishes it)."""
        table_format = self.formats.get(table)
        target = None if table_format is None else self._format_target(table_format)
        if target is None or target.table(table) is None:
            tables = [t for t, f in sorted(self.formats.items()) if self._format_target(f).table(t)]
            has = f"it has {', '.join(tables)}" if tables else "it has no tables yet"
            raise LeaseholdError(f"no table {table!r} in {self.where(table)} ({has})")
        return target

    def _format_target(self, table_format: str) -> PublicationTarget:
        if table_format not in self._targets:
            self._targets[table_format] = open_reading_target(
                self.settings, table_format, self.lake
            )
        return self._targets[table_format]

    def require_table(self, table: str) -> None:
        self.target(table)

    def partition(self, table: str, dt: str) -> PublishedPartition:
        target = self.target(table)
        partition = target.partition(table, dt)
        if partition is None:
            dates = [p.dt for p in target.partitions(table)]
            has = (
                f"published: {len(dates)} dates, {dates[0]} to {dates[-1]}"
                if dates
                else "no date is published yet"
            )
            raise LeaseholdError(f"{table} dt={dt} is not published in {self.where(table)} ({has})")
        return partition

    def published(self, partition: PublishedPartition) -> Published:
        """The files the partition serves, resolved as an engine of its format does."""
        urls = partition_files(
            self.target(partition.table),
            partition.table,
            partition.dt,
            s3_endpoint_url=self.lake.s3_endpoint_url,
            region=self.lake.region,
        )
        match = VERSION_DIR.search(partition.version_url)
        kind = (match["kind"] or "state") if match else None
        upper = int(match["upper"]) if match else None
        return Published(partition, kind, upper, urls)

    def ls(self, table: str) -> list[Published]:
        return [self.published(p) for p in self.target(table).partitions(table)]

    def files(self, table: str, dt: str) -> tuple[PublishedPartition, list[tuple[str, int | None]]]:
        """The partition's data files with their lengths: Iceberg's from the current
        snapshot's entries; Hive's from the symlink manifest, each length from the same
        version's Spectrum manifest (None if that does not list it: the catalog partition moved
        to a newer version between the two reads)."""
        partition = self.partition(table, dt)
        target = self.target(table)
        if target.table_format != MANIFESTS:
            files = iceberg_target(target).data_files(table, dt)
            return partition, [(f.url, f.size) for f in files]
        published = self.published(partition)
        version_url = version_url_of(published.partition.location)
        objects = object_store_for(
            version_url.rstrip("/"), endpoint_url=self.lake.s3_endpoint_url, region=self.lake.region
        )
        lengths = {e.url: e.content_length for e in read_spectrum(objects, version_url)}
        return published.partition, [(url, lengths.get(url)) for url in published.urls]

    def read(
        self, table: str, dt: str, limit: int | None, as_of: int | datetime.datetime | None = None
    ) -> pa.Table:
        """The date's rows as served now, or as the Iceberg snapshot `as_of` (an id or a
        moment) served them."""
        if as_of is not None:
            target = iceberg_target(self.target(table))
            snapshot = snapshot_for(target, table, as_of)
            rows = target.read(table, dt, snapshot.snapshot_id)
            return rows if limit is None else rows.slice(0, limit)
        self.partition(table, dt)  # an unknown table or date: one line saying where it looked
        return read_partition(
            self.target(table),
            table,
            dt,
            limit=limit,
            s3_endpoint_url=self.lake.s3_endpoint_url,
            region=self.lake.region,
        )


def _reader() -> TableReader:
    return TableReader(CatalogSettings.from_env(), LakeSettings.from_env())


def table_formats(lake: LakeSettings) -> dict[str, str]:
    """Every table the streams file publishes — each stream's (named after it) and each of its
    rollups' (`rollup_table_name`) — with the stream's `table_format`. Raises
    `StreamConfigError` (a bad or missing streams file)."""
    formats = {}
    for name, config in lake.streams().items():
        formats[name] = config.table_format
        for spec in config.rollups:
            formats[rollup_table_name(config, spec)] = config.table_format
    return formats


def ledger_schema_versions(table: str, rows: Sequence[Published]) -> list[Published]:
    """`rows` with their schema versions from the configured store, opened read-only (nothing
    is created). A store that cannot be read (none here, unreachable, refused) leaves them
    unknown and says why on stderr: the catalog's answer stands without it. A rollup's table
    has no ledger objects: the store is not opened for it."""
    if all(r.kind == "state" for r in rows):
        return list(rows)
    try:
        store = open_existing_store(settings_from_env())
        try:
            objects = store.ledger_objects(table)
        finally:
            store.close_store()
    except LeaseholdError as exc:
        why = " ".join(str(exc).split())
        print(f"leasehold: schema versions not shown: {why}", file=sys.stderr)
        return list(rows)
    return with_schema_versions(rows, objects)


def cmd_table_ls(args: argparse.Namespace) -> int:
    reader = _reader()
    rows = ledger_schema_versions(args.stream, reader.ls(args.stream))
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=2))
        return 0
    print(ls_text(args.stream, rows, reader.where(args.stream)))
    return 0


def ls_text(table: str, rows: Sequence[Published], where: str) -> str:
    if not rows:
        return f"table {table}: no partition published yet ({where})"
    header = ("dt", "seq", "version", "files", "schema", "location")
    cells = [header] + [
        (
            r.partition.dt,
            str(r.partition.seq),
            f"{r.kind} {r.upper}" if r.kind else "?",
            str(len(r.urls)),
            r.schema_text(),
            r.partition.location,
        )
        for r in rows
    ]
    switched = sum(r.kind == "merged" for r in rows)
    if all(r.kind == "state" for r in rows):  # a rollup's table: no small or merged objects
        lines = [f"table {table}: {len(rows)} partitions published (rollup states), {where}"]
    else:
        lines = [
            f"table {table}: {len(rows)} partitions published ({switched} switched to merged "
            f"objects, {len(rows) - switched} live), {where}"
        ]
    return "\n".join(lines + _aligned(cells))


def cmd_table_history(args: argparse.Namespace) -> int:
    reader = _reader()
    return print_history(
        reader.target(args.stream), args.stream, reader.where(args.stream), args.json
    )


def cmd_table_files(args: argparse.Namespace) -> int:
    reader = _reader()
    partition, files = reader.files(args.stream, args.date)
    if args.json:
        document = {
            "dt": partition.dt,
            "seq": partition.seq,
            "location": partition.location,
            "files": [{"url": url, "contentLength": length} for url, length in files],
        }
        print(json.dumps(document, indent=2))
        return 0
    for url, length in files:
        print(f"{'?' if length is None else length:>12}  {url}")
    total = sum(length or 0 for _, length in files)
    print(f"{len(files)} files, {total} bytes: {partition.location} (seq {partition.seq})")
    return 0


def cmd_table_read(args: argparse.Namespace) -> int:
    rows = _reader().read(args.stream, args.date, args.limit, args.as_of).to_pylist()
    if args.json:
        for row in rows:
            print(json.dumps(row, default=_json_value))
        return 0
    print(rows_text(rows))
    return 0


def _json_value(value: object) -> object:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


MAX_CELL = 40
"""A text table's cell is cut to this many characters (the JSON lines are not)."""


def rows_text(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    header = tuple(rows[0])
    cells = [header] + [tuple(_cell(row[c]) for c in header) for row in rows]
    return "\n".join(_aligned(cells) + [f"({len(rows)} rows)"])


def _cell(value: object) -> str:
    text = "NULL" if value is None else _json_value(value) if not isinstance(value, str) else value
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _aligned(cells: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def add_table_parser(
    add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Register `table ls|files|read` with `parser.build_parser`'s `add(name, help)`; each
    subcommand takes the common options (`common`) too."""
    table = add(
        "table",
        help="a stream's published table as a query engine sees it: through the catalog "
        "(LEASEHOLD_CATALOG) and the manifest each partition points at",
    )
    table_sub = table.add_subparsers(dest="table_command", required=True)

    def add_table(name: str, help: str) -> argparse.ArgumentParser:
        command = table_sub.add_parser(
            name, help=help, parents=[common], epilog=EPILOG, formatter_class=table.formatter_class
        )
        command.add_argument("stream", help="the stream (its table has the stream's name)")
        return command

    ls = add_table(
        "ls", help="the catalog's partitions: dt, publication seq, version, files, schema versions"
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(fn=cmd_table_ls)
    files = add_table("files", help="the data files a partition's manifest lists, with lengths")
    files.add_argument("date", type=date_arg, help="the partition's date, YYYY-MM-DD")
    files.add_argument("--json", action="store_true", help="machine-readable output")
    files.set_defaults(fn=cmd_table_files)
    read = add_table("read", help="a partition's rows, read through its manifest")
    read.add_argument("date", type=date_arg, help="the partition's date, YYYY-MM-DD")
    read.add_argument(
        "--limit", type=non_negative, default=None, help="at most N rows (default: all)"
    )
    read.add_argument(
        "--as-of",
        type=as_of_arg,
        default=None,
        metavar="SNAPSHOT|TIME",
        help="as an Iceberg snapshot served it: its id (table history) or an ISO 8601 time",
    )
    read.add_argument("--json", action="store_true", help="one JSON object per row")
    read.set_defaults(fn=cmd_table_read)
    history = add_table("history", help="an Iceberg table's retained snapshots, oldest first")
    history.add_argument("--json", action="store_true", help="machine-readable output")
    history.set_defaults(fn=cmd_table_history)
