"""Stream configuration: one YAML file (`streams.yaml`), validated in full on load.

A stream is one source -> table pipeline. Everything a run needs to know about it is here, so
a bad value fails the code location at load with one message naming the stream and the field,
never a run halfway through.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from resources.errors import ConfigError
from resources.rollup.spec import RollupSpec, parse_rollups
from resources.schema.columns import TYPES, ColumnSpec
from resources.schema.modes import DEFAULT_MODE, MODES, RESCUE, RESCUED
from resources.schema.versions import SchemaVersion
from resources.settings import (
    Settings,
    at_least,
    default_data_dir,
    http_url,
    iso_duration_problem,
    parse_iso_duration,
    setting,
)

FORMATS = ("jsonl", "csv")
TABLE_FORMATS = ("iceberg", "manifests")
"""`resources.catalog.target.TABLE_FORMATS` (a layer above: a test keeps them equal)."""
DEFAULT_TABLE_FORMAT = "iceberg"
"""Of a stream naming none: Iceberg, which every lake engine reads
(docs/concepts/table-formats.md)."""
CSV_FIELDS = ("header", "delimiter", "quote", "escape")
DEFAULT_PATH = "streams.yaml"
RESERVED_PREFIX = "__leasehold"
"""Names leasehold keeps for itself (what a CSV record carries as staged for Spark,
`resources/ingestion/csv_records.py`): no schema column may start with it."""

log = logging.getLogger(__name__)


class StreamConfigError(ConfigError):
    """Invalid configuration of one stream in streams.yaml, naming the stream and the field."""

    def __init__(self, stream: str, field_name: str, message: str) -> None:
        super().__init__(field_name, message, what=f"configuration of stream {stream!r}")
        self.stream = stream


@dataclass(frozen=True)
class MergeSettings:
    """Compaction of a table partition (docs/architecture.md, docs/concepts/compaction.md).

    `max_bytes` is the merged object's target size and a merge's byte budget; `max_objects`
    bounds one merge's inputs (Prism's 2,000); `interval` is how long after the first unmerged
    object lands its merge job is due; `close_grace` how long after the day ends (in the
    stream's time zone) the partition closes, at the earliest: it also waits for ingestion to
    catch up (`resources/compaction/closing.py`); `delayed_interval` how long after a delayed
    object (committed to a closed partition) its merge job is due: short, because a closed
    partition's readers see merged objects only, so a delayed row is unpublished until merged;
    `close_wait_max` how long at most a source object waiting on a retry after a read failure
    holds closing back, from its first failure; `sort_by` the column rows are sorted by inside
    a merged object (default: the event-time column), so row-group statistics prune filters."""

    max_objects: int = 2000
    max_bytes: int = 128 * 1024 * 1024
    close_grace: str = "PT1H"
    interval: str = "PT1H"
    delayed_interval: str = "PT5M"
    close_wait_max: str = "PT2H"
    sort_by: str | None = None

    @property
    def interval_s(self) -> float:
        return parse_iso_duration(self.interval, "merge.interval")

    @property
    def close_grace_s(self) -> float:
        return parse_iso_duration(self.close_grace, "merge.close_grace")

    @property
    def delayed_interval_s(self) -> float:
        return parse_iso_duration(self.delayed_interval, "merge.delayed_interval")

    @property
    def close_wait_max_s(self) -> float:
        return parse_iso_duration(self.close_wait_max, "merge.close_wait_max")


DURATIONS = ("close_grace", "interval", "delayed_interval", "close_wait_max")
"""The ISO-8601 duration fields of `MergeSettings`, validated when streams load."""


@dataclass(frozen=True)
class PartitionSettings:
    """How discovery cuts a listing into work units (docs/architecture.md,
    docs/concepts/work-units.md).

    A work unit — one lease item, one Dagster partition — is up to `max_objects` consecutive
    objects of one listing holding at most `max_bytes` together. The defaults
    (docs/concepts/work-units.md) keep a unit to one Spark read (`MAX_READ_BYTES`, 256 MiB) and
    make the per-unit costs (a lease, a Dagster partition and its events, ~40 ms) a rounding
    error per object, while a million objects a day stay ~1,000 Dagster partitions a day.
    `max_objects: 1` is one object per partition. An object bigger than `commit_every_bytes` (a
    unit of its own when it is over `max_bytes`) is read and committed in chunks of that much
    text, each chunk one fenced transaction with the offset reached: a crash loses at most one
    chunk's work."""

    max_objects: int = 1000
    max_bytes: int = 256 * 1024 * 1024
    commit_every_bytes: int = 128 * 1024 * 1024


@dataclass(frozen=True)
class StreamConfig:
    """One stream as streams.yaml declares it: its source, format, schema, table and what is done
    with it."""

    name: str
    source: str
    format: str
    columns: tuple[ColumnSpec, ...]
    event_time: str
    table: str
    quarantine: str
    timezone: str = "UTC"
    record_id: str | None = None
    csv_header: bool = True
    csv_delimiter: str = ","
    csv_quote: str = '"'
    csv_escape: str | None = None
    """None: a quote inside a quoted field is doubled (RFC 4180)."""
    schema_evolution: str = DEFAULT_MODE
    """What a field the schema does not hold does (`resources.schema.modes`)."""
    schema_version: int = 1
    """The schema version `columns` are: 1 as loaded from the file; the store's latest once a
    run follows it (`resources.stores.stream_schema.followed_config`)."""
    merge: MergeSettings = field(default_factory=MergeSettings)
    partition: PartitionSettings = field(default_factory=PartitionSettings)
    rollups: tuple[RollupSpec, ...] = ()
    table_format: str = DEFAULT_TABLE_FORMAT
    """`iceberg` or `manifests`: the `PublicationTarget` its table is published through."""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def following(self, version: SchemaVersion) -> StreamConfig:
        """This stream reading and writing `version`'s columns."""
        return replace(self, columns=version.columns, schema_version=version.version)


def _url(value: Any, base: Path, stream: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StreamConfigError(stream, name, "must be a file:// or s3:// URL")
    if value.startswith("s3://"):
        if not re.match(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$", value):
            raise StreamConfigError(stream, name, f"{value!r} is not a valid s3://bucket/prefix")
        return value.rstrip("/")
    if value.startswith("file://"):
        path = Path(value[len("file://") :])
        return "file://" + str(path if path.is_absolute() else (base / path).resolve())
    raise StreamConfigError(stream, name, f"{value!r} must start with file:// or s3://")


def _stream(name: str, raw: Any, base: Path) -> StreamConfig:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise StreamConfigError(name, "name", "letters, digits and '_', not starting with a digit")
    if not isinstance(raw, dict):
        raise StreamConfigError(name, "-", "must be a mapping of fields")
    _known_fields(name, raw)
    fmt = _one_of(name, "format", raw.get("format", "jsonl"), FORMATS)
    table_format = _one_of(
        name, "table_format", raw.get("table_format", DEFAULT_TABLE_FORMAT), TABLE_FORMATS
    )
    schema, columns = _schema(name, raw.get("schema"))
    names = [c.name for c in columns]
    event_time, record_id, tz = _time_and_id(name, raw, schema, names)
    table = _url(raw.get("table"), base, name, "table")
    quarantine = _url(raw.get("quarantine", table + "_quarantine"), base, name, "quarantine")
    csv, delimiter, quote, escape = _csv(name, raw.get("csv") or {})
    evolution = _evolution(name, raw.get("schema_evolution", DEFAULT_MODE), fmt, names)
    merge = _merge(name, raw.get("merge") or {})
    partition = _positive_ints(name, "partition", raw.get("partition"), PartitionSettings)
    if merge.sort_by is None:
        merge = replace(merge, sort_by=event_time)
    elif merge.sort_by not in names:
        raise StreamConfigError(name, "merge.sort_by", f"{merge.sort_by!r} is not a schema column")
    try:
        rollups = parse_rollups(raw.get("rollups"), schema)
    except ConfigError as exc:
        raise StreamConfigError(name, exc.field, exc.reason) from None
    return StreamConfig(
        name=name,
        source=_url(raw.get("source"), base, name, "source"),
        format=fmt,
        columns=tuple(columns),
        event_time=event_time,
        table=table,
        quarantine=quarantine,
        timezone=str(tz),
        record_id=record_id,
        csv_header=bool(csv.get("header", True)),
        csv_delimiter=delimiter,
        csv_quote=quote,
        csv_escape=escape,
        schema_evolution=evolution,
        merge=merge,
        partition=partition,
        rollups=rollups,
        table_format=table_format,
    )


def _one_of(stream: str, field_name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`; else a `StreamConfigError` naming the field."""
    if value not in allowed:
        raise StreamConfigError(stream, field_name, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _known_fields(name: str, raw: dict[str, Any]) -> None:
    """Every field of the stream is one leasehold knows."""
    known = {
        "source", "format", "schema", "event_time", "timezone", "record_id", "table",
        "quarantine", "csv", "merge", "partition", "rollups", "schema_evolution", "table_format",
    }  # fmt: skip
    for key in raw:
        if key not in known:
            raise StreamConfigError(name, key, f"unknown field; known: {', '.join(sorted(known))}")


def _schema(name: str, schema: Any) -> tuple[dict[str, Any], list[ColumnSpec]]:
    """The `schema` mapping and its columns, each name and type checked."""
    if not isinstance(schema, dict) or not schema:
        raise StreamConfigError(name, "schema", "must map column names to types")
    columns = []
    for col, typ in schema.items():
        if str(col).startswith(RESERVED_PREFIX):
            raise StreamConfigError(
                name, f"schema.{col}", f"names starting with {RESERVED_PREFIX} are reserved"
            )
        if typ not in TYPES:
            raise StreamConfigError(
                name, f"schema.{col}", f"{typ!r} is not one of {', '.join(TYPES)}"
            )
        columns.append(ColumnSpec(str(col), typ))
    return schema, columns


def _time_and_id(
    name: str, raw: dict[str, Any], schema: dict[str, Any], names: list[str]
) -> tuple[Any, Any, Any]:
    """`event_time`, `record_id` and `timezone`, each checked against the schema."""
    event_time = raw.get("event_time")
    if event_time not in names:
        raise StreamConfigError(name, "event_time", f"{event_time!r} is not a schema column")
    if schema[event_time] not in ("timestamp", "string"):
        raise StreamConfigError(name, "event_time", "must be a timestamp (or string) column")
    record_id = raw.get("record_id")
    if record_id is not None and record_id not in names:
        raise StreamConfigError(name, "record_id", f"{record_id!r} is not a schema column")
    tz = raw.get("timezone", "UTC")
    try:
        ZoneInfo(str(tz))
    except (ZoneInfoNotFoundError, ValueError):
        raise StreamConfigError(name, "timezone", f"{tz!r} is not an IANA time zone") from None
    return event_time, record_id, tz


def _csv(name: str, csv: Any) -> tuple[dict[str, Any], str, str, str | None]:
    """The `csv` section, with its delimiter, quote and escape checked."""
    if not isinstance(csv, dict):
        raise StreamConfigError(name, "csv", "must be a mapping of fields")
    for key in csv:
        if key not in CSV_FIELDS:
            fields = ", ".join(CSV_FIELDS)
            raise StreamConfigError(name, f"csv.{key}", f"unknown field; known: {fields}")
    delimiter, quote = csv.get("delimiter", ","), csv.get("quote", '"')
    escape = csv.get("escape")
    for key, value in (("delimiter", delimiter), ("quote", quote), ("escape", escape)):
        if value is None and key == "escape":
            continue
        if not isinstance(value, str) or len(value) != 1 or value in "\r\n":
            raise StreamConfigError(name, f"csv.{key}", "must be one character, not a line break")
    if len({delimiter, quote, escape or quote}) < 2 or delimiter in (quote, escape):
        raise StreamConfigError(name, "csv.delimiter", "must differ from the quote and escape")
    if not isinstance(csv.get("header", True), bool):
        raise StreamConfigError(name, "csv.header", "must be true or false")
    return csv, delimiter, quote, escape


def _evolution(name: str, raw: Any, fmt: str, names: list[str]) -> str:
    """`schema_evolution`, checked against the format and the schema."""
    evolution = _one_of(name, "schema_evolution", raw, MODES)
    if evolution == RESCUE and fmt != "jsonl":
        raise StreamConfigError(
            name,
            "schema_evolution",
            "rescue reads JSON lines; a CSV stream takes add, fail or ignore",
        )
    if evolution == RESCUE and RESCUED in names:
        raise StreamConfigError(
            name, f"schema.{RESCUED}", "is the column `schema_evolution: rescue` writes"
        )
    return evolution


def _merge(name: str, merge_raw: dict[str, Any]) -> MergeSettings:
    """The `merge` section, every field checked (`sort_by` is checked by the caller)."""
    merge = MergeSettings(
        **{k: v for k, v in merge_raw.items() if k in MergeSettings.__annotations__}
    )
    for key in ("max_objects", "max_bytes"):
        value = getattr(merge, key)
        if not isinstance(value, int) or value < 1:
            raise StreamConfigError(name, f"merge.{key}", f"{value!r} must be a positive integer")
    for key in DURATIONS:
        try:
            parse_iso_duration(getattr(merge, key), f"merge.{key}")
        except (ValueError, ConfigError) as exc:
            raise StreamConfigError(name, f"merge.{key}", str(exc)) from None
    for key in merge_raw:
        if key not in MergeSettings.__annotations__:
            fields = ", ".join(MergeSettings.__annotations__)
            raise StreamConfigError(name, f"merge.{key}", f"unknown field; known: {fields}")
    return merge


def _positive_ints(stream: str, section: str, raw: Any, kind: type[PartitionSettings]) -> Any:
    """A settings section of positive integers, every field named in errors."""
    if raw is None:
        return kind()
    if not isinstance(raw, dict):
        raise StreamConfigError(stream, section, "must be a mapping of fields")
    known = kind.__annotations__
    for key, value in raw.items():
        if key not in known:
            raise StreamConfigError(
                stream, f"{section}.{key}", f"unknown field; known: {', '.join(known)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StreamConfigError(
                stream, f"{section}.{key}", f"{value!r} must be a positive integer"
            )
    return kind(**raw)


def load_streams(path: str | os.PathLike[str] | None = None) -> dict[str, StreamConfig]:
    """Load and validate every stream; relative file:// URLs resolve against the file's
    directory, so the same file works from any working directory. Without a path: the one
    `LEASEHOLD_STREAMS` names, else `streams.yaml`."""
    file = Path(path or LakeSettings.from_env().streams_path or DEFAULT_PATH).resolve()
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise StreamConfigError("-", "streams", f"no streams file at {file}") from None
    streams = raw.get("streams") if isinstance(raw, dict) else None
    if not isinstance(streams, dict) or not streams:
        raise StreamConfigError("-", "streams", f"{file} must have a 'streams:' mapping")
    return {name: _stream(str(name), body, file.parent) for name, body in streams.items()}


class LakeConfigError(ConfigError):
    """Invalid lake configuration (`LakeSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="lake configuration")


DEFAULT_ASSET_OWNER = "team:data-platform"
_OWNER = re.compile(r"^(team:[A-Za-z0-9_.-]+|[^@\s,]+@[^@\s,]+\.[^@\s,]+)$")


def owner_list(value: str) -> list[str]:
    return [o.strip() for o in value.split(",") if o.strip()]


def owners_problem(value: str) -> str | None:
    """Dagster rejects an owner that is neither `team:<name>` nor an e-mail address, and would
    do so at load with a message naming no setting: checked here, so the message names it."""
    owners = owner_list(value)
    if not owners:
        return "must name at least one owner"
    bad = [o for o in owners if not _OWNER.match(o)]
    return f"{', '.join(map(repr, bad))}: an owner is `team:<name>` or an e-mail" if bad else None


@dataclass(frozen=True)
class LakeSettings(Settings):
    """Where the streams are configured, how their object stores are reached and how much work
    a run or a tick takes on, declared once: `LakeResource` takes its fields from here, and
    definitions-time code (which stream exists) reads them from the environment through here.
    """

    config_error = LakeConfigError

    streams_path: str | None = setting(
        None, env="LEASEHOLD_STREAMS", doc=f"the streams file (default `{DEFAULT_PATH}`)"
    )
    s3_endpoint_url: str | None = setting(
        None, env="LEASEHOLD_S3_ENDPOINT_URL", doc="S3-compatible endpoint", check=http_url
    )
    region: str | None = setting(None, env="LEASEHOLD_S3_REGION", doc="S3 region")
    work_dir: str | None = setting(
        None,
        env="LEASEHOLD_WORK_DIR",
        doc="scratch directory of runs (default `$LEASEHOLD_DATA_DIR/work`)",
    )
    # Each run costs seconds before it ingests anything (launch through the daemon, Spark
    # start, its planned events) and a tail after its last Spark read that nothing overlaps
    # (that chunk's writes, commits and events): fewer, bigger runs (BENCHMARKS.md).
    max_partitions_per_run: int = setting(
        2000,
        env="LEASEHOLD_MAX_PARTITIONS_PER_RUN",
        doc="source partitions per range run the sensor requests",
        check=at_least(1),
    )
    max_objects_per_tick: int = setting(
        20_000,
        env="LEASEHOLD_MAX_OBJECTS_PER_TICK",
        doc="objects one discovery tick lists at most",
        check=at_least(1),
    )
    max_retries_per_tick: int = setting(
        5,
        env="LEASEHOLD_MAX_RETRIES_PER_TICK",
        doc="runs of work left behind one discovery tick requests at most",
        check=at_least(0),
    )
    # Listing cost against delay (resources/ingestion/reconciliation.py): a late object waits
    # at most this plus one pass; a pass costs one LIST per 1,000 objects of the source.
    reconcile_interval_seconds: float = setting(
        900.0,
        env="LEASEHOLD_RECONCILE_INTERVAL_SECONDS",
        doc="how often the whole source is listed again for objects behind the discovery "
        "cursor (late objects)",
        check=at_least(0),
    )
    check_interval_seconds: float = setting(
        3600.0,
        env="LEASEHOLD_CHECK_INTERVAL_SECONDS",
        doc="the checks sensor runs the asset checks after ingestion runs and at least this often",
        check=at_least(1),
    )
    # Source objects per Spark read, in whole work units (at least one). A run reads the next
    # chunk while it commits this one (and Dagster records it), so several chunks per run hide
    # most of the commit and event-log cost.
    chunk_size: int = setting(
        250,
        env="LEASEHOLD_CHUNK_SIZE",
        doc="source objects per Spark job of read tasks (whole work units, at least one)",
        check=at_least(1),
    )
    # A merge is one Spark job of up to `merge.max_bytes`; a run of many merges pays Dagster's
    # launch and the SparkSession once. Bounded so one run's failure delays few partitions.
    max_merges_per_run: int = setting(
        100,
        env="LEASEHOLD_MAX_MERGES_PER_RUN",
        doc="table partitions one merge run the merge sensor requests covers at most",
        check=at_least(1),
    )

    # Dagster advises at most 100,000 partitions per asset (docs/concepts/work-units.md): a week of
    # units of 1,000 objects is 7,000 partitions at 10⁶ objects a day, 70,000 at 10⁷, while a
    # week is long enough to look at or re-run a recent unit from the UI.
    partition_retention: str = setting(
        "P7D",
        env="LEASEHOLD_PARTITION_RETENTION",
        doc="how long a COMPLETED work unit stays a Dagster partition (ISO-8601 duration); "
        "its materializations stay in the event log and its commit record in the store",
        check=iso_duration_problem,
    )

    # Dagster shows an asset's owners on its page and filters the catalog by them; who answers
    # for the pipeline's tables is a deployment's choice, not the code's.
    asset_owners: str = setting(
        DEFAULT_ASSET_OWNER,
        env="LEASEHOLD_ASSET_OWNERS",
        doc="owners of every asset Dagster shows, comma-separated: `team:<name>` or an e-mail",
        check=owners_problem,
    )

    def streams(self) -> dict[str, StreamConfig]:
        return load_streams(self.streams_path)

    def owners(self) -> list[str]:
        return owner_list(self.asset_owners)

    def scratch_dir(self) -> Path:
        return Path(self.work_dir) if self.work_dir else default_data_dir() / "work"
