"""A source whose fields change, through `leasehold run` as a user runs it: each mode's answer
in the run's output, `leasehold schema`, and the published table read as an engine reads it."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.cli.test_run_outcomes import leasehold

pytestmark = pytest.mark.slow


def rec(i: int, day: int, **extra: object) -> str:
    at = f"2026-01-0{day}T10:00:00Z"
    return json.dumps({"id": f"r{i}", "ts": at, "user": "u", "value": i, **extra})


def project(tmp_path: Path, mode: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "2026-01-01-a.jsonl").write_text("\n".join(rec(i, 1) for i in range(50)) + "\n")
    (tmp_path / "streams.yaml").write_text(
        f"""
streams:
  orders:
    source: file://src
    format: jsonl
    schema: {{id: string, ts: timestamp, user: string, value: long}}
    event_time: ts
    record_id: id
    table: file://lake/orders
    schema_evolution: {mode}
"""
    )
    return src


def drift(src: Path) -> None:
    """A day later the objects also carry `country` and a nested `device`; one value changed
    type."""
    lines = [rec(i, 2, country="NZ", device={"os": "ios"}) for i in range(50, 99)]
    lines.append(rec(99, 2, country="FR").replace('"value": 99', '"value": "ninety-nine"'))
    (src / "2026-01-02-b.jsonl").write_text("\n".join(lines) + "\n")


def published(tmp_path: Path, dts: tuple[str, ...] = ("2026-01-01", "2026-01-02")) -> list[tuple]:
    files = []
    for dt in dts:
        listed = leasehold(tmp_path, "table", "files", "orders", dt)
        assert listed.returncode == 0, listed.stderr
        files += [line.split()[-1] for line in listed.stdout.splitlines() if "://" in line[:40]]
    paths = [f.removeprefix("file://") for f in files if f.endswith(".parquet")]
    read = duckdb.sql(f"select * from read_parquet({paths}, union_by_name=true) order by id")
    wanted = [c for c in ("id", "country", "device") if c in read.columns]
    return read.select(*wanted).fetchall()


def test_add_publishes_new_fields_as_columns_old_rows_null(tmp_path: Path) -> None:
    src = project(tmp_path, "add")
    first = leasehold(tmp_path, "run")
    assert first.returncode == 0, first.stderr
    drift(src)
    second = leasehold(tmp_path, "run")
    assert second.returncode == 0, second.stderr
    assert "schema version 2 added country, device" in second.stdout
    rows = published(tmp_path)
    ids = [r[0] for r in rows]
    assert sorted(ids) == sorted(f"r{i}" for i in range(99))  # r99 quarantined: a changed type
    by_id = {r[0]: r for r in rows}
    assert by_id["r1"][1:] == (None, None)
    assert by_id["r60"][1] == "NZ" and json.loads(by_id["r60"][2]) == {"os": "ios"}
    assert "1 quarantined" in second.stdout
    listed = leasehold(tmp_path, "table", "ls", "orders", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["dt"]: r["schema_versions"] for r in json.loads(listed.stdout)} == {
        "2026-01-01": {"min": 1, "max": 1},
        "2026-01-02": {"min": 2, "max": 2},
    }

    schema = leasehold(tmp_path, "schema", "orders", "--json")
    versions = [json.loads(line) for line in schema.stdout.splitlines()]
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[1]["added"] == ["country", "device"]
    assert versions[1]["origin"]["object"] == "2026-01-02-b.jsonl"
    assert versions[1]["origin"]["line"] == 1


def test_fail_keeps_the_changed_object_out_and_says_which_fields_and_setting(
    tmp_path: Path,
) -> None:
    src = project(tmp_path, "fail")
    assert leasehold(tmp_path, "run").returncode == 0
    drift(src)
    done = leasehold(tmp_path, "run")
    assert done.returncode == 3, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("leasehold: not ingested")]
    assert "country (string, first at line 1)" in line and "device" in line
    assert "schema_evolution" in line
    assert all(r[0] in {f"r{i}" for i in range(50)} for r in published(tmp_path, ("2026-01-01",)))


def test_ignore_says_how_many_records_carried_which_fields(tmp_path: Path) -> None:
    src = project(tmp_path, "ignore")
    drift(src)
    done = leasehold(tmp_path, "run")
    assert done.returncode == 0, done.stderr
    assert "fields left out (schema_evolution: ignore): country (50), device (49)" in done.stdout
