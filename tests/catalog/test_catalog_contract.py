"""One contract for both catalogs: the local file and AWS Glue (over HTTP, against the loopback
AWS server through a proxy that pages listings as AWS does). Then what only one of them has:
the local file's cross-process locking and corruption handling; Glue's retries and its table
layout."""

from __future__ import annotations

import json
import multiprocessing
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from resources.catalog.base import (
    OUTPUT_FORMAT,
    PARQUET_SERDE,
    SYMLINK_INPUT_FORMAT,
    Catalog,
    CatalogError,
    CatalogPartition,
    Column,
    ColumnTypeConflictError,
    TableDefinition,
)
from resources.catalog.glue import GlueCatalog
from resources.catalog.glue_items import MANAGED, SEQ
from resources.catalog.local import LocalCatalog
from resources.retry import RetryPolicy
from tests.support import catalog_child
from tests.support.aws_server import LocalAwsServer
from tests.support.glue_proxy import GlueProxy

EVENTS = TableDefinition(
    name="events",
    columns=(Column("id", "string"), Column("ts", "timestamp"), Column("n", "bigint")),
    location="s3://bucket/tables/events/",
)
QUICK = RetryPolicy(max_attempts=4, base_delay_s=0.001, max_delay_s=0.005)


def loc(dt: str, seq: int) -> str:
    return catalog_child.location(dt, seq)


def glue_catalog(proxy: GlueProxy, database: str | None = None) -> GlueCatalog:
    return GlueCatalog(
        database or f"db_{uuid.uuid4().hex[:12]}",
        region="us-east-1",
        endpoint_url=proxy.endpoint_url,
        retry=QUICK,
    )


@pytest.fixture(params=["local", "glue"])
def make_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Catalog]:
    """Catalogs of the parametrized backend; each call opens the same catalog afresh."""
    if request.param == "local":
        path = tmp_path / "catalog" / "catalog.json"
        return lambda: LocalCatalog(path)
    proxy = request.getfixturevalue("glue_proxy")
    database = f"db_{uuid.uuid4().hex[:12]}"
    return lambda: glue_catalog(proxy, database)


@pytest.fixture
def catalog(make_catalog: Callable[[], Catalog]) -> Catalog:
    return make_catalog()


# -- the contract -------------------------------------------------------------------------------


def test_empty_catalog(catalog: Catalog) -> None:
    assert catalog.tables() == []
    assert catalog.table("events") is None


def test_ensure_table_is_idempotent_and_updates(make_catalog: Callable[[], Catalog]) -> None:
    catalog = make_catalog()
    catalog.ensure_table(EVENTS)
    catalog.ensure_table(EVENTS)
    assert catalog.table("events") == EVENTS
    assert catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 1), 1)

    wider = TableDefinition(
        name="events",
        columns=(*EVENTS.columns, Column("country", "string")),
        location="s3://bucket/elsewhere/events/",
    )
    make_catalog().ensure_table(wider)
    again = make_catalog()
    assert again.table("events") == wider
    assert again.tables() == ["events"]
    # Changing the table leaves its partitions as they were.
    assert again.partition("events", "2024-01-01") == CatalogPartition(
        "events", "2024-01-01", loc("2024-01-01", 1), 1
    )


def test_ensure_table_never_removes_a_column(make_catalog: Callable[[], Catalog]) -> None:
    """A publisher holding an older schema version ensures the table after a newer one grew
    it: the newer columns stay. Columns are merged by name: the table's own, in its order,
    then the definition's it lacks."""
    wider = TableDefinition("events", (*EVENTS.columns, Column("country", "string")), "s3://b/e/")
    make_catalog().ensure_table(wider)
    make_catalog().ensure_table(EVENTS)  # the older definition, written last
    assert make_catalog().table("events") == TableDefinition(
        "events", wider.columns, EVENTS.location
    )

    reordered = TableDefinition(
        "events", (Column("n", "bigint"), Column("device", "string"), Column("id", "string")), "x/"
    )
    make_catalog().ensure_table(reordered)
    assert make_catalog().table("events") == TableDefinition(
        "events", (*wider.columns, Column("device", "string")), "x/"
    )


