"""A complete, isolated pipeline for tests: sources, streams.yaml, store, Dagster instance."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import DagsterInstance

from resources.coordination.lease_store import LeaseStore
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.instance import write_instance_yaml
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.unit_progress import quarantine_table
from resources.objects.factory import object_store_for
from resources.stores import build_store
from resources.stores.settings import StoreSettings

STREAM = "events"


@dataclass
class PipelineEnv:
    root: Path
    settings: StoreSettings
    streams_path: Path
    s3_endpoint_url: str | None = None
    ownership_timeout_s: float = 60.0
    unassigned_retry_after_s: float = 1800.0
    reconcile_interval_s: float = 900.0

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def instance(self) -> DagsterInstance:
        write_instance_yaml(self.dagster_home)
        return DagsterInstance.from_config(str(self.dagster_home))

    def coordination(self) -> CoordinationResource:
        fields = {k: v for k, v in self.settings.__dict__.items() if v is not None}
        return CoordinationResource(
            **fields,
            ownership_timeout_seconds=self.ownership_timeout_s,
            renew_interval_seconds=self.ownership_timeout_s / 4,
            unassigned_retry_after_seconds=self.unassigned_retry_after_s,
        )

    def lake(self) -> LakeResource:
        return LakeResource(
            streams_path=str(self.streams_path),
            s3_endpoint_url=self.s3_endpoint_url,
            work_dir=str(self.root / "work"),
            reconcile_interval_seconds=self.reconcile_interval_s,
        )

    def catalog(self, **fields: Any) -> CatalogResource:
        """The local catalogs under the pipeline's root: the Hive catalog file and the Iceberg
        SQL catalog (never the default data directory, which other tests share)."""
        return CatalogResource(
            catalog_path=str(self.root / "catalog.json"),
            iceberg_catalog_path=str(self.root / "iceberg" / "catalog.db"),
            **fields,
        )

    def resources(self) -> dict[str, Any]:
        return {
            "coordination": self.coordination(),
            "lake": self.lake(),
            "spark": SparkResource(),
            "catalog": self.catalog(),
        }

    def store(self) -> LeaseStore:
        return build_store(self.settings)

    def table_rows(self) -> list[dict[str, Any]]:
        """What a reader sees: exactly the objects the ledger names, never a prefix listing."""
        store = self.store()
        config = self.lake().stream(STREAM)
        objects = object_store_for(config.table, endpoint_url=self.s3_endpoint_url)
        rows = []
        for obj in store.ledger_objects(STREAM):
            data = objects.get_bytes(objects.key_of(obj.url))
            rows.extend(pq.read_table(pa.BufferReader(data)).to_pylist())
        return rows

    def quarantined(self) -> int:
        return sum(o.row_count for o in self.store().ledger_objects(quarantine_table(STREAM)))

    def args(self) -> str:
        return json.dumps(
            {
                "settings": self.settings.__dict__,
                "streams_path": str(self.streams_path),
                "s3_endpoint_url": self.s3_endpoint_url,
                "work_dir": str(self.root / "work"),
                "dagster_home": str(self.dagster_home),
                "ownership_timeout_s": self.ownership_timeout_s,
            }
        )


def write_streams(
    path: Path, source: str, table: str, partition: dict[str, int] | None = None
) -> Path:
    """The test stream. One object per work unit unless `partition` says otherwise (`{}`: the
    default unit sizes): most tests count partitions as objects."""
    fields = {"max_objects": 1} if partition is None else partition
    settings = ", ".join(f"{k}: {v}" for k, v in fields.items())
    partition_line = f"    partition: {{{settings}}}\n" if fields else ""
    path.write_text(
        f"""
streams:
  {STREAM}:
    source: {source}
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: {table}
{partition_line}"""
    )
    return path


def source_ids(directory: Path) -> Counter[str]:
    """Every well-formed record id in the source files: the independent account."""
    ids: Counter[str] = Counter()
    for path in directory.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                ids[json.loads(line)["event_id"]] += 1
            except (ValueError, KeyError):
                pass
    return ids
