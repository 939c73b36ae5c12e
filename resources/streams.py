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
from resources.key_settings import DedupeSettings, parse_keys
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
    setting,
)
from resources.source_settings import (
    DiscoverySettings,
    SourceCleanupSettings,
    parse_discovery,
    parse_source_cleanup,
)
from resources.stream_sections import (
    MergeSettings,
    PartitionSettings,
    parse_merge,
    parse_positive_ints,
)

FORMATS = ("jsonl", "csv")
TABLE_FORMATS = ("iceberg", "manifests")
"""`resources.catalog.target.TABLE_FORMATS` (a layer above: a test keeps them equal)."""
DEFAULT_TABLE_FORMAT = "iceberg"
"""Of a stream naming none: Iceberg, which every lake engine reads
(docs/concepts/table-formats.md)."""
CSV_FIELDS = ("header", "delimiter", "quote", "escape")
DEFAULT_PATH = "streams.yaml"
STREAM_FIELDS = (
    "source", "format", "schema", "event_time", "timezone", "record_id", "table", "quarantine",
    "csv", "merge", "partition", "rollups", "schema_evolution", "table_format", "discovery",
    "source_cleanup", "dedupe", "on_change",
)  # fmt: skip
"""A stream's fields in streams.yaml; its header documents each (a test keeps them equal)."""
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
    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    source_cleanup: SourceCleanupSettings = field(default_factory=SourceCleanupSettings)
    dedupe: DedupeSettings = field(default_factory=DedupeSettings)
    """How records sharing `record_id` resolve (`resources.key_settings`)."""
    on_change: str = "ignore"
    """What a source object rewritten in place does (`resources.key_settings`)."""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def dictionary_columns(self) -> list[str]:
        """The columns a table object dictionary-encodes. Dictionary pages pay off for repeated
        strings; a record id never repeats, and numbers and times rarely do in an event stream:
        hashing them costs CPU and makes the object bigger (BENCHMARKS.md, "Writing one table
        object")."""
        return [c.name for c in self.columns if c.type == "string" and c.name != self.record_id]

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
    try:
        merge = parse_merge(raw.get("merge") or {})
        partition = parse_positive_ints("partition", raw.get("partition"), PartitionSettings)
        dedupe, on_change = parse_keys(raw, record_id, names)
    except ConfigError as exc:
        raise StreamConfigError(name, exc.field, exc.reason) from None
    if merge.sort_by is None:
        merge = replace(merge, sort_by=event_time)
    elif merge.sort_by not in names:
        raise StreamConfigError(name, "merge.sort_by", f"{merge.sort_by!r} is not a schema column")
    source = _url(raw.get("source"), base, name, "source")
    cleanup_raw = _cleanup_section(name, raw.get("source_cleanup"), base)
    try:
        rollups = parse_rollups(raw.get("rollups"), schema)
        discovery = parse_discovery(raw.get("discovery"), source)
        cleanup = parse_source_cleanup(cleanup_raw, source)
    except ConfigError as exc:
        raise StreamConfigError(name, exc.field, exc.reason) from None
    return StreamConfig(
        name=name,
        source=source,
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
        discovery=discovery,
        source_cleanup=cleanup,
        dedupe=dedupe,
        on_change=on_change,
    )


def _cleanup_section(name: str, raw: Any, base: Path) -> Any:
    """The `source_cleanup` section with its `archive_to` resolved against `base`."""
    if isinstance(raw, dict) and raw.get("archive_to") is not None:
        return {
            **raw,
            "archive_to": _url(raw["archive_to"], base, name, "source_cleanup.archive_to"),
        }
    return raw


def _one_of(stream: str, field_name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`; else a `StreamConfigError` naming the field."""
    if value not in allowed:
        raise StreamConfigError(stream, field_name, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _known_fields(name: str, raw: Any) -> None:
    """The stream's name is valid, and each of its fields one leasehold knows."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise StreamConfigError(name, "name", "letters, digits and '_', not starting with a digit")
    if not isinstance(raw, dict):
        raise StreamConfigError(name, "-", "must be a mapping of fields")
    for key in raw:
        if key not in STREAM_FIELDS:
            known = ", ".join(sorted(STREAM_FIELDS))
            raise StreamConfigError(name, key, f"unknown field; known: {known}")


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
    # Notifications discovery (resources/ingestion/notification_discovery.py): a received
    # message stays hidden this long; a tick that dies leaves it to come back after it.
    notification_visibility_seconds: int = setting(
        300,
        env="LEASEHOLD_NOTIFICATION_VISIBILITY_SECONDS",
        doc="how long a received S3 event message stays hidden from other receivers (SQS "
        "visibility timeout): a tick that dies before deleting it sees it again after this",
        check=at_least(1),
    )
    notification_wait_seconds: int = setting(
        1,
        env="LEASEHOLD_NOTIFICATION_WAIT_SECONDS",
        doc="SQS long polling per receive: 0 samples some of SQS's servers and may find a "
        "queue empty that is not",
        check=at_least(0),
    )
    # Latency against cost: each of a stream's sensors makes a few store reads a tick (a
    # discovery tick one LIST, or one SQS receive, more), whether or not anything is new.
    sensor_interval_seconds: int = setting(
        30,
        env="LEASEHOLD_SENSOR_INTERVAL_SECONDS",
        doc="the least time between two ticks of each of leasehold's sensors (discovery, merge, "
        "publication, rollup, checks); Dagster's daemon looks at its sensors every 5 s",
        check=at_least(5),
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