def test_add_columns_appends_only_what_the_table_lacks(
    make_catalog: Callable[[], Catalog],
) -> None:
    catalog = make_catalog()
    catalog.ensure_table(EVENTS)
    assert catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 1), 1)
    asked = [Column("country", "string"), Column("id", "string"), Column("device", "string")]

    added = catalog.add_columns("events", asked)

    assert added == [Column("country", "string"), Column("device", "string")]
    grown = (*EVENTS.columns, Column("country", "string"), Column("device", "string"))
    assert make_catalog().table("events") == TableDefinition("events", grown, EVENTS.location)
    # Idempotent: nothing more to add, nothing written; a subset adds nothing either.
    assert make_catalog().add_columns("events", asked) == []
    assert make_catalog().add_columns("events", [Column("ts", "timestamp")]) == []
    assert make_catalog().add_columns("events", []) == []
    assert make_catalog().table("events") == TableDefinition("events", grown, EVENTS.location)
    assert make_catalog().partitions("events") == [
        CatalogPartition("events", "2024-01-01", loc("2024-01-01", 1), 1)
    ]


def test_a_column_held_with_another_type_is_never_retyped(
    make_catalog: Callable[[], Catalog],
) -> None:
    catalog = make_catalog()
    catalog.ensure_table(EVENTS)
    with pytest.raises(ColumnTypeConflictError, match=r"'n' as bigint, not string"):
        catalog.add_columns("events", [Column("extra", "int"), Column("n", "string")])
    with pytest.raises(ColumnTypeConflictError, match=r"'ts' as timestamp, not date"):
        catalog.ensure_table(
            TableDefinition("events", (Column("ts", "date"), Column("more", "int")), "s3://x/")
        )
    assert make_catalog().table("events") == EVENTS  # nothing written by either


def test_add_columns_to_a_missing_table_raises(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="events"):
        catalog.add_columns("events", [Column("country", "string")])
    catalog.ensure_table(EVENTS)
    with pytest.raises(CatalogError, match="clicks"):
        catalog.add_columns("clicks", [Column("country", "string")])


def test_writers_growing_the_table_at_once_lose_no_column(
    make_catalog: Callable[[], Catalog],
) -> None:
    """Several writers, each its own catalog client, add a column each while another ensures
    the table with its first definition over and over: every column lands, none is lost to a
    write decided on what another writer has since replaced."""
    make_catalog().ensure_table(EVENTS)
    names = [f"c{i}" for i in range(6)]
    go = threading.Barrier(len(names) + 1, timeout=60)
    errors: list[BaseException] = []

    def add(name: str) -> None:
        try:
            catalog = make_catalog()
            go.wait()
            catalog.add_columns("events", [Column(name, "string")])  # once: nothing repairs
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def ensure() -> None:
        try:
            catalog = make_catalog()
            go.wait()
            for _ in range(5):
                catalog.ensure_table(EVENTS)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in names]
    threads.append(threading.Thread(target=ensure))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    columns = make_catalog().table("events").columns  # type: ignore[union-attr]
    assert columns[:3] == EVENTS.columns
    assert sorted(c.name for c in columns[3:]) == names


def test_tables_are_sorted_and_separate(catalog: Catalog) -> None:
    for name in ("zebra", "alpha", "middle"):
        catalog.ensure_table(TableDefinition(name, EVENTS.columns, f"s3://b/{name}/"))
    assert catalog.tables() == ["alpha", "middle", "zebra"]
    assert catalog.publish_partition("alpha", "2024-01-01", loc("2024-01-01", 3), 3)
    assert catalog.partition("zebra", "2024-01-01") is None
    assert catalog.partitions("middle") == []


