"""`leasehold table`, `gc`, `check` and `status` on a table published the way a run publishes
it: small objects committed in the ledger, the `Publisher` writing a live manifest version and
pointing the local catalog at it, a merge, the partition closed and switched to its merged
object. The table commands read through the catalog and the manifests only; `gc` reports, then
deletes, what the switch superseded."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.catalog.glue import GlueCatalog
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.cli.exit_status import EXIT_CONFIG, EXIT_FAILURE
from resources.cli.main import main
from resources.ledger.merge import MergedObject, merged_object_name
from resources.ledger.model import SmallObject
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.publication.outcome import CATALOG_REPAIRED, PUBLISHED
from resources.publication.publisher import Publisher
from resources.stores import CoordinationStore, build_store
from resources.stores.settings import StoreSettings
from resources.streams import LakeSettings, StreamConfig
from tests.support.aws_server import LocalAwsServer
from tests.support.merge_ledger import acquire_job, merge

STREAM, DT, DT2 = "events", "2026-01-01", "2026-01-02"
SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("user_id", pa.string()),
        ("amount", pa.float64()),
        ("event_time", pa.timestamp("us", tz="UTC")),
    ]
)
STREAMS_YAML = """
streams:
  events:
    source: file://sources
    format: jsonl
    schema: {event_id: string, user_id: string, amount: double, event_time: timestamp}
    event_time: event_time
    record_id: event_id
    table: file://lake/events
    table_format: manifests
    quarantine: file://lake/events_quarantine
"""


@dataclass
class Published:
    root: Path
    store: CoordinationStore
    config: StreamConfig
    objects: ObjectStore
    catalog_path: Path

    def publisher(self) -> Publisher:
        return Publisher(
            self.config,
            self.store,
            self.objects,
            HiveManifestsTarget(LocalCatalog(self.catalog_path)),
        )

    def publish(self, dt: str) -> None:
        outcome = self.publisher().publish_one(dt)
        assert outcome.outcome == PUBLISHED, outcome.message

    def small(self, dt: str, first: int, rows: int, version: int = 1) -> SmallObject:
        """A Parquet object of `rows` rows (event ids `first`...) under the table's prefix,
        as written with schema `version` (the ledger's record of it: the columns are the
        same)."""
        table = pa.table(
            {
                "event_id": [f"e{first + i}" for i in range(rows)],
                "user_id": [f"u{i % 3}" for i in range(rows)],
                "amount": [float(i) for i in range(rows)],
                "event_time": pa.array([1_767_225_600_000_000 + i for i in range(rows)]).cast(
                    pa.timestamp("us", tz="UTC")
                ),
            },
            schema=SCHEMA,
        )
        path = self.root / "lake" / "events" / f"dt={dt}" / f"obj-{first}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        return SmallObject(STREAM, dt, f"file://{path}", path.stat().st_size, rows, version)

    def commit(self, *objects: SmallObject) -> None:
        sid = self.store.source_identifier(STREAM)
        key = objects[0].url
        self.store.create_partitions(sid, [key])
        lease = self.store.acquire(sid, key, "ingester", 60.0)
        self.store.commit(lease.token, objects, merge_after_s={STREAM: 3600.0})

    def merge_all(self, dt: str) -> MergedObject:
        """One merged object of every small object of `dt`, committed under the job's lease."""
        smalls = sorted(self.store.ledger_objects(STREAM, dt), key=lambda o: o.object_id)
        table = pa.concat_tables(pq.read_table(o.url[len("file://") :]) for o in smalls)
        upper = smalls[-1].object_id
        path = self.root / "lake/events/merged" / f"dt={dt}" / merged_object_name(0, upper)
        path.parent.mkdir(parents=True)
        pq.write_table(table, path)
        merged = MergedObject(0, upper, f"file://{path}", path.stat().st_size, table.num_rows)
        job = acquire_job(self.store, dt=dt)  # merge_ledger's table is "events" too
        self.store.commit_merge(job.token, merge(0, merged, dt=dt))
        return merged

    def with_two_dates(self) -> Published:
        """DT: 3 small objects (10, 20, 30 rows), DT2: one of 5 rows, each published live."""
        self.commit(self.small(DT, 1, 10), self.small(DT, 11, 20))
        self.commit(self.small(DT, 31, 30))
        self.commit(self.small(DT2, 100, 5))
        self.publish(DT)
        self.publish(DT2)
        return self

    def switch(self, dt: str) -> MergedObject:
        """Merged, closed and published again: the partition now serves its merged object."""
        merged = self.merge_all(dt)
        self.store.close_partition(STREAM, dt)
        self.publish(dt)
        return merged


