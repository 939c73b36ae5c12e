"""`leasehold init SOURCE`: a stream entry for the user's own data, inferred from a sample.

The steps: sample the source (`resources.ingestion.stream_sampling`: a bounded head of a few
objects, read by Spark), infer the entry (`resources.ingestion.stream_inference`: format,
schema, event time, record id; every choice the sample does not settle is refused with the
flag that settles it), render it as YAML text and try it: the new streams file is written
beside the real one, loaded by the real parser (a bad value fails naming its field) and the
sample is read with the runtime's own read plan, so an entry whose records would all land in
quarantine is refused before it exists. Only then is the file replaced, atomically.

The entry is appended as text — never by re-dumping the whole file — so the user's comments
and layout survive; `--force` replaces an existing entry's lines in place.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.stream_inference import (
    Column,
    InferenceChoiceError,
    ObjectFormat,
    SampleRecords,
    SourceInferenceError,
    choose_event_time,
    choose_record_id,
    format_from_key,
    parse_csv,
    parse_jsonl,
    single_format,
    sniff_delimiter,
    stream_name,
)
from resources.key_settings import DATE, FIRST
from resources.schema.modes import ADD
from resources.settings import default_data_dir
from resources.streams import (
    DEFAULT_PATH,
    DEFAULT_TABLE_FORMAT,
    LakeSettings,
    StreamConfig,
    load_streams,
)

if TYPE_CHECKING:  # imported by the command itself: Spark's side loads only for `init`
    from resources.ingestion.stream_sampling import SampledObject, SourceSample

HEADER = """\
# Streams: one source -> table pipeline each (docs/your-own-data.md; the fields are documented
# in the header of the repository's streams.yaml). `leasehold init SOURCE` appends an entry.
"""


STREAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""What `resources.streams` accepts as a stream's name."""


@dataclass
class Inferred:
    """An inferred entry, with what the user should read before running it."""

    name: str
    entry: dict[str, Any]
    comments: dict[str, str]  # schema column -> note, shown beside it in the YAML
    notes: list[str]
    summary: str


def cmd_init(args: argparse.Namespace) -> int:
    from resources.cli.spark_log import quiet_spark
    from resources.ingestion.stream_sampling import sample_lines, sample_source, stage_sample
    from resources.objects.factory import object_store_for
    from resources.spark.session import build_spark_session

    lake = LakeSettings.from_env()
    streams_file = Path(args.streams_file or lake.streams_path or DEFAULT_PATH).resolve()
    source = source_url(args.source)
    name = args.name or stream_name(source)
    if not STREAM_NAME.fullmatch(name):  # before sampling: Spark takes a while to start
        raise InferenceChoiceError(
            "--name NAME", f"{name!r} is no stream name: letters, digits and '_', not first a digit"
        )
    if source.startswith("file://") and not Path(source[len("file://") :]).is_dir():
        raise SourceInferenceError(f"no directory at {source[len('file://') :]}")
    store = object_store_for(source, endpoint_url=lake.s3_endpoint_url, region=lake.region)
    sample = sample_source(store, sample_objects=args.sample_objects)
    unreadable = [o for o in sample.sampled if o.format.problem]
    if unreadable:
        listed = "; ".join(f"{o.key}: {o.format.problem}" for o in unreadable[:3])
        raise SourceInferenceError(
            f"{len(unreadable)} of {len(sample.sampled)} sampled objects cannot be read as "
            f"they are ({listed})"
        )
    formats = {o.key: o.format for o in sample.sampled}
    for info in sample.listed:  # the rest of the listing, by suffix
        by_key = format_from_key(info.key)
        if info.key not in formats and by_key and info.size:
            formats[info.key] = ObjectFormat(by_key, info.key.lower().endswith(".gz"))
    unknown = [k for k, f in formats.items() if f.format is None]
    fmt = _format(args.format, formats, unknown, sample.sampled)
    existing = _existing_streams(streams_file)
    if name in existing and not args.force:
        raise InferenceChoiceError(
            "--name NAME (or --force to replace it)",
            f"{streams_file} already has a stream {name!r}",
        )
    with tempfile.TemporaryDirectory(prefix="leasehold-init-") as scratch:
        staged = stage_sample(sample.sampled, Path(scratch) / "sample")
        quiet_spark(args.verbose)  # Java's and Spark's start-up lines to the log, as `run`
        spark = build_spark_session(app_name="leasehold-init")
        lines = sample_lines(spark, staged) if fmt.format != "csv" else {}
        inferred = infer_entry(args, source, name, fmt, sample, lines, streams_file.parent)
        text = write_entry(
            streams_file, inferred, replace=name in existing, spark=spark, staged=staged
        )
    print(inferred.summary)
    for note in inferred.notes:
        print(f"  note: {note}")
    print(f"\nwrote stream {name!r} to {streams_file}:\n")
    print(text.rstrip("\n"))
    configured = Path(lake.streams_path or DEFAULT_PATH).resolve()
    prefix = "" if configured == streams_file else f"LEASEHOLD_STREAMS={streams_file} "
    print(f"\nnext (edit the entry first if needed): {prefix}leasehold run --stream {name}")
    return 0