def test_publish_creates_then_only_newer_replaces(make_catalog: Callable[[], Catalog]) -> None:
    catalog = make_catalog()
    catalog.ensure_table(EVENTS)
    dt = "2024-03-05"
    assert catalog.partition("events", dt) is None

    assert catalog.publish_partition("events", dt, loc(dt, 2), 2) is True
    assert catalog.partition("events", dt) == CatalogPartition("events", dt, loc(dt, 2), 2)

    assert catalog.publish_partition("events", dt, loc(dt, 5), 5) is True
    newest = CatalogPartition("events", dt, loc(dt, 5), 5)
    assert make_catalog().partition("events", dt) == newest

    # Older or equal: refused, nothing written (not even the location of an equal seq).
    assert catalog.publish_partition("events", dt, loc(dt, 4), 4) is False
    assert catalog.publish_partition("events", dt, loc(dt, 1), 1) is False
    assert catalog.publish_partition("events", dt, "s3://bucket/other/symlink/", 5) is False
    assert make_catalog().partition("events", dt) == newest
    assert make_catalog().partitions("events") == [newest]


def test_partitions_by_dt(catalog: Catalog) -> None:
    catalog.ensure_table(EVENTS)
    dts = ["2024-01-03", "2023-12-31", "2024-01-01", "2024-01-02"]
    for i, dt in enumerate(dts):
        assert catalog.publish_partition("events", dt, loc(dt, i + 1), i + 1)
    assert [p.dt for p in catalog.partitions("events")] == sorted(dts)
    assert catalog.partition("events", "2024-01-01") == CatalogPartition(
        "events", "2024-01-01", loc("2024-01-01", 3), 3
    )
    assert catalog.partition("events", "2024-01-04") is None


def test_many_partitions(catalog: Catalog) -> None:
    """More than one listing page (the Glue proxy pages by 50, as AWS pages by 1000)."""
    catalog.ensure_table(EVENTS)
    dts = [f"2024-{m:02d}-{d:02d}" for m in range(1, 5) for d in range(1, 31)]
    assert len(dts) == 120
    for dt in dts:
        assert catalog.publish_partition("events", dt, loc(dt, 7), 7)
    listed = catalog.partitions("events")
    assert [p.dt for p in listed] == dts
    assert all(p == CatalogPartition("events", p.dt, loc(p.dt, 7), 7) for p in listed)


def test_unknown_table_raises(catalog: Catalog) -> None:
    catalog.ensure_table(EVENTS)
    assert catalog.table("clicks") is None
    with pytest.raises(CatalogError, match="clicks"):
        catalog.publish_partition("clicks", "2024-01-01", loc("2024-01-01", 1), 1)
    with pytest.raises(CatalogError, match="clicks"):
        catalog.partition("clicks", "2024-01-01")
    with pytest.raises(CatalogError, match="clicks"):
        catalog.partitions("clicks")
    assert catalog.tables() == ["events"]


# -- local only ---------------------------------------------------------------------------------


def test_local_missing_file_is_empty_and_reads_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "catalog.json"
    catalog = LocalCatalog(path)
    assert catalog.tables() == [] and catalog.table("events") is None
    assert not path.parent.exists()


def test_local_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    catalog = LocalCatalog(tmp_path / "catalog.json")
    catalog.ensure_table(EVENTS)
    catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 1), 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.json", "catalog.json.lock"]
    data = json.loads((tmp_path / "catalog.json").read_text())
    entry = data["tables"]["events"]["partitions"]["2024-01-01"]
    assert entry["seq"] == 1 and entry["location"] == loc("2024-01-01", 1)
    assert entry["updated_at"].startswith("20")


@pytest.mark.parametrize(
    "content",
    ['{"tables": {"events": ', "[]", '{"format": 1, "tables": {"events": {"location": 3}}}'],
)
def test_local_corrupt_file_names_the_path(tmp_path: Path, content: str) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(content)
    catalog = LocalCatalog(path)
    with pytest.raises(CatalogError, match=str(path)):
        catalog.tables()
    with pytest.raises(CatalogError, match=str(path)):
        catalog.ensure_table(EVENTS)
    assert path.read_text() == content  # a write never replaces what it could not read


