"""One large object ingested chunk by chunk, each chunk committed with the offset it reached
(`commit_every_bytes`). Part of `IngestionRunner`."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from resources.coordination.lease import Lease
from resources.ingestion.batch_results import ReadLarge
from resources.ingestion.outcomes import COMMITTED, PartitionOutcome
from resources.ingestion.unit_commit import UnitCommits
from resources.ingestion.unit_progress import CHUNK
from resources.ingestion.work_units import replaced_by, unit_objects

# The runner's logger: what a unit's ingestion logs is found under one name, as before the split.
log = logging.getLogger("resources.ingestion.runner")


class LargeObjects(UnitCommits):
    """The large-object path of `IngestionRunner`."""

    read_large: ReadLarge | None

    def _is_large(self, progress: Any, key: str) -> bool:
        """A one-object unit read chunk by chunk (never a replacement: its rows and markers
        commit in one transaction)."""
        objects = unit_objects(key, progress)
        return (
            replaced_by(progress) is None
            and self.commit_every_bytes is not None
            and self.read_large is not None
            and len(objects) == 1
            and objects[0].size > self.commit_every_bytes
        )

    def _ingest_large(self, lease: Lease, key: str) -> PartitionOutcome:
        """One object, chunk by chunk (KIP-618's connector-defined transaction boundary): the
        reader reads every chunk from where the commits reached — `commit_every_bytes` of text,
        to the end of a line (CSV: of a record) — byte ranges in parallel where it can
        (`task_reader.TaskReader.read_large`); each chunk is then committed in order with the
        offset it reached, in one fenced transaction that keeps the lease (renewed in the
        background meanwhile), the last one completing the unit. A takeover resumes at the
        committed offset: plain text by seeking to it, gzip by decompressing up to it again
        (gzip cannot seek)."""
        assert self.read_large is not None
        (obj,) = unit_objects(key, lease.progress)
        reached = (lease.progress or {}).get(CHUNK) or {"offset": 0, "line": 1}
        attempt = uuid.uuid4().hex[:12]
        chunks = self.read_large(key, obj, reached, attempt)
        total = PartitionOutcome(key, COMMITTED, lease.epoch)
        outcome = total
        for n, chunk in enumerate(chunks, start=1):
            outcome = self._commit(
                lease,
                key,
                chunk.result,
                [obj.key],
                attempt,
                final=chunk.last,
                reached={CHUNK: {"offset": chunk.offset, "line": chunk.line}},
            )
            total.small_objects += outcome.small_objects
            total.bytes += outcome.bytes
            total.table_partitions = sorted({*total.table_partitions, *outcome.table_partitions})
            if outcome.outcome != COMMITTED or chunk.last:
                outcome.small_objects, outcome.bytes = total.small_objects, total.bytes
                outcome.table_partitions = total.table_partitions
                if outcome.ok:
                    outcome.message = f"{n} chunk(s) committed this run"
                return outcome
            log.info(
                "%s: %r chunk %d committed up to offset %d (line %d)",
                self.stream,
                key,
                n,
                chunk.offset,
                chunk.line,
            )
        return outcome
