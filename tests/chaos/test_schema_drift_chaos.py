"""Chaos test of a source whose fields change (issue 31): `leasehold run` SIGKILLed at random,
at least five times, while it ingests objects that gain a field, then a nested one, on both
store backends.

Later objects carry `country`, the latest also a nested `device`, and new waves landing during
the kills carry both. Whatever the kills hit — a schema version recorded and its data not yet
committed, a read redone with a new version, commits half through — plain `leasehold run` must
converge, and then the published table, read as an engine reads it (`leasehold table files`,
DuckDB with `union_by_name`), holds every record once with the values its object had: the new
columns null for records written before they existed, never missing for those that carried
them. The store's versions add each field once.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from resources.coordination.items import PartitionStatus
from resources.stores.stream_schema import followed_config
from resources.streams import load_streams
from tests.chaos.test_leasehold_run_chaos import LEASE_TIMEOUT_S, chaos
from tests.support.cli_project import CliProject, cli_project
from tests.support.pipeline_env import STREAM

pytestmark = pytest.mark.slow

OBJECTS = {"sqlite": 120, "dynamodb": 40}
CHUNK_SIZE = {"sqlite": 20, "dynamodb": 8}
KILLS = 5
CONVERGENCE_INVOCATIONS = 2
WAVE_OBJECTS = 6


def drift(sources: Path) -> None:
    """From a third of the objects on, records carry `country`; from two thirds on also a
    nested `device` (malformed lines stay as they are)."""
    paths = sorted(sources.rglob("*.jsonl"))
    for n, path in enumerate(paths):
        if n < len(paths) // 3:
            continue
        lines = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                lines.append(line)
                continue
            record["country"] = f"C{n % 5}"
            if n >= 2 * len(paths) // 3:
                record["device"] = {"os": "ios", "n": n}
            lines.append(json.dumps(record))
        path.write_text("\n".join(lines) + "\n")


def wave_writer(sources: Path) -> Callable[[], None]:
    """New objects after every earlier key, carrying both new fields."""
    waves = iter(range(1, 1_000))

    def write_wave() -> None:
        wave = next(waves)
        for i in range(WAVE_OBJECTS):
            path = sources / f"2026/01/09/wave{wave:03d}-{i:03d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            records = [
                {
                    "event_id": f"W{wave:03d}-{i:03d}-{j:03d}",
                    "user_id": "u",
                    "amount": 2.5,
                    "event_time": f"2026-01-{1 + j % 3:02d}T10:30:00Z",
                    "country": "W",
                    "device": {"os": "android", "n": j},
                }
                for j in range(30)
            ]
            path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        print(f"the work ran out: wave {wave} landed", flush=True)

    return write_wave


def expected_rows(sources: Path) -> dict[str, tuple[str | None, dict | None]]:
    """event_id -> (country, device) as the source objects hold them."""
    rows = {}
    for path in sources.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            rows[record["event_id"]] = (record.get("country"), record.get("device"))
    return rows


@pytest.fixture
def project(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[CliProject]:
    endpoint = request.getfixturevalue("aws_server").endpoint_url if backend == "dynamodb" else None
    proj = cli_project(
        tmp_path / "project",
        backend,
        objects=OBJECTS[backend],
        records_per_object=30,
        malformed_every=61,
        chunk_size=CHUNK_SIZE[backend],
        lease_timeout_s=LEASE_TIMEOUT_S,
        dynamodb_endpoint_url=endpoint,
        partition={"max_objects": 1},
    )
    drift(proj.sources)
    yield proj
    proj.stop_children()


def published(project: CliProject) -> list[tuple]:
    """(event_id, country, device) of every published row: `leasehold table ls` for the
    partitions, `leasehold table files` for each manifest's files, DuckDB over them by name."""
    code, output = project.run("table", "ls", STREAM, "--json")
    assert code == 0, output
    files: list[str] = []
    for partition in json.loads(output[output.index("[") :]):
        code, output = project.run("table", "files", STREAM, partition["dt"], "--json")
        assert code == 0, output
        files += [
            e["url"].removeprefix("file://")
            for e in json.loads(output[output.index("{") :])["files"]
        ]
    return duckdb.sql(
        f"select event_id, country, device from read_parquet({files}, union_by_name=true)"
    ).fetchall()


def test_a_drifting_source_converges_after_random_kills_with_every_value_kept(
    project: CliProject,
) -> None:
    seed = int(os.environ.get("LEASEHOLD_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (LEASEHOLD_CHAOS_SEED={seed} replays it)", flush=True)
    kills = chaos(
        project, random.Random(seed), refill=wave_writer(project.sources), kills_wanted=KILLS
    )
    assert sum(k.landed for k in kills) >= KILLS
    context = f"seed {seed}\n" + "\n".join(k.describe() for k in kills)
    time.sleep(LEASE_TIMEOUT_S + 0.5)

    store = project.store()
    try:
        for _ in range(CONVERGENCE_INVOCATIONS):
            code, _ = project.run("run")
            items = list(store.iter_items(store.source_identifier(STREAM)))
            done = all(i.status is PartitionStatus.COMPLETED for i in items)
            if done and code == 0:
                break
        assert done and code == 0, f"{context}\nnot converged:\n{project.tail()}"
        assert not [i for i in items if i.dead_letter_reason], context
        versions = store.schema_versions(STREAM)
        config = followed_config(store, load_streams(project.streams_path)[STREAM])
    finally:
        store.close_store()
    added = [name for v in versions for name in v.added]
    assert added.count("country") == 1 and added.count("device") == 1, (context, versions)
    assert {"country", "device"} <= set(config.column_names)

    expected = expected_rows(project.sources)
    rows = published(project)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), f"{context}\nrecords published twice"
    assert set(ids) == set(expected), (
        f"{context}\nlost {sorted(set(expected) - set(ids))[:5]}, "
        f"extra {sorted(set(ids) - set(expected))[:5]}"
    )
    wrong = [
        r for r in rows if (r[1], None if r[2] is None else json.loads(r[2])) != expected[r[0]]
    ]
    assert not wrong, f"{context}\n{len(wrong)} rows differ from their source, e.g. {wrong[:3]}"
    code, output = project.run("check")
    assert code == 0, f"{context}\nleasehold check failed:\n{output}"