def test_local_concurrent_publishers_never_go_back(tmp_path: Path) -> None:
    """Several processes publish the same partitions in different orders while another reads
    the file: every read parses, no partition's seq ever goes down, and each ends at the
    highest seq offered."""
    path = tmp_path / "catalog.json"
    LocalCatalog(path).ensure_table(EVENTS)
    dts = ["2024-01-01", "2024-01-02"]
    seqs = list(range(1, 101))
    ctx = multiprocessing.get_context("spawn")
    stop, go = ctx.Event(), ctx.Event()
    watcher = ctx.Process(
        target=catalog_child.watch, args=(str(path), "events", stop, str(tmp_path / "watch"))
    )
    watcher.start()
    publishers = [
        ctx.Process(
            target=catalog_child.publish,
            args=(str(path), "events", dts, seqs, seed, go, str(tmp_path / f"pub{seed}")),
        )
        for seed in range(4)
    ]
    for p in publishers:
        p.start()
    go.set()
    for p in publishers:
        p.join(120)
        assert p.exitcode == 0
    stop.set()
    watcher.join(60)
    assert watcher.exitcode == 0

    results = [json.loads((tmp_path / f"pub{seed}").read_text()) for seed in range(4)]
    assert [r["problems"] for r in results] == [[]] * 4
    # Every seq of a partition was written at most once (higher ones only), at least once.
    changed = sum(r["changed"] for r in results)
    assert len(dts) <= changed <= len(dts) * len(seqs)
    watched = json.loads((tmp_path / "watch").read_text())
    assert watched["problems"] == [] and watched["reads"] > 0
    final = LocalCatalog(path).partitions("events")
    assert final == [CatalogPartition("events", dt, loc(dt, 100), 100) for dt in dts]


# -- Glue only ----------------------------------------------------------------------------------


def glue_client(proxy: GlueProxy):  # noqa: ANN201 - boto3's client type
    return boto3.client("glue", region_name="us-east-1", endpoint_url=proxy.endpoint_url)


def test_glue_table_layout(glue_proxy: GlueProxy) -> None:
    """What Athena, Trino and Presto need to read a partition through its symlink manifest."""
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 4), 4)
    client = glue_client(glue_proxy)
    assert client.get_database(Name=catalog.database)["Database"]["Name"] == catalog.database
    table = client.get_table(DatabaseName=catalog.database, Name="events")["Table"]
    sd = table["StorageDescriptor"]
    assert table["TableType"] == "EXTERNAL_TABLE"
    assert table["PartitionKeys"] == [{"Name": "dt", "Type": "string"}]
    assert sd["InputFormat"] == SYMLINK_INPUT_FORMAT
    assert sd["OutputFormat"] == OUTPUT_FORMAT
    assert sd["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    assert sd["Location"] == EVENTS.location
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [
        ("id", "string"),
        ("ts", "timestamp"),
        ("n", "bigint"),
    ]
    assert table["Parameters"][MANAGED] == "true"
    assert table["Parameters"]["classification"] == "parquet"
    part = client.get_partition(
        DatabaseName=catalog.database, TableName="events", PartitionValues=["2024-01-01"]
    )["Partition"]
    assert part["StorageDescriptor"]["Location"] == loc("2024-01-01", 4)
    assert part["StorageDescriptor"]["InputFormat"] == SYMLINK_INPUT_FORMAT
    assert part["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    assert part["Parameters"][SEQ] == "4"


def test_glue_names_are_lowercase(glue_proxy: GlueProxy) -> None:
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(
        TableDefinition("Events", (Column("userId", "string"),), "s3://bucket/events/")
    )
    assert catalog.tables() == ["events"]
    assert catalog.table("EVENTS") == TableDefinition(
        "events", (Column("userid", "string"),), "s3://bucket/events/"
    )
    assert catalog.publish_partition("Events", "2024-01-01", loc("2024-01-01", 1), 1)
    assert catalog.partition("events", "2024-01-01") is not None
    for bad in ("bad name", "dash-ed", "", "x" * 256):
        with pytest.raises(CatalogError, match="Glue cannot hold table name"):
            catalog.ensure_table(TableDefinition(bad, EVENTS.columns, EVENTS.location))
    with pytest.raises(CatalogError, match="database name"):
        glue_catalog(glue_proxy, "no spaces")


def test_glue_refuses_a_table_it_did_not_create(glue_proxy: GlueProxy) -> None:
    catalog = glue_catalog(glue_proxy)
    client = glue_client(glue_proxy)
    client.create_database(DatabaseInput={"Name": catalog.database})
    client.create_table(
        DatabaseName=catalog.database,
        TableInput={"Name": "events", "StorageDescriptor": {"Location": "s3://theirs/"}},
    )
    with pytest.raises(CatalogError, match="did not create"):
        catalog.ensure_table(EVENTS)
    with pytest.raises(CatalogError, match="managed by leasehold"):
        catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 1), 1)
    assert catalog.tables() == []
    theirs = client.get_table(DatabaseName=catalog.database, Name="events")["Table"]
    assert theirs["StorageDescriptor"]["Location"] == "s3://theirs/"


