"""One tick of a stream's publication sensor: request what is due, record what Dagster missed.

1. `Publisher.due()`: table partitions whose publication is due (new live objects, a switch
   now possible, a merge past what is published) or whose catalog partition lags the ledger.
2. Those dates Dagster does not hold yet become date partitions (the merge sensor adds them
   too; whichever ticks first).
3. Every due date no publication run in flight covers is requested, many per run
   (`max_publications_per_run`), in ranges of the date partitions. One publication run at a
   time per stream (the instance's `leasehold/publish` run limit); the ledger's conditional
   write would keep two safe anyway (the loser's manifests are orphans for garbage collection).
4. After a publication run ended badly, publications it recorded in the ledger that Dagster
   never recorded (killed between the ledger write and the event) are recorded without a run.
"""

from __future__ import annotations

import logging
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    MetadataValue,
    SensorResult,
)

from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.asset_metadata import with_row_count
from resources.dagster_resources.range_tick import RangeTick, recorded_value
from resources.dagster_resources.runs import PUBLISH_TAG
from resources.publication.manifest import SPECTRUM_NAME, served_location
from resources.publication.outcome import PUBLISHED, PublicationOutcome

log = logging.getLogger(__name__)


def publication_materialization(
    asset_key: AssetKey, outcome: PublicationOutcome, recorded_by: str | None = None
) -> AssetMaterialization:
    """The published-table asset's event for one publication made current (`outcome` carries
    it): its seq and manifest version, switched or live, the ids, files, rows and bytes it
    covers, the catalog location and the Spectrum manifest's URL."""
    publication = outcome.publication
    if publication is None:
        raise ValueError(f"dt={outcome.dt}: {outcome.outcome}: no publication to record")
    metadata: dict[str, Any] = {
        **outcome.metadata(),
        "kind": "merged" if publication.switched else "live",
        "location": MetadataValue.url(str(outcome.metadata()["location"])),
        "manifest": MetadataValue.url(publication.location + SPECTRUM_NAME),
    }
    if recorded_by is not None:
        metadata["recorded_by"] = recorded_by
    # The partition's rows as readers see them: the publication covers all of its rows.
    metadata = with_row_count(metadata, publication.rows)
    return AssetMaterialization(asset_key=asset_key, partition=outcome.dt, metadata=metadata)


def recorded_seq(instance: DagsterInstance, asset_key: AssetKey, dt: str) -> int | None:
    """The publication `seq` Dagster last recorded for the table partition `dt`."""
    return recorded_value(instance, asset_key, dt, "seq")


class PublicationTick(RangeTick):
    """One tick of a table's publication sensor: requests runs for the partitions whose publication
    is due."""

    run_tag = PUBLISH_TAG
    kind = "publish"

    def evaluate(self, cursor: str | None) -> SensorResult:
        runs_seen_s = self._start(cursor)
        publisher = self.catalog.publisher(self.stream, self.coordination, self.lake)
        due = publisher.due()
        dates = self._dates(due)
        wanted = [dt for dt in due if dates.free(dt)]
        now_ms = self.coordination.store.now_ms()
        requests = self._requests(
            dates.order, wanted, self.catalog.max_publications_per_run, now_ms
        )
        ended, runs_seen_s = self._ended_badly(runs_seen_s)
        missed = self._missed(ended, set(dates.order))
        flush_or_keep(self.coordination.store)
        if not (requests or dates.new or missed):
            return self._skip(
                runs_seen_s,
                f"nothing to request: {len(due)} table partitions due, all in publication "
                "runs in flight"
                if due
                else "nothing to publish: every table partition is up to date",
            )
        return self._result(requests, dates.new, missed, runs_seen_s)

    def _missed(self, ended: list[DagsterRun], dates: set[str]) -> list[AssetMaterialization]:
        """Publications the ledger holds and Dagster does not, in the spans of publication runs
        that ended badly."""
        events = []
        store = self.coordination.store
        table = self.lake.table_name(self.stream)
        config = self.lake.stream(self.stream)
        for run, dt in self._span_dates(ended):
            partition = store.table_partition(table, dt)
            if partition is None or partition.publication_seq == 0 or dt not in dates:
                continue
            if (recorded_seq(self.instance, self.asset_key, dt) or 0) >= partition.publication_seq:
                continue
            publications = store.publications(table, dt)
            if not publications:
                log.warning(
                    "%s dt=%s: publication_seq %d but the ledger keeps no record",
                    table, dt, partition.publication_seq,
                )  # fmt: skip
                continue
            current = publications[-1]
            location = served_location(config.table_format, config.table, current.location)
            outcome = PublicationOutcome(dt, PUBLISHED, "", current, False, location)
            events.append(
                publication_materialization(
                    self.asset_key,
                    outcome,
                    recorded_by="publication sensor: recorded by a run that ended badly "
                    f"({run.run_id})",
                )
            )
        return events