def source_url(source: str) -> str:
    """`s3://...` as given; a path or `file://` URL as an absolute `file://` URL."""
    if source.startswith("s3://"):
        return source.rstrip("/")
    path = Path(source.removeprefix("file://")).expanduser().resolve()
    return f"file://{path}"


def relative_url(url: str, base: Path) -> str:
    """A `file://` URL relative to the streams file's directory when it is under it (the file
    then works wherever the project is checked out), else absolute."""
    path = Path(url[len("file://") :])
    try:
        return f"file://{path.relative_to(base)}"
    except ValueError:
        return url


def _format(
    wanted: str | None,
    formats: dict[str, ObjectFormat],
    unknown: list[str],
    sampled: list[SampledObject],
) -> ObjectFormat:
    """The source's one format: detected, or `--format` where detection cannot tell. A
    `--format` the objects contradict is refused: it would quarantine every record."""
    detected = Counter(f.format for f in formats.values() if f.format)
    if wanted is None or len(detected) > 1:
        return single_format(formats, unknown)  # mixed formats are refused even so
    if detected and wanted not in detected:
        (seen,) = detected
        raise InferenceChoiceError(
            "--format (or leave it out)",
            f"--format {wanted}: the objects' names or first lines say {seen}",
        )
    if wanted == "csv":
        first = next((o.header for o in sampled if o.text), "")
        return ObjectFormat("csv", False, sniff_delimiter(first))
    return ObjectFormat(wanted, False)


def _existing_streams(path: Path) -> set[str]:
    if not path.exists():
        return set()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SourceInferenceError(f"{path} is not valid YAML: {exc}") from None
    streams = raw.get("streams") if isinstance(raw, dict) else None
    return {str(k) for k in streams} if isinstance(streams, dict) else set()


def infer_entry(
    args: argparse.Namespace,
    source: str,
    name: str,
    fmt: ObjectFormat,
    sample: SourceSample,
    lines: dict[int, list[str]],
    base: Path,
) -> Inferred:
    """The entry from the sampled lines (`lines`: JSON lines by sampled object's index; CSV
    is parsed from the sampled texts as the runtime parses it); local URLs it derives are
    written relative to `base` (the streams file's directory) when under it."""
    fmt_name = fmt.format or "jsonl"
    csv_format = CsvFormat(fmt.delimiter)
    records = _sample_records(fmt_name, csv_format, sample, lines)
    columns = records.columns
    event, why_event = choose_event_time(columns, args.event_time)
    record_id, id_notes = choose_record_id(columns, args.record_id)
    schema = {c.name: c.type for c in columns}
    if event.type == "date":
        schema[event.name] = "timestamp"  # a day's records: midnight of that day
    comments = {c.name: c.note for c in columns if c.note}
    comments[event.name] = "event_time: " + why_event
    if record_id is not None:
        comments[record_id.name] = "record_id: unique in the sample"
    notes = list(id_notes) + _sample_notes(event, records)
    table = f"file://{default_data_dir() / 'lake' / name}"
    local = source.startswith("file://")
    entry: dict[str, Any] = {
        "source": relative_url(source, base) if local else source,
        "format": fmt_name,
    }
    if fmt_name == "csv":  # what the sample was read with, written out: the user can see it
        entry["csv"] = {
            "header": csv_format.header,
            "delimiter": csv_format.delimiter,
            "quote": csv_format.quote,
            "escape": csv_format.escape,
        }
    entry.update(
        schema=schema,
        # Written out, not left to the default: a field the sample did not hold becomes a new
        # column when it comes; the user sees the choice and can change it.
        schema_evolution=ADD,
        # Written out too: how the table is published (Iceberg or Hive manifests) is visible.
        table_format=DEFAULT_TABLE_FORMAT,
    )
    entry.update(
        event_time=event.name,
        timezone=args.timezone,
        **({"record_id": record_id.name} if record_id is not None else {}),
        # With a record id, the policy written out: each key once, the first committed.
        **({"dedupe": {"mode": FIRST, "scope": DATE}} if record_id is not None else {}),
        table=args.table or relative_url(table, base),
        quarantine=args.quarantine or relative_url(table + "_quarantine", base),
    )
    return Inferred(name, entry, comments, notes, _sample_summary(source, fmt, sample, records))


