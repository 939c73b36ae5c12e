"""Publication targets for the contract tests, described so that a child process can open the
same one (`TargetSpec`), Parquet files written where a target's table lives (a local directory
or a bucket of the loopback AWS server), and `switch_in_child`, a multiprocessing target."""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq

from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PartitionFile, PartitionSwitch, PublicationTarget


@dataclass(frozen=True)
class TargetSpec:
    """A target: its catalog settings, table format, the lake's S3 endpoint (None: local
    files) and the root URL its tables and files live under (ends without `/`)."""

    settings: CatalogSettings
    table_format: str
    root: str
    s3_endpoint_url: str | None = None

    def open(self) -> PublicationTarget:
        return target_for(self.settings, self.table_format, s3_endpoint_url=self.s3_endpoint_url)

    def as_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "settings": self.settings.__dict__})

    @staticmethod
    def from_json(text: str) -> TargetSpec:
        raw = json.loads(text)
        return TargetSpec(**{**raw, "settings": CatalogSettings(**raw["settings"])})


def rows(name: str, n: int, **extra: list[Any]) -> pa.Table:
    """`n` rows with the contract table's columns (id, ts, n) and any `extra` ones."""
    ts = [datetime(2024, 1, 1, tzinfo=timezone.utc)] * n
    return pa.table(
        {
            "id": [f"{name}-{i}" for i in range(n)],
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "n": pa.array(range(n), pa.int64()),
            **extra,
        }
    )


def write_file(spec: TargetSpec, name: str, table: pa.Table) -> PartitionFile:
    """`table` as a Parquet object `<root>/data/<name>`."""
    url = f"{spec.root}/data/{name}"
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    data = buffer.getvalue()
    if url.startswith("s3://"):
        bucket, _, key = url[len("s3://") :].partition("/")
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=spec.s3_endpoint_url)
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    else:
        path = Path(url[len("file://") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return PartitionFile(url, len(data), table.num_rows)


def switch_in_child(spec_json: str, table: str, switches_json: str, go: Any, out: str) -> None:
    """Open the target afresh, wait for `go`, switch once, write the dts switched to `out`."""
    target = TargetSpec.from_json(spec_json).open()
    switches = [
        PartitionSwitch(
            s["dt"], s["seq"], s["version_url"], tuple(PartitionFile(**f) for f in s["files"])
        )
        for s in json.loads(switches_json)
    ]
    go.wait(60)
    Path(out).write_text(json.dumps(target.switch(table, switches)))


def switches_json(switches: list[PartitionSwitch]) -> str:
    return json.dumps([dataclasses.asdict(s) for s in switches])


def ensure_in_child(spec_json: str, definition_json: str, go: Any, out: str) -> None:
    """Open the target afresh, wait for `go`, ensure the table, write "ok" to `out`."""
    from resources.catalog.base import Column, TableDefinition

    raw = json.loads(definition_json)
    columns = tuple(Column(**c) for c in raw["columns"])
    target = TargetSpec.from_json(spec_json).open()
    go.wait(60)
    target.ensure_table(TableDefinition(raw["name"], columns, raw["location"]))
    Path(out).write_text("ok")