def published_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type[Published], streams_yaml: str
) -> Published:
    """A `kind` over a fresh SQLite store and the streams file `streams_yaml`, with DT and DT2
    published (`with_two_dates`); the CLI's environment names the same streams file, store
    and catalog."""
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    (tmp_path / "sources").mkdir()
    streams = tmp_path / "streams.yaml"
    streams.write_text(streams_yaml)
    variables = {
        "LEASEHOLD_DATA_DIR": str(tmp_path / "data"),
        "LEASEHOLD_STREAMS": str(streams),
        "LEASEHOLD_SQLITE_PATH": str(tmp_path / "leasehold.db"),
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    store = build_store(
        StoreSettings(backend="sqlite", sqlite_path=variables["LEASEHOLD_SQLITE_PATH"])
    )
    config = LakeSettings.from_env().streams()[STREAM]
    published = kind(
        tmp_path,
        store,
        config,
        object_store_for(config.table),
        tmp_path / "data" / "catalog.json",
    )
    return published.with_two_dates()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Published]:
    """DT: 3 small objects (10, 20, 30 rows), published live; DT2: one of 5 rows, published
    live, into Hive partitions of the local catalog file."""
    published = published_env(tmp_path, monkeypatch, Published, STREAMS_YAML)
    yield published
    published.store.close_store()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def catalog_where(env: Published) -> str:
    return (
        f"the local catalog {env.catalog_path} (LEASEHOLD_DATA_DIR; LEASEHOLD_CATALOG_PATH unset)"
    )


def test_table_ls_lists_the_catalogs_partitions(env: Published, capsys) -> None:
    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [
        (r["dt"], r["seq"], r["kind"], r["switched"], r["upper"], r["files"]) for r in rows
    ] == [
        (DT, 1, "live", False, 3, 3),
        (DT2, 1, "live", False, 1, 1),
    ]
    assert [r["schema_versions"] for r in rows] == [{"min": 1, "max": 1}] * 2
    catalog = LocalCatalog(env.catalog_path)
    assert [r["location"] for r in rows] == [
        catalog.partition(STREAM, d).location for d in (DT, DT2)
    ]

    env.switch(DT)
    code, out, err = run(capsys, "table", "ls", STREAM)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"table {STREAM}: 2 partitions published (1 switched to merged objects, 1 live), "
        f"{catalog_where(env)}"
    )
    assert lines[1].split() == ["dt", "seq", "version", "files", "schema", "location"]
    assert lines[2].split()[:6] == [DT, "2", "merged", "3", "1", "v1"]
    assert lines[3].split()[:6] == [DT2, "1", "live", "1", "1", "v1"]
    assert lines[2].endswith(catalog.partition(STREAM, DT).location)