def _sample_records(
    fmt_name: str, csv_format: CsvFormat, sample: SourceSample, lines: dict[int, list[str]]
) -> SampleRecords:
    """The sample parsed as the runtime parses it; an error when no record parses."""
    records: SampleRecords
    if fmt_name == "csv":
        records = parse_csv({o.key: o.text for o in sample.sampled if o.text}, csv_format)
    else:
        records = parse_jsonl(line for i in sorted(lines) for line in lines[i])
    if records.records == 0:
        examples = "; ".join(repr(e) for e in records.malformed_examples)
        what = "JSON lines" if fmt_name == "jsonl" else "CSV records under its header"
        raise SourceInferenceError(
            f"no record in the sample parses as {what} ({records.malformed} lines, e.g. "
            f"{examples}); --format says which format it is"
        )
    return records


def _sample_notes(event: Column, records: SampleRecords) -> list[str]:
    """What the user should know about the sample: naive timestamps, malformed records."""
    notes = []
    if event.naive_timestamps:
        notes.append(
            f"{event.name} values carry no UTC offset: they are read as UTC; --timezone "
            "only sets the zone a record's table date is taken in"
        )
    if records.malformed:
        notes.append(
            f"{records.malformed} sampled records are malformed (they go to quarantine), e.g. "
            f"{records.malformed_examples[0]!r}"
        )
    return notes


def _sample_summary(
    source: str, fmt: ObjectFormat, sample: SourceSample, records: SampleRecords
) -> str:
    """`<source>: 12 objects, 5 sampled (jsonl, gzip): 400 records, 7 columns`."""
    gz = ", gzip" if fmt.gzip else ""
    listed = f"{len(sample.listed)}{'' if sample.complete else '+'}"
    return (
        f"{source}: {listed} objects, {len(sample.sampled)} sampled ({fmt.format or 'jsonl'}{gz}): "
        f"{records.records} records, {len(records.columns)} columns"
    )


def render_entry(name: str, entry: dict[str, Any], comments: dict[str, str], indent: int) -> str:
    """The entry as YAML text at `indent` spaces (a stream under `streams:`), one field a line,
    a note beside a schema column as a comment. Scalars are quoted by YAML itself: column
    names may hold spaces, colons or any character a CSV header has."""
    pad, step = " " * indent, " " * indent  # a file indented by 4 nests by 4
    out = [f"{pad}{_scalar(name)}:"]
    for key, value in entry.items():
        if isinstance(value, dict):
            out.append(f"{pad}{step}{key}:")
            for sub, subvalue in value.items():
                note = f"  # {comments[sub]}" if key == "schema" and sub in comments else ""
                out.append(f"{pad}{step * 2}{_scalar(sub)}: {_scalar(subvalue)}{note}")
        else:
            out.append(f"{pad}{step}{key}: {_scalar(value)}")
    return "\n".join(out) + "\n"


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.removesuffix("\n").removesuffix("\n...").strip()


_STREAMS_KEY = re.compile(r"^streams:\s*(#.*)?$")