@pytest.mark.parametrize(
    ("status", "code"), [(400, "ThrottlingException"), (503, "ServiceUnavailable")]
)
def test_glue_retries_transient_errors(glue_proxy: GlueProxy, status: int, code: str) -> None:
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    before = glue_proxy.failed
    glue_proxy.fail(QUICK.max_attempts - 1, status=status, code=code)
    assert catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 1), 1)
    assert glue_proxy.failed - before == QUICK.max_attempts - 1
    assert catalog.partition("events", "2024-01-01") is not None


def test_glue_gives_up_after_bounded_retries(glue_proxy: GlueProxy) -> None:
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    before = glue_proxy.failed
    glue_proxy.fail(QUICK.max_attempts)
    try:
        with pytest.raises(CatalogError) as err:
            catalog.partitions("events")
    finally:
        glue_proxy.fail(0)
    assert glue_proxy.failed - before == QUICK.max_attempts
    message = str(err.value)
    assert catalog.database in message and "us-east-1" in message
    assert glue_proxy.endpoint_url in message and f"after {QUICK.max_attempts} attempts" in message


def test_glue_unreachable_endpoint_is_a_catalog_error() -> None:
    from tests.support.aws_server import free_port

    catalog = GlueCatalog(
        "leasehold", region="eu-west-1", endpoint_url=f"http://127.0.0.1:{free_port()}", retry=QUICK
    )
    with pytest.raises(CatalogError, match="eu-west-1"):
        catalog.tables()


def test_glue_create_race_keeps_the_higher_seq(glue_proxy: GlueProxy) -> None:
    """A partition another publisher created between our read and our create: the newer of the
    two stays."""
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    other = glue_catalog(glue_proxy, catalog.database)
    real_get = catalog._get_partition
    calls = []

    def get_then_race(name: str, dt: str) -> dict | None:
        found = real_get(name, dt)
        if not calls:  # the other publisher lands right after our first look
            other.publish_partition("events", dt, loc(dt, 9), 9)
        calls.append(found)
        return found

    catalog._get_partition = get_then_race  # type: ignore[method-assign]
    assert catalog.publish_partition("events", "2024-01-01", loc("2024-01-01", 3), 3) is False
    assert other.partition("events", "2024-01-01").seq == 9
    calls.clear()
    assert catalog.publish_partition("events", "2024-01-02", loc("2024-01-02", 12), 12) is True
    assert other.partition("events", "2024-01-02").seq == 12