def test_table_ls_shows_the_schema_versions_of_the_rows_each_version_serves(
    env: Published, capsys
) -> None:
    """From the ledger objects the published version covers: an object committed since (a
    newer version's) shows once a publication covers it, and a merged version shows what
    its merged objects hold."""
    env.commit(env.small(DT, 100, 4, version=2))
    env.commit(env.small(DT2, 200, 3, version=2))
    env.commit(env.small(DT2, 300, 3, version=3))
    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert (code, err) == (0, "")
    assert [(r["upper"], r["schema_versions"]) for r in json.loads(out)] == [
        (3, {"min": 1, "max": 1}),  # not yet published: objects 4 (v2) and up
        (1, {"min": 1, "max": 1}),
    ]
    env.publish(DT)
    env.publish(DT2)
    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert (code, err) == (0, "")
    assert [(r["upper"], r["schema_versions"]) for r in json.loads(out)] == [
        (4, {"min": 1, "max": 2}),
        (3, {"min": 1, "max": 3}),
    ]
    env.switch(DT)
    code, out, err = run(capsys, "table", "ls", STREAM)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2].split()[:6] == [DT, "3", "merged", "4", "1", "v1..v2"]
    assert lines[3].split()[:6] == [DT2, "2", "live", "3", "3", "v1..v3"]


def test_table_ls_without_a_readable_store_shows_the_catalog_and_says_why(
    env: Published, monkeypatch, capsys
) -> None:
    """The store is not where the environment says (a user with the catalog only): the
    catalog's answer stands, the versions are unknown, and stderr says why."""
    missing = env.root / "elsewhere" / "leasehold.db"
    monkeypatch.setenv("LEASEHOLD_SQLITE_PATH", str(missing))
    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["dt"], r["files"], r["schema_versions"]) for r in rows] == [
        (DT, 3, None),
        (DT2, 1, None),
    ]
    assert err.splitlines() == [
        f"leasehold: schema versions not shown: no lease store: SQLite file {missing} "
        "(LEASEHOLD_SQLITE_PATH); `leasehold run` creates it"
    ]
    code, out, _ = run(capsys, "table", "ls", STREAM)
    assert code == 0 and out.splitlines()[2].split()[:6] == [DT, "1", "live", "3", "3", "?"]
    assert not missing.parent.exists()