def add_entry(text: str, name: str, entry_text_at: Callable[[int], str], replace: bool) -> str:
    """`text` (a streams file) with the entry added at the end of its `streams:` block (or
    replacing the block of stream `name`). `entry_text_at(indent)` renders the entry at the
    file's own indentation. Only lines of that block change: comments elsewhere stay."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines) if _STREAMS_KEY.match(line)), None)
    if start is None:
        if any(line.startswith("streams:") for line in lines):
            raise SourceInferenceError(
                "the streams file's `streams:` is not a block mapping (one stream a line): "
                "add the entry printed below yourself"
            )
        return "".join(lines) + "streams:\n" + entry_text_at(2)
    end = start + 1  # the block: up to the next line at column 0 that is not blank/comment
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1  # trailing blank lines and column-0 comments belong after the block
    children = [
        ln for ln in lines[start + 1 : end] if ln.strip() and not ln.lstrip().startswith("#")
    ]
    indent = len(children[0]) - len(children[0].lstrip(" ")) if children else 2
    block = entry_text_at(indent)
    if replace:
        own = re.compile(rf"^ {{{indent}}}['\"]?{re.escape(name)}['\"]?:\s*(#.*)?$")
        first = next((i for i in range(start + 1, end) if own.match(lines[i].rstrip("\n"))), None)
        if first is None:
            raise SourceInferenceError(
                f"stream {name!r} is not written one field a line under `streams:`: remove it "
                "yourself, then run `leasehold init` again"
            )
        last = first + 1
        while last < end and (
            not lines[last].strip() or len(lines[last]) - len(lines[last].lstrip(" ")) > indent
        ):
            last += 1
        while last > first + 1 and not lines[last - 1].strip():
            last -= 1
        return "".join(lines[:first]) + block + "".join(lines[last:])
    return "".join(lines[:end]) + block + "".join(lines[end:])


def write_entry(
    streams_file: Path, inferred: Inferred, *, replace: bool, spark: Any, staged: Path
) -> str:
    """Write the entry into `streams_file` once it loads and reads: the new file is written
    beside it (relative URLs resolve against its directory), loaded by the real parser, the
    sample read with it; then moved into place. Returns the entry's text."""
    from resources.ingestion.stream_sampling import trial_read

    old = streams_file.read_text(encoding="utf-8") if streams_file.exists() else HEADER
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    source = inferred.entry["source"]

    def rendered(indent: int) -> str:
        comment = " " * indent + f"# leasehold init {source} ({stamp}); edit freely\n"
        return comment + render_entry(inferred.name, inferred.entry, inferred.comments, indent)

    new = add_entry(old, inferred.name, rendered, replace)
    streams_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{streams_file.name}.", suffix=".tmp", dir=streams_file.parent
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        config = load_streams(tmp)[inferred.name]
        check_trial(config, trial_read(spark, config, staged), inferred)
        os.replace(tmp, streams_file)
    finally:
        tmp.unlink(missing_ok=True)
    return rendered(2).split("\n", 1)[1]


def check_trial(config: StreamConfig, reasons: Counter[str | None], inferred: Inferred) -> None:
    """Refuse an entry under which most sampled records (more than half) would go to
    quarantine, with why; note what a run would quarantine."""
    total = sum(reasons.values())
    good = reasons.get(None, 0)
    bad = ", ".join(f"{why}: {n}" for why, n in reasons.most_common() if why is not None)
    if good == 0:
        raise SourceInferenceError(
            f"read as the inferred stream, none of the {total} sampled records reaches the "
            f"table ({bad}); --format, --event-time or the data itself must change"
        )
    if 2 * (total - good) > total:
        raise SourceInferenceError(
            f"read as the inferred stream, {total - good} of the {total} sampled records would "
            f"go to quarantine ({bad}); --format, --event-time or the data itself must change"
        )
    line = f"trial read of the sample: {good} of {total} records to the table"
    inferred.notes.append(line + (f", the rest to quarantine ({bad})" if bad else ""))


def positive(value: str) -> int:
    """argparse type of a count of at least one (a bad one is exit 2)."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive count (1, 2, ...)")
    return int(value)


def add_init_parser(add: Any) -> None:
    """`leasehold init`'s command line (`add` is `build_parser`'s subcommand factory)."""
    init = add(
        "init",
        help="infer a stream entry (format, schema, event time, record id) from a sample of "
        "a directory or s3:// prefix and add it to the streams file",
    )
    init.add_argument("source", help="a directory, file:// URL or s3://bucket/prefix")
    init.add_argument("--name", default=None, help="the stream's name (default: from the source)")
    init.add_argument(
        "--format", choices=("jsonl", "csv"), default=None, help="the objects' format"
    )
    init.add_argument(
        "--event-time", metavar="COL", default=None, help="the column holding each record's time"
    )
    init.add_argument(
        "--record-id", metavar="COL", default=None, help="the column unique per record, or `none`"
    )
    init.add_argument(
        "--timezone", metavar="ZONE", default="UTC", help="zone of the table's dates (default UTC)"
    )
    init.add_argument(
        "--sample-objects",
        metavar="N",
        type=positive,
        default=20,
        help="objects to sample (default 20)",
    )
    init.add_argument(
        "--streams-file",
        metavar="FILE",
        default=None,
        help=f"the file to add the entry to (default: LEASEHOLD_STREAMS, else {DEFAULT_PATH})",
    )
    init.add_argument(
        "--table", metavar="URL", default=None, help="table URL (default: the data dir's lake/NAME)"
    )
    init.add_argument(
        "--quarantine",
        metavar="URL",
        default=None,
        help="quarantine URL (default: TABLE_quarantine)",
    )
    init.add_argument(
        "--force", action="store_true", help="replace an existing stream of the same name"
    )
    init.set_defaults(fn=cmd_init)
