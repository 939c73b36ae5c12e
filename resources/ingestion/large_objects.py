"""One large object ingested chunk by chunk, each chunk committed with the offset it reached
(`commit_every_bytes`). Part of `IngestionRunner`."""

from __future__ import annotations

import logging
import shutil
import uuid
import zlib
from pathlib import Path
from typing import Any

from resources.coordination.lease import Lease
from resources.errors import LeaseholdError
from resources.ingestion.batch_results import SourceBatchResult
from resources.ingestion.outcomes import COMMITTED, PartitionOutcome
from resources.ingestion.source_files import ChunkReader
from resources.ingestion.unit_commit import UnitCommits
from resources.ingestion.unit_progress import CHUNK
from resources.ingestion.work_units import unit_objects

# The runner's logger: what a unit's ingestion logs is found under one name, as before the split.
log = logging.getLogger("resources.ingestion.runner")


class LargeObjects(UnitCommits):
    """The large-object path of `IngestionRunner`."""

    def _is_large(self, progress: Any, key: str) -> bool:
        objects = unit_objects(key, progress)
        return (
            self.commit_every_bytes is not None
            and len(objects) == 1
            and objects[0].size > self.commit_every_bytes
        )

    def _ingest_large(self, lease: Lease, key: str, scratch: Path) -> PartitionOutcome:
        """One object, chunk by chunk (KIP-618's connector-defined transaction boundary): each
        chunk — `commit_every_bytes` of text, to the end of a line (CSV: of a record) — is read
        like any object and committed with the offset it reached in one fenced transaction that
        keeps the lease (renewed in the background meanwhile); the last chunk completes the
        unit. A takeover
        resumes at the committed offset: plain text by seeking to it, gzip by decompressing up
        to it again (gzip cannot seek)."""
        (obj,) = unit_objects(key, lease.progress)
        try:
            local = self.fetch(obj.key, scratch / "sources")
        except Exception as exc:  # noqa: BLE001 - any failure to read the object
            plain = isinstance(exc, LeaseholdError)
            return self._close_unreadable(
                lease, key, f"cannot fetch: {exc}", None if plain else exc
            )
        reached = (lease.progress or {}).get(CHUNK) or {"offset": 0, "line": 1}
        try:
            chunks = ChunkReader(local, int(reached["offset"]), int(reached["line"]), self.csv)
        except (OSError, EOFError, zlib.error) as exc:
            why = f"{obj.key}: cannot read at offset {reached['offset']}: {exc}"
            return self._close_unreadable(lease, key, why)
        try:
            return self._commit_chunks(lease, key, obj.key, chunks, scratch)
        finally:
            chunks.close()

    def _commit_chunks(
        self,
        lease: Lease,
        key: str,
        obj: str,
        chunks: ChunkReader,
        scratch: Path,
    ) -> PartitionOutcome:
        total = PartitionOutcome(key, COMMITTED, lease.epoch)
        n = 0
        while True:
            n += 1
            try:
                cut = chunks.next(
                    self.commit_every_bytes or 0, scratch / f"chunk-{n}" / "chunk.txt"
                )
            except (OSError, EOFError, zlib.error) as exc:
                why = f"{obj}: cannot read at offset {chunks.offset}: {exc}"
                return self._close_unreadable(lease, key, why)
            shift = cut.first_line - 1 - cut.header_lines  # the chunk file's line 1 in the object
            attempt = uuid.uuid4().hex[:12]
            results = self.read_batch(
                {obj: cut.path},
                scratch / f"chunk-{n}" / "staging",
                attempt,
                {obj: key},
                {obj: shift},
            ).result()
            result = results.get(key) or SourceBatchResult(unreadable="the reader returned nothing")
            outcome = self._commit(
                lease,
                key,
                result,
                [obj],
                attempt,
                final=cut.last,
                reached={CHUNK: {"offset": cut.offset, "line": cut.line}},
            )
            shutil.rmtree(cut.path.parent, ignore_errors=True)
            total.small_objects += outcome.small_objects
            total.bytes += outcome.bytes
            total.table_partitions = sorted({*total.table_partitions, *outcome.table_partitions})
            if outcome.outcome != COMMITTED or cut.last:
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
                cut.offset,
                cut.line,
            )