def test_table_files_lists_the_manifests_urls_and_lengths(env: Published, capsys) -> None:
    code, out, err = run(capsys, "table", "files", STREAM, DT, "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    smalls = sorted(env.store.ledger_objects(STREAM, DT), key=lambda o: o.object_id)
    assert document["seq"] == 1
    assert document["files"] == [{"url": o.url, "contentLength": o.content_length} for o in smalls]

    merged = env.switch(DT)
    code, out, err = run(capsys, "table", "files", STREAM, DT)
    assert (code, err) == (0, "")
    location = LocalCatalog(env.catalog_path).partition(STREAM, DT).location
    assert out.splitlines() == [
        f"{merged.content_length:>12}  {merged.url}",
        f"1 files, {merged.content_length} bytes: {location} (seq 2)",
    ]


def test_table_read_returns_the_rows_through_the_manifest(env: Published, capsys) -> None:
    code, out, err = run(capsys, "table", "read", STREAM, DT, "--json")
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted(int(r["event_id"][1:]) for r in rows) == list(range(1, 61))
    assert rows[0] == {
        "event_id": "e1",
        "user_id": "u0",
        "amount": 0.0,
        "event_time": "2026-01-01T00:00:00+00:00",
    }

    code, out, err = run(capsys, "table", "read", STREAM, DT, "--limit", "4")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["event_id", "user_id", "amount", "event_time"]
    assert [line.split()[0] for line in lines[1:-1]] == ["e1", "e2", "e3", "e4"]
    assert lines[-1] == "(4 rows)"

    env.switch(DT)  # the same rows, now from the one merged object
    code, out, _ = run(capsys, "table", "read", STREAM, DT, "--json")
    assert sorted(int(json.loads(line)["event_id"][1:]) for line in out.splitlines()) == list(
        range(1, 61)
    )


def test_a_manifests_table_keeps_no_history_to_list_or_read(env: Published, capsys) -> None:
    for args in (("history", STREAM), ("read", STREAM, DT, "--as-of", "1")):
        code, out, err = run(capsys, "table", *args)
        assert (code, out) == (EXIT_FAILURE, "")
        assert err.splitlines() == [
            "leasehold: a 'manifests' table keeps no snapshot history: time travel needs "
            "`table_format: iceberg` (docs/concepts/table-formats.md)"
        ]


def test_unknown_stream_and_unpublished_date_are_one_line_naming_the_catalog(
    env: Published, capsys
) -> None:
    code, out, err = run(capsys, "table", "ls", "clicks")
    assert (code, out) == (EXIT_FAILURE, "")
    assert err.splitlines() == [
        f"leasehold: no table 'clicks' in {catalog_where(env)} (it has events)"
    ]

    for command in ("files", "read"):
        code, out, err = run(capsys, "table", command, STREAM, "2026-01-03")
        assert (code, out) == (EXIT_FAILURE, "")
        assert err.splitlines() == [
            f"leasehold: {STREAM} dt=2026-01-03 is not published in {catalog_where(env)} "
            f"(published: 2 dates, {DT} to {DT2})"
        ]


def test_glue_is_read_the_same_way_and_named_in_errors(
    env: Published, aws_server: LocalAwsServer, monkeypatch, capsys
) -> None:
    """The same ledger published to Glue (over HTTP to the loopback server): the commands read
    it through Glue once LEASEHOLD_CATALOG says so."""
    database = f"db_{uuid.uuid4().hex[:12]}"
    glue = GlueCatalog(database, region="us-east-1", endpoint_url=aws_server.endpoint_url)
    publisher = Publisher(env.config, env.store, env.objects, HiveManifestsTarget(glue))
    assert [o.outcome for o in publisher.publish([DT, DT2])] == [CATALOG_REPAIRED] * 2
    monkeypatch.setenv("LEASEHOLD_CATALOG", "glue")
    monkeypatch.setenv("LEASEHOLD_GLUE_DATABASE", database)
    monkeypatch.setenv("LEASEHOLD_GLUE_ENDPOINT_URL", aws_server.endpoint_url)

    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert (code, err) == (0, "")
    assert [
        (r["dt"], r["seq"], r["kind"], r["files"], r["schema_versions"]) for r in json.loads(out)
    ] == [
        (DT, 1, "live", 3, {"min": 1, "max": 1}),
        (DT2, 1, "live", 1, {"min": 1, "max": 1}),
    ]
    code, out, _ = run(capsys, "table", "read", STREAM, DT2, "--json")
    assert (code, len(out.splitlines())) == (0, 5)

    code, out, err = run(capsys, "table", "files", STREAM, "2026-01-03")
    assert (code, out) == (EXIT_FAILURE, "")
    assert err.splitlines() == [
        f"leasehold: {STREAM} dt=2026-01-03 is not published in the Glue database "
        f"{database!r} in us-east-1 at {aws_server.endpoint_url} "
        f"(published: 2 dates, {DT} to {DT2})"
    ]


def test_a_missing_catalog_file_is_not_created(env: Published, monkeypatch, capsys) -> None:
    missing = env.root / "elsewhere" / "catalog.json"
    monkeypatch.setenv("LEASEHOLD_CATALOG_PATH", str(missing))
    code, out, err = run(capsys, "table", "ls", STREAM)
    assert (code, out) == (EXIT_FAILURE, "")
    assert err.splitlines() == [
        f"leasehold: no catalog: the local catalog {missing} (LEASEHOLD_CATALOG_PATH) does not "
        "exist; publication creates it (`leasehold run`)"
    ]
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"LEASEHOLD_CATALOG": "hive"}, "catalog"),
        (
            {"LEASEHOLD_CATALOG": "glue", "LEASEHOLD_GLUE_ENDPOINT_URL": "glue.local:4566"},
            "glue_endpoint_url",
        ),
    ],
)
def test_bad_catalog_settings_exit_2_naming_the_field(
    env: Published, monkeypatch, capsys, variables: dict[str, str], field: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    for args in (["table", "ls", STREAM], ["check"], ["config"]):
        code, out, err = run(capsys, *args)
        assert (code, out) == (EXIT_CONFIG, ""), args
        (line,) = err.splitlines()
        assert line.startswith(f"leasehold: invalid catalog configuration: {field}: "), line


def test_a_bad_date_or_limit_is_a_command_line_error(env: Published, capsys) -> None:
    for args, error in (
        (["table", "files", STREAM, "2026-13-01"], "'2026-13-01' is not a date (YYYY-MM-DD)"),
        (["table", "read", STREAM, "01/01/2026"], "'01/01/2026' is not a date (YYYY-MM-DD)"),
        (["table", "read", STREAM, DT, "--limit", "-1"], "'-1' is not a count (0, 1, 2, ...)"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == EXIT_CONFIG
        assert capsys.readouterr().err.splitlines()[-1].endswith(error)


def test_gc_dry_run_reports_then_gc_deletes_what_the_switch_superseded(
    env: Published, monkeypatch, capsys
) -> None:
    smalls = [o.url[len("file://") :] for o in env.store.ledger_objects(STREAM, DT)]
    live_version = LocalCatalog(env.catalog_path).partition(STREAM, DT).location
    env.switch(DT)
    other = [o.url[len("file://") :] for o in env.store.ledger_objects(STREAM, DT2)]
    size = sum(Path(p).stat().st_size for p in smalls)
    orphan = env.root / "lake/events" / f"dt={DT}" / "attempt-that-died.parquet"
    orphan.write_bytes(b"PAR1 never committed")

    # The default safety delay (a day) keeps everything a reader of the old version may need.
    code, out, err = run(capsys, "gc", "--json")
    assert (code, err) == (0, "")
    (report,) = json.loads(out)
    assert (report["table"], report["files"], report["dryRun"]) == (STREAM, 0, False)
    assert report["safetyDelaySeconds"] == 86400
    assert all(Path(p).exists() for p in smalls) and orphan.exists()

    monkeypatch.setenv("LEASEHOLD_GC_SAFETY_DELAY_SECONDS", "0")
    code, out, err = run(capsys, "gc", "--dry-run", "--json")
    assert (code, err) == (0, "")
    (report,) = json.loads(out)
    assert report["dryRun"] is True
    by_reason = report["byReason"]
    small_reasons = [r for r, n in by_reason.items() if n == {"files": 3, "bytes": size}]
    assert len(small_reasons) == 1, by_reason  # the three small objects the merge covers
    assert report["files"] >= 3 and report["bytes"] >= size
    assert all(Path(p).exists() for p in smalls)  # a dry run deletes nothing

    code, out, err = run(capsys, "gc", "--stream", STREAM, "--dry-run")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"{STREAM}: would delete {report['files']} files, {report['bytes']} bytes "
        "(safety delay 0 s)"
    )
    assert f"  {small_reasons[0]}: 3 files, {size} bytes" in lines
    assert "  orphan of a failed attempt: 1 files, 20 bytes" in lines
    assert orphan.exists()

    code, out, err = run(capsys, "gc")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"{STREAM}: deleted {report['files']} files, {report['bytes']} bytes (safety delay 0 s)"
    )
    assert not any(Path(p).exists() for p in smalls) and not orphan.exists()
    version_dir = Path(live_version[len("file://") :]).parent  # the superseded live version
    assert not (version_dir / "manifest.json").exists()
    assert not (version_dir / "symlink" / "manifest").exists()
    assert "  forgot 1 superseded publication records" in lines
    assert [p.seq for p in env.store.publications(STREAM, DT)] == [2]
    assert all(Path(p).exists() for p in other)  # DT2 is live: its small objects are read

    # Readers are served exactly the same: the merged object and DT2's small object.
    code, out, _ = run(capsys, "table", "read", STREAM, DT, "--json")
    assert (code, len(out.splitlines())) == (0, 60)
    code, out, _ = run(capsys, "table", "read", STREAM, DT2, "--json")
    assert (code, len(out.splitlines())) == (0, 5)
    code, out, _ = run(capsys, "gc", "--json")
    assert (code, json.loads(out)[0]["files"]) == (0, 0)  # nothing left to collect


def test_gc_of_an_unknown_stream_is_exit_2(env: Published, capsys) -> None:
    code, out, err = run(capsys, "gc", "--stream", "clicks")
    assert (code, out) == (EXIT_CONFIG, "")
    assert err.startswith("leasehold: invalid configuration: --stream: 'clicks' is not a stream")


def test_check_runs_the_publication_checks(env: Published, capsys) -> None:
    env.switch(DT)
    code, out, err = run(capsys, "check", "--stream", STREAM, "--json")
    assert err == ""
    verdicts = {row["check"]: row["verdict"] for row in json.loads(out)}
    publication = [
        "manifest_entries_exist",
        "switch_coverage",
        "published_rows",
        "catalog_current",
        "served_files",
        "publication_lag",
    ]
    assert {name: verdicts.get(name) for name in publication} == dict.fromkeys(publication, "PASS")
    assert list(verdicts)[-6:] == publication  # after the ingestion and compaction checks

    # The catalog moved behind the ledger's back: catalog_current fails (exit 4).
    catalog = LocalCatalog(env.catalog_path)
    stale = catalog.partition(STREAM, DT2)
    catalog.publish_partition(STREAM, DT2, stale.location.replace("live-", "live-x"), stale.seq + 5)
    code, out, _ = run(capsys, "check", "--stream", STREAM)
    assert code == 4
    (failed,) = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.split()[:3] == ["FAIL", STREAM, "catalog_current"]


def test_status_shows_each_partitions_published_version(env: Published, capsys) -> None:
    env.switch(DT)
    env.commit(env.small(DT2, 200, 7))  # DT2: one id past what readers are served
    code, out, err = run(capsys, "status", "--json")
    assert (code, err) == (0, "")
    (table,) = json.loads(out)["tables"]
    assert (table["published"], table["switched"]) == (2, 1)
    by_date = {row["dt"]: row for row in table["byDate"]}
    assert by_date[DT]["publication"] == {
        "seq": 2, "switched": True, "upper": 3, "currentManifestVersion": 3
    }  # fmt: skip
    assert by_date[DT]["publicationDue"] is None
    assert by_date[DT2]["publication"]["upper"] == 1
    assert by_date[DT2]["publicationDue"] == "live"

    code, out, _ = run(capsys, "status")
    lines = out.splitlines()
    (dt_line,) = [line for line in lines if line.startswith(f"  dt={DT} ")]
    assert dt_line.endswith("; published seq 2 (merged up to 3)")
    (dt2_line,) = [line for line in lines if line.startswith(f"  dt={DT2} ")]
    assert dt2_line.endswith("; published seq 1 (live up to 1), publication as live due")


def test_the_readmes_duckdb_snippet_reads_the_published_partition(env: Published) -> None:
    """docs/concepts/querying.md: its SQL, with the location `table ls` shows, counts the
    partition's committed rows."""
    import duckdb

    docs = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "querying.md"
    section = docs.read_text(encoding="utf-8")
    sql = section[section.index("```sql\n") + len("```sql\n") :]
    sql = sql[: sql.index("```")]
    location = LocalCatalog(env.catalog_path).partition(STREAM, DT).location
    example = "data/lake/events/_manifests/dt=2026-01-01/<version>/symlink/"
    assert example in sql
    statements = sql.replace(example, location[len("file://") :]).split(";")
    with duckdb.connect() as con:
        for statement in statements[:-2]:
            con.execute(statement)
        (count,) = con.execute(statements[-2]).fetchone()  # type: ignore[misc]
    assert count == 60
