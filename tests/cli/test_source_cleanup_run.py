"""Source clean-up end to end, as a user runs it: `leasehold run` publishes and then cleans up
(one bounded pass), `leasehold cleanup` is SIGKILLed in the middle of a pass — after its first
unit's objects went, while the second unit's are copied to the archive but not yet deleted —
and the next pass finishes. Two streams in one project, so one `leasehold run` (one Spark)
serves both: `events` archives its S3 source (the loopback server) to another bucket,
`clicks` deletes its local source.

Then: every object is gone from the sources, each archived object is in the archive with its
bytes, nothing went before its rows were published, the tables are exact, `leasehold status`
and the completeness check say how many went; and an object uploaded again under a cleaned-up
key is held by its unit, so another `leasehold run` ingests nothing twice.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import boto3
import pytest

from resources.coordination.cleanup_state import read_cleanup_state
from resources.ingestion.work_units import unit_of
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.stores import build_store
from resources.stores.base import CoordinationStore
from tests.support.aws_server import LocalAwsServer
from tests.support.cli_project import cli_project, kill_group
from tests.support.holding_proxy import HoldingProxy, is_batch_delete

pytestmark = pytest.mark.slow

STREAMS = """
streams:
  events:
    source: {events_source}
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://{root}/lake/events
    partition: {{max_objects: 2}}
    source_cleanup: {{mode: archive, after: PT1S, archive_to: {archive}}}
  clicks:
    source: file://{root}/sources
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://{root}/lake/clicks
    partition: {{max_objects: 2}}
    source_cleanup: {{mode: delete, after: PT1S}}
"""


def bucket(server: LocalAwsServer, name: str) -> str:
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(
        Bucket=name
    )
    return name


def keys(objects: ObjectStore) -> list[str]:
    return [o.key for o in objects.list_after(None, 10_000)]


def table_rows(store: CoordinationStore, table: str) -> tuple[int, bool]:
    """(rows committed, whether every committed id is published)."""
    parts = store.table_partitions(table)
    published = all(
        p.current_manifest_version >= 0 and p.published_upper == p.next_object_id - 1 for p in parts
    )
    return sum(o.row_count for o in store.ledger_objects(table)), published


def published_units(store: CoordinationStore, stream: str) -> set[str]:
    """The source keys of units COMPLETED and published (after a whole `leasehold run`,
    every one that completed)."""
    sid = store.source_identifier(stream)
    return {o.key for item in store.iter_items(sid) for o in unit_of(item).objects}


def test_archive_and_delete_with_a_kill_mid_pass_then_a_re_upload(
    tmp_path: Path, aws_server: LocalAwsServer
) -> None:
    project = cli_project(
        tmp_path / "p", "sqlite", objects=6, records_per_object=20, malformed_every=0,
        chunk_size=250, lease_timeout_s=60,
    )  # fmt: skip
    root = project.root
    src = object_store_for(
        f"s3://{bucket(aws_server, 'src')}/events", endpoint_url=aws_server.endpoint_url
    )
    # No archive bucket yet: the run's clean-up pass of `events` cannot copy, so it stops
    # and deletes nothing.
    archive = object_store_for("s3://archive/events", endpoint_url=aws_server.endpoint_url)
    originals = {
        str(p.relative_to(root / "sources")): p.read_bytes()
        for p in sorted((root / "sources").rglob("*"))
        if p.is_file()
    }
    for key, data in originals.items():
        src.put_bytes(key, data)
    project.streams_path.write_text(
        STREAMS.format(events_source=src.root_url, archive=archive.root_url, root=root)
    )
    project.env.update(
        LEASEHOLD_S3_ENDPOINT_URL=aws_server.endpoint_url,
        LEASEHOLD_CLEANUP_OBJECTS_PER_PASS="2",
    )
    clicks = object_store_for(f"file://{root / 'sources'}")

    code, out = project.run("run")
    assert code == 0, out
    assert "source clean-up stopped (the next pass goes on)" in out, out
    # The bound takes whole units and whole groups of units completed in the same millisecond:
    # at least one unit (2 objects), more when the units completed together.
    deleted = re.search(r"clicks > source clean-up: deleted (\d+) source objects", out)
    assert deleted and int(deleted.group(1)) in (2, 4, 6), out
    assert keys(src) == sorted(originals)
    bucket(aws_server, "archive")
    store = build_store(project.settings)
    try:
        rows = {t: table_rows(store, t) for t in ("events", "clicks")}
        assert all(published for _, published in rows.values()) and rows["events"][0] == 120
        # The run's own pass removed only published units' objects, as many as it said.
        went = set(originals) - set(keys(clicks))
        assert went <= published_units(store, "clicks")
        assert len(went) == int(deleted.group(1))
    finally:
        store.close_store()

    time.sleep(1.1)  # `after` (PT1S) has passed for every unit
    project.env.update(LEASEHOLD_CLEANUP_OBJECTS_PER_PASS="100")
    before_kill = set(keys(src))
    with HoldingProxy(
        aws_server.endpoint_url, is_batch_delete, nth=2
    ) as proxy:  # the second unit's delete
        project.env.update(
            LEASEHOLD_S3_ENDPOINT_URL=proxy.url, LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS="2"
        )
        killed = project.start("cleanup", "--stream", "events")
        assert proxy.holding.wait(60), project.tail()
        kill_group(killed)
    # Killed between a unit's copies and its delete: its objects are in both places.
    copied_not_deleted = set(keys(archive)) & set(keys(src))
    assert copied_not_deleted and set(keys(src)) < before_kill
    project.env.update(LEASEHOLD_S3_ENDPOINT_URL=aws_server.endpoint_url)
    time.sleep(2.1)  # the killed pass's lease expires
    code, out = project.run("cleanup")
    assert code == 0, out
    assert keys(src) == [] and keys(clicks) == []
    assert keys(archive) == sorted(originals)
    assert all(archive.get_bytes(k) == data for k, data in originals.items())

    code, out = project.run("cleanup", "--dry-run")
    assert code == 0 and "would remove 0 source objects" in out, out
    code, out = project.run("status")
    assert code == 0 and "events source clean-up (archive): " in out, out
    assert "clicks source clean-up (delete): 0 archived, " in out, out
    store = build_store(project.settings)
    try:
        events, clicks_state = (
            read_cleanup_state(store, "events"),
            read_cleanup_state(store, "clicks"),
        )
        assert events.archived == 6 and clicks_state.cleaned == 6
        # The cursor passes a priority only once all its units are done: a unit that completed
        # in the same millisecond as the one the kill interrupted is redone by the next pass,
        # its objects (archived and removed already) counted as gone.
        assert events.gone in (0, 2), events
    finally:
        store.close_store()

    # The same key uploaded again: held by its unit, never ingested twice.
    again = sorted(originals)[0]
    src.put_bytes(again, originals[again])
    clicks.put_bytes(again, originals[again])
    code, out = project.run("run")
    assert code == 0, out
    assert "events: nothing new" in out and "clicks: nothing new" in out, out
    store = build_store(project.settings)
    try:
        assert {t: table_rows(store, t) for t in ("events", "clicks")} == rows
    finally:
        store.close_store()
    assert keys(src) == [again] and keys(clicks) == [again]  # its unit is done: left alone
