"""What a stream does with records that share a key and with source objects that change: its
`dedupe` and `on_change` fields in streams.yaml (docs/concepts/keys-and-changes.md).

    record_id: event_id
    dedupe:
      mode: first              # first | latest | none
      order_by: updated_at     # latest: the greatest value wins (ties: the later commit)
      scope: date              # date | table
    on_change: ignore          # ignore | append | replace (a source object rewritten in place)

`first` keeps the record committed first (ledger order: the dense ids commits assign); `latest`
keeps the greatest `order_by` (Hudi's precombine field); `none` keeps every record and lets the
`unique_record_ids` check flag duplicates. `scope: date` resolves a key within one table
partition; `scope: table` across the table's dates: under `first` a key is served by the date
that published it first, under `latest` by the date of its greatest `order_by`. Every published
snapshot serves each key once under the policy (`resources/dedupe/`). Errors are `ConfigError`s
naming the field; the caller adds the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.errors import ConfigError

FIRST = "first"
LATEST = "latest"
NONE = "none"
DEDUPE_MODES = (FIRST, LATEST, NONE)
DEFAULT_DEDUPE_MODE = FIRST
"""Of a stream with a `record_id` and no `dedupe`: what at-least-once producers need (their
re-sends are the same record again, for which `first` and `latest` agree), at the lowest cost:
a re-sent record loses to the one already published, so only new objects are ever rewritten
and rollups add batches, never recompute (docs/concepts/keys-and-changes.md)."""

DATE = "date"
TABLE = "table"
SCOPES = (DATE, TABLE)

IGNORE = "ignore"
APPEND = "append"
REPLACE = "replace"
ON_CHANGE_MODES = (IGNORE, REPLACE, APPEND)
DEFAULT_ON_CHANGE = IGNORE
"""A source object rewritten in place is counted, named in `leasehold status` and warned by the
`changed_sources` check, never read again by default: a rewrite is ambiguous (a correction, or a
producer's failed retry overwriting good bytes), and changing published rows because a producer
wrote is a decision the stream's owner opts into."""

_FIELDS = ("mode", "order_by", "scope")


@dataclass(frozen=True)
class DedupeSettings:
    """How records that share the stream's `record_id` resolve (`resources/dedupe/`)."""

    mode: str = NONE
    order_by: str | None = None
    """`latest`: the column whose greatest value wins; ties go to the later commit."""
    scope: str = DATE

    @property
    def active(self) -> bool:
        """Published snapshots serve each key once (`first` or `latest`)."""
        return self.mode != NONE


def published_rows_leave(dedupe: DedupeSettings, on_change: str) -> bool:
    """A row the table serves can leave it again: a later record takes its key (`latest`) or
    its object's earlier content is replaced (`replace`). Rollups of such a stream are
    recomputed from what each publication serves (`resources/aggregation/served_rows.py`)."""
    return dedupe.mode == LATEST or on_change == REPLACE


def parse_keys(
    raw: dict[str, Any], record_id: str | None, names: list[str]
) -> tuple[DedupeSettings, str]:
    """A stream's `dedupe` section and `on_change` field (`raw` is the stream's mapping).
    Raises `ConfigError` naming the field."""
    dedupe = parse_dedupe(raw.get("dedupe"), record_id, names)
    on_change = parse_on_change(raw.get("on_change"))
    if on_change == REPLACE:
        _check_replace(dedupe)
    return dedupe, on_change


def parse_dedupe(raw: Any, record_id: str | None, names: list[str]) -> DedupeSettings:
    """The `dedupe` section of a stream whose schema columns are `names`. Absent: `first` when
    the stream has a `record_id`, else `none`. Raises `ConfigError` naming the field."""
    if raw is None:
        return DedupeSettings(mode=DEFAULT_DEDUPE_MODE if record_id is not None else NONE)
    if not isinstance(raw, dict):
        raise ConfigError("dedupe", "must be a mapping of fields (mode, order_by, scope)")
    for key in raw:
        if key not in _FIELDS:
            raise ConfigError(f"dedupe.{key}", f"unknown field; known: {', '.join(_FIELDS)}")
    mode = _one_of("dedupe.mode", raw.get("mode", DEFAULT_DEDUPE_MODE), DEDUPE_MODES)
    scope = _one_of("dedupe.scope", raw.get("scope", DATE), SCOPES)
    order_by = raw.get("order_by")
    if mode != NONE and record_id is None:
        raise ConfigError("dedupe.mode", f"{mode!r} needs the stream's record_id")
    if mode == LATEST and order_by is None:
        raise ConfigError("dedupe.order_by", "latest needs the column whose greatest value wins")
    if order_by is not None:
        if mode != LATEST:
            raise ConfigError("dedupe.order_by", f"only latest orders records, not {mode!r}")
        if order_by not in names:
            raise ConfigError("dedupe.order_by", f"{order_by!r} is not a schema column")
    return DedupeSettings(mode=mode, order_by=order_by, scope=scope)


def parse_on_change(raw: Any) -> str:
    """The `on_change` field: what a source object rewritten in place does (default `ignore`).
    Raises `ConfigError` naming the field."""
    return _one_of("on_change", DEFAULT_ON_CHANGE if raw is None else raw, ON_CHANGE_MODES)


def _check_replace(dedupe: DedupeSettings) -> None:
    """`on_change: replace` takes rows out of published dates through the key index, date by
    date. Raises `ConfigError` naming the field where the stream cannot."""
    if not dedupe.active:
        raise ConfigError(
            "on_change",
            "replace needs a dedupe policy (first or latest): the key index is how the "
            "earlier content's rows leave the table",
        )
    if dedupe.scope == TABLE:
        raise ConfigError(
            "on_change", "replace with dedupe.scope: table is not built (scope: date is)"
        )


def _one_of(field_name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(field_name, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)