def test_glue_a_table_changed_between_read_and_write_is_read_again(
    glue_proxy: GlueProxy,
) -> None:
    """Another writer adds a column between our read of the table and our write: Glue refuses
    our write (its VersionId is no longer current) and ours is decided again on the table as it
    is now, so both columns stay."""
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    other = glue_catalog(glue_proxy, catalog.database)
    real_get = catalog._get_table
    reads = []

    def get_then_race(name: str) -> dict | None:
        found = real_get(name)
        if not reads:  # the other writer lands right after our first read
            other.add_columns("events", [Column("theirs", "string")])
        reads.append(found)
        return found

    catalog._get_table = get_then_race  # type: ignore[method-assign]
    stale_before = glue_proxy.stale_updates

    assert catalog.add_columns("events", [Column("ours", "int")]) == [Column("ours", "int")]

    assert glue_proxy.stale_updates == stale_before + 1
    assert len(reads) == 2
    columns = other.table("events").columns  # type: ignore[union-attr]
    assert columns == (*EVENTS.columns, Column("theirs", "string"), Column("ours", "int"))


def test_the_loopback_server_alone_ignores_version_id(aws_server: LocalAwsServer) -> None:
    """Why the proxy checks `VersionId` itself: moto takes an update naming a version that is
    no longer current (AWS refuses it with ConcurrentModificationException). If this starts
    failing, moto enforces it now and the proxy's check is redundant."""
    client = boto3.client("glue", region_name="us-east-1", endpoint_url=aws_server.endpoint_url)
    database = f"db_{uuid.uuid4().hex[:12]}"
    client.create_database(DatabaseInput={"Name": database})
    client.create_table(DatabaseName=database, TableInput={"Name": "t"})
    read = client.get_table(DatabaseName=database, Name="t")["Table"]["VersionId"]
    client.update_table(DatabaseName=database, TableInput={"Name": "t"}, VersionId=read)
    client.update_table(DatabaseName=database, TableInput={"Name": "t", "Description": "stale"},
                        VersionId=read)  # fmt: skip
    assert client.get_table(DatabaseName=database, Name="t")["Table"]["Description"] == "stale"


def test_glue_add_columns_keeps_what_else_the_table_holds(glue_proxy: GlueProxy) -> None:
    """Only the column list changes: a parameter someone else set on the table stays (Glue's
    UpdateTable replaces the whole table, so add_columns writes back what it read)."""
    catalog = glue_catalog(glue_proxy)
    catalog.ensure_table(EVENTS)
    client = glue_client(glue_proxy)
    table = client.get_table(DatabaseName=catalog.database, Name="events")["Table"]
    client.update_table(
        DatabaseName=catalog.database,
        TableInput={
            "Name": "events",
            "TableType": table["TableType"],
            "PartitionKeys": table["PartitionKeys"],
            "StorageDescriptor": table["StorageDescriptor"],
            "Parameters": {**table["Parameters"], "projection.enabled": "false"},
            "Description": "theirs",
        },
    )

    assert catalog.add_columns("Events", [Column("Country", "string")]) == [
        Column("country", "string")
    ]

    after = client.get_table(DatabaseName=catalog.database, Name="events")["Table"]
    assert after["Parameters"]["projection.enabled"] == "false"
    assert after["Parameters"][MANAGED] == "true"
    assert after["Description"] == "theirs"
    assert after["StorageDescriptor"]["Columns"][-1] == {"Name": "country", "Type": "string"}
    assert after["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE


def test_glue_add_columns_refuses_a_table_it_did_not_create(glue_proxy: GlueProxy) -> None:
    catalog = glue_catalog(glue_proxy)
    client = glue_client(glue_proxy)
    client.create_database(DatabaseInput={"Name": catalog.database})
    client.create_table(
        DatabaseName=catalog.database,
        TableInput={"Name": "events", "StorageDescriptor": {"Location": "s3://theirs/"}},
    )
    with pytest.raises(CatalogError, match="did not create"):
        catalog.add_columns("events", [Column("country", "string")])
    theirs = client.get_table(DatabaseName=catalog.database, Name="events")["Table"]
    assert theirs["StorageDescriptor"].get("Columns", []) == []
