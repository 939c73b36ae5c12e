"""The `merge` and `partition` sections of a stream in streams.yaml (`resources/streams.py`):
how its table partitions are compacted and how discovery cuts its source into work units.
Errors are `ConfigError`s naming the field; the caller adds the stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.errors import ConfigError
from resources.settings import parse_iso_duration


@dataclass(frozen=True)
class MergeSettings:
    """Compaction of a table partition (docs/architecture.md, docs/concepts/compaction.md).

    `max_bytes` is the merged object's target size and a merge's byte budget; `max_objects`
    bounds one merge's inputs (Prism's 2,000); `interval` is how long after the first unmerged
    object lands its merge job is due; `close_grace` how long after the day ends (in the
    stream's time zone) the partition closes, at the earliest: it also waits for ingestion to
    catch up (`resources/compaction/closing.py`); `delayed_interval` how long after a delayed
    object (committed to a closed partition) its merge job is due: short, because a closed
    partition's readers see merged objects only, so a delayed row is unpublished until merged;
    `close_wait_max` how long at most a source object waiting on a retry after a read failure
    holds closing back, from its first failure; `sort_by` the column rows are sorted by inside
    a merged object (default: the event-time column), so row-group statistics prune filters."""

    max_objects: int = 2000
    max_bytes: int = 128 * 1024 * 1024
    close_grace: str = "PT1H"
    interval: str = "PT1H"
    delayed_interval: str = "PT5M"
    close_wait_max: str = "PT2H"
    sort_by: str | None = None

    @property
    def interval_s(self) -> float:
        return parse_iso_duration(self.interval, "merge.interval")

    @property
    def close_grace_s(self) -> float:
        return parse_iso_duration(self.close_grace, "merge.close_grace")

    @property
    def delayed_interval_s(self) -> float:
        return parse_iso_duration(self.delayed_interval, "merge.delayed_interval")

    @property
    def close_wait_max_s(self) -> float:
        return parse_iso_duration(self.close_wait_max, "merge.close_wait_max")


DURATIONS = ("close_grace", "interval", "delayed_interval", "close_wait_max")
"""The ISO-8601 duration fields of `MergeSettings`, validated when streams load."""


@dataclass(frozen=True)
class PartitionSettings:
    """How discovery cuts a listing into work units (docs/architecture.md,
    docs/concepts/work-units.md).

    A work unit — one lease item, one Dagster partition — is up to `max_objects` consecutive
    objects of one listing holding at most `max_bytes` together. The defaults
    (docs/concepts/work-units.md) keep a unit to one Spark read (`MAX_READ_BYTES`, 256 MiB) and
    make the per-unit costs (a lease, a Dagster partition and its events, ~40 ms) a rounding
    error per object, while a million objects a day stay ~1,000 Dagster partitions a day.
    `max_objects: 1` is one object per partition. An object bigger than `commit_every_bytes` (a
    unit of its own when it is over `max_bytes`) is read and committed in chunks of that much
    text, each chunk one fenced transaction with the offset reached: a crash loses at most one
    chunk's work."""

    max_objects: int = 1000
    max_bytes: int = 256 * 1024 * 1024
    commit_every_bytes: int = 128 * 1024 * 1024


def parse_merge(merge_raw: dict[str, Any]) -> MergeSettings:
    """The `merge` section, every field checked (`sort_by` is checked by the caller)."""
    merge = MergeSettings(
        **{k: v for k, v in merge_raw.items() if k in MergeSettings.__annotations__}
    )
    for key in ("max_objects", "max_bytes"):
        value = getattr(merge, key)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"merge.{key}", f"{value!r} must be a positive integer")
    for key in DURATIONS:
        try:
            parse_iso_duration(getattr(merge, key), f"merge.{key}")
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"merge.{key}", str(exc)) from None
    for key in merge_raw:
        if key not in MergeSettings.__annotations__:
            fields = ", ".join(MergeSettings.__annotations__)
            raise ConfigError(f"merge.{key}", f"unknown field; known: {fields}")
    return merge


def parse_positive_ints(section: str, raw: Any, kind: type[PartitionSettings]) -> Any:
    """A settings section of positive integers, every field named in errors."""
    if raw is None:
        return kind()
    if not isinstance(raw, dict):
        raise ConfigError(section, "must be a mapping of fields")
    known = kind.__annotations__
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{section}.{key}", f"unknown field; known: {', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{section}.{key}", f"{value!r} must be a positive integer")
    return kind(**raw)
