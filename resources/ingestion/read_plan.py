"""The Spark expressions of a read: how a staged line becomes a typed row, or a reason.

JSON lines: Spark's JSON reader with the declared types, plus the corrupt-record column that
keeps the text of a line it rejects; only such a line is parsed again as text and `try_cast`
per column, to name the column at fault (Spark 4 runs ANSI casts, which would fail the job
instead). As in any Spark JSON read, a line holding a JSON array yields one record per
element, and invalid UTF-8 is rejected. CSV is staged as JSON lines (`csv_records`) and read
the same way, each record carrying its line number, its text and, when malformed, why
(`csv_plan`). Then the checks (event time, record id) and the table date in the stream's time
zone. DataFrame API only: the same expressions run over Spark Connect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.ingestion.csv_records import ERROR_KEY, LINE_KEY, RAW_KEY
from resources.ingestion.source_files import INPUT_DIGITS
from resources.schema.modes import RESCUE, RESCUED
from resources.streams import StreamConfig

CORRUPT = "_corrupt_record"


def spark_type(type_name: str) -> Any:
    """The Spark type of a `streams.yaml` column type (validated there)."""
    from pyspark.sql import types as T

    return {
        "string": T.StringType(),
        "long": T.LongType(),
        "int": T.IntegerType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "timestamp": T.TimestampType(),
        "date": T.DateType(),
    }[type_name]


def wrong_type(name: str, type_name: str) -> str:
    """The reason of a line whose value for column `name` is not a `type_name`."""
    return f"wrong type for {name}: expected {type_name}"


def text_reason_and_columns(config: StreamConfig, line: Any) -> tuple[Any, dict[str, Any]]:
    """Parse `line` as text, cast per column: slow, but it names what is wrong."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    names = config.column_names
    schema = StructType(
        [StructField(n, StringType()) for n in names] + [StructField(CORRUPT, StringType())]
    )
    parsed = F.from_json(line, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    malformed = parsed.isNull() | parsed[CORRUPT].isNotNull()
    malformed_reason = "invalid JSON (truncated or malformed)"
    typed = {c.name: parsed[c.name].try_cast(spark_type(c.type)) for c in config.columns}
    reason = F.when(malformed, F.lit(malformed_reason))
    for c in config.columns:
        reason = reason.when(
            parsed[c.name].isNotNull() & typed[c.name].isNull(),
            F.lit(wrong_type(c.name, c.type)),
        )
    return reason, typed


def source_column() -> Any:
    """The batch index of the object a row came from, out of the staged file's name."""
    from pyspark.sql import functions as F

    return F.substring("_metadata.file_name", 1, INPUT_DIGITS).cast("int").alias("src")


def json_schema(config: StreamConfig) -> tuple[Any, dict[str, str]]:
    """The declared types plus the corrupt-record column, and the options that fill it (a CSV
    stream's staged records: plus what each carries, `csv_fields`)."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType(
        [StructField(c.name, spark_type(c.type)) for c in config.columns]
        + [StructField(CORRUPT, StringType())]
        + (csv_fields() if config.format == "csv" else [])
    )
    return schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def event_time(config: StreamConfig) -> Any:
    from pyspark.sql import functions as F

    event = F.col(config.event_time)
    if config.columns[config.column_names.index(config.event_time)].type == "string":
        event = event.try_cast("timestamp")
    return event


def check_reason(config: StreamConfig) -> Any:
    """Why a parsed record cannot go to the table, or null."""
    from pyspark.sql import functions as F

    reason = F.when(event_time(config).isNull(), F.lit("missing event time"))
    if config.record_id:
        reason = reason.when(F.col(config.record_id).isNull(), F.lit("missing record id"))
    return reason


def rescue_parse(config: StreamConfig) -> tuple[list[Any], Any, list[Any], list[Any]]:
    """`schema_evolution: rescue` (JSON lines): the stages up to `parsed`. Each line is parsed
    once into a map of field -> variant (a line holding an array: one per element), so every
    field and its JSON value is seen: a declared column takes its value cast to its type, and
    the fields the schema does not hold, with every value that does not cast, go to
    `_rescued` as a JSON object; only a line that is not JSON is rejected. The source is read as
    text: this mode costs more than the typed read (BENCHMARKS.md)."""
    from pyspark.sql import functions as F

    known = F.array(*(F.lit(n) for n in config.column_names))
    text = F.regexp_replace("raw", "^\ufeff", "")
    as_map = "map<string,variant>"
    recs = F.when(F.ltrim(text).startswith("["), F.from_json(text, f"array<{as_map}>")).otherwise(
        F.array(F.from_json(text, as_map))
    )
    m = F.col("m")
    typed = {
        c.name: F.try_variant_get(m[c.name], "$", c.type)
        for c in config.columns
        if c.name != RESCUED
    }
    failed = F.array_compact(
        F.array(
            *(
                F.when(m[n].isNotNull() & ~F.is_variant_null(m[n]) & value.isNull(), F.lit(n))
                for n, value in typed.items()
            )
        )
    )
    kept = F.map_filter(
        m,
        lambda k, v: (
            (~F.array_contains(known, k) & ~F.is_variant_null(v)) | F.array_contains(failed, k)
        ),
    )
    rescued = F.when(F.size(kept) > 0, F.to_json(kept))
    parsed = [
        "src",
        "raw",
        *((rescued if c.name == RESCUED else typed[c.name]).alias(c.name) for c in config.columns),
        F.when(m.isNull(), F.lit("invalid JSON (truncated or malformed)")).alias("_rejected"),
    ]
    lines = [source_column(), F.col("value").alias("raw")]
    keep = F.trim("raw") != ""
    records = ["src", "raw", F.explode_outer(recs).alias("m")]
    return lines, keep, records, parsed


@dataclass(frozen=True)
class ReadPlan:
    """A read's Spark expressions, select by select. Built once per reader: building them
    costs a py4j round trip per call (BENCHMARKS.md), and a run reads many chunks with the same
    ones."""

    lines: list[Any]  # from the file reader's rows: (src, columns..., raw), or (src, raw)
    keep: Any  # which of those are records at all, or None
    records: list[Any] | None  # (src, raw, record) a record per row, or None: a line is one
    parsed: list[Any]  # (src, raw, columns..., _rejected)
    checked: list[Any]  # (src, raw, columns..., _reason)
    rows: list[Any]  # (src, dt, columns..., _reason, _raw)
    final: dict[str, Any] | None = None  # CSV: columns replaced last (`csv_plan`)
    dropped: tuple[str, ...] = ()  # and columns dropped then


def read_plan(config: StreamConfig) -> ReadPlan:
    """Spark's JSON reader parses with the declared types; `raw` is the text of a line it
    rejects, else null, and only such a line goes through the text parse, which names what is
    wrong (a line the typed parse rejects but the text parse accepts, a quoted number say,
    keeps its text-cast values). CSV: the same over its staged records (`csv_plan`)."""
    from pyspark.sql import functions as F

    text_reason, text_typed = text_reason_and_columns(config, F.col("raw"))
    lines = [source_column(), *config.column_names, F.col(CORRUPT).alias("raw")]
    rejected = F.col("raw").isNotNull()
    parsed = [
        "src",
        "raw",
        *(
            F.when(rejected, text_typed[c]).otherwise(F.col(c)).alias(c)
            for c in config.column_names
        ),
        F.when(rejected, text_reason).alias("_rejected"),
    ]
    keep, records = None, None
    if config.schema_evolution == RESCUE:  # JSON lines only (streams.py refuses it for CSV)
        lines, keep, records, parsed = rescue_parse(config)
    reason = (
        F.when(~F.is_valid_utf8("raw"), F.lit("invalid UTF-8"))
        .when(F.col("_rejected").isNotNull(), F.col("_rejected"))
        .otherwise(check_reason(config))
    )
    dt = F.to_date(F.from_utc_timestamp(event_time(config), config.timezone))
    ok = F.col("_reason").isNull()
    plan = ReadPlan(
        lines=lines,
        keep=keep,
        records=records,
        parsed=parsed,
        checked=["src", "raw", *config.column_names, reason.alias("_reason")],
        rows=[
            "src",
            F.when(ok, dt).alias("dt"),
            *config.column_names,
            "_reason",
            F.when(~ok, F.make_valid_utf8("raw")).alias("_raw"),
        ],
    )
    return csv_plan(plan) if config.format == "csv" else plan


CSV_CARRIED = {
    LINE_KEY: ("_line", "long"),
    RAW_KEY: ("_csv_raw", "string"),
    ERROR_KEY: ("_csv_error", "string"),
}
"""What each staged CSV record carries beside its columns: key -> (column, type)."""


def csv_fields() -> list[Any]:
    """The keys a staged CSV record carries, as fields of the JSON reader's schema."""
    from pyspark.sql.types import StructField

    return [StructField(key, spark_type(typ)) for key, (_, typ) in CSV_CARRIED.items()]


def csv_plan(plan: ReadPlan) -> ReadPlan:
    """A CSV stream's plan: the JSON plan over its staged records (`csv_records.stage_csv`),
    carrying each record's line number, text and malformed reason through to the rows. A
    record the typed parse rejects (a column's text that is not its type) has every field
    null but its JSON text, so what it carries is read from that text. Last, a malformed
    record is bad for its own reason, and a bad row's text is the CSV record as written (the
    staged JSON is not the user's) and its line the exact one it carries."""
    from pyspark.sql import functions as F

    carried = [
        F.coalesce(F.col(key), F.get_json_object(CORRUPT, f"$.{key}").cast(typ)).alias(name)
        for key, (name, typ) in CSV_CARRIED.items()
    ]
    names = [name for name, _ in CSV_CARRIED.values()]
    error = F.col("_csv_error")
    bad = error.isNotNull() | F.col("_reason").isNotNull()
    return ReadPlan(
        lines=[*plan.lines, *carried],
        keep=None,
        records=None,
        parsed=[*plan.parsed, *names],
        checked=[*plan.checked, *names],
        rows=[*plan.rows, *names],
        final={
            "dt": F.when(error.isNull(), F.col("dt")),
            "_reason": F.coalesce(error, F.col("_reason")),
            "_raw": F.when(bad, F.col("_csv_raw")),
            "_line": F.when(bad, F.col("_line")),
        },
        dropped=("_csv_raw", "_csv_error"),
    )
