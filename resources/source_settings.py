"""How a stream's source is watched and tidied: its `discovery` and `source_cleanup` sections.

    discovery:
      mode: listing            # or notifications
      queue: https://sqs.eu-west-1.amazonaws.com/123456789012/events-created  # notifications
      ordered_keys: true       # listing: new keys sort after the ones before them
      backstop_interval: P1D   # notifications: how often the whole source is listed again
    source_cleanup:
      mode: off                # or archive, delete
      after: P7D               # how long after its unit completed an object stays
      archive_to: s3://archive-bucket/events   # archive: where objects go (key kept)

Listing (the default) lists the source after a cursor each tick and the whole source again every
`LEASEHOLD_RECONCILE_INTERVAL_SECONDS` for objects that landed behind it; with `ordered_keys:
false` (random or hashed key prefixes) the cursor finds nothing the pass would not, so the pass
is the discovery. Notifications (S3 only) learn of each object from its `ObjectCreated` event on
an SQS queue, so a tick costs what arrived, and list the whole source only as a backstop for lost
events: once a day by default (docs/production.md says why). Every field is checked on load; an
error names the stream and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.errors import ConfigError
from resources.settings import http_url, iso_duration_problem, parse_iso_duration

LISTING = "listing"
NOTIFICATIONS = "notifications"
DISCOVERY_MODES = (LISTING, NOTIFICATIONS)

CLEANUP_OFF = "off"
ARCHIVE = "archive"
DELETE = "delete"
CLEANUP_MODES = (CLEANUP_OFF, ARCHIVE, DELETE)

DEFAULT_BACKSTOP_INTERVAL = "P1D"
"""The notifications backstop pass: S3 delivers events at least once and loses them only
rarely, and a pass costs one LIST per 1,000 objects of the whole source — a day bounds how late
a lost event's object is found while a pass over 10⁸ objects (100,000 LISTs) stays a few hours
of ticks a day, not a permanent load."""
DEFAULT_CLEANUP_AFTER = "P7D"


class SourceSettingsError(ConfigError):
    """A `discovery` or `source_cleanup` field that is not valid (the caller adds the stream)."""


@dataclass(frozen=True)
class DiscoverySettings:
    """How new source objects are found (`resources/ingestion/discovery.py`,
    `notification_discovery.py`)."""

    mode: str = LISTING
    queue: str | None = None
    """The SQS queue URL the bucket's `ObjectCreated` events arrive on (notifications)."""
    ordered_keys: bool = True
    """Listing: a new object's key sorts after those listed before it (dates, sequence numbers
    in the key). False: discovery is the whole-source pass alone."""
    backstop_interval: str = DEFAULT_BACKSTOP_INTERVAL

    @property
    def notifications(self) -> bool:
        return self.mode == NOTIFICATIONS

    @property
    def backstop_interval_s(self) -> float:
        return parse_iso_duration(self.backstop_interval, "discovery.backstop_interval")


@dataclass(frozen=True)
class SourceCleanupSettings:
    """What happens to a source object once its rows are published (`resources/cleanup`)."""

    mode: str = CLEANUP_OFF
    after: str = DEFAULT_CLEANUP_AFTER
    """How long after its work unit COMPLETED an object may go (ISO-8601 duration)."""
    archive_to: str | None = None
    """archive: the file:// or s3:// location objects are copied to, under their own key."""

    @property
    def enabled(self) -> bool:
        return self.mode != CLEANUP_OFF

    @property
    def after_s(self) -> float:
        return parse_iso_duration(self.after, "source_cleanup.after")


def _section(name: str, raw: Any, known: tuple[str, ...]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SourceSettingsError(name, "must be a mapping of fields")
    for key in raw:
        if key not in known:
            raise SourceSettingsError(f"{name}.{key}", f"unknown field; known: {', '.join(known)}")
    return raw


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SourceSettingsError(field, f"{value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _duration(field: str, value: Any) -> str:
    problem = iso_duration_problem(value)
    if problem is not None:
        raise SourceSettingsError(field, problem)
    return str(value)


def parse_discovery(raw: Any, source: str) -> DiscoverySettings:
    """The `discovery` section of a stream whose source is `source`; raises
    `SourceSettingsError` naming the field."""
    section = _section("discovery", raw, ("mode", "queue", "ordered_keys", "backstop_interval"))
    mode = _choice("discovery.mode", section.get("mode", LISTING), DISCOVERY_MODES)
    queue = section.get("queue")
    ordered = section.get("ordered_keys", True)
    if not isinstance(ordered, bool):
        raise SourceSettingsError("discovery.ordered_keys", f"{ordered!r} must be true or false")
    interval = _duration(
        "discovery.backstop_interval", section.get("backstop_interval", DEFAULT_BACKSTOP_INTERVAL)
    )
    if mode == NOTIFICATIONS:
        if not source.startswith("s3://"):
            raise SourceSettingsError(
                "discovery.mode", "notifications need an s3:// source (S3 sends the events)"
            )
        if not isinstance(queue, str) or http_url(queue) is not None:
            raise SourceSettingsError(
                "discovery.queue", f"{queue!r}: notifications need the SQS queue's https:// URL"
            )
        if "ordered_keys" in section:
            raise SourceSettingsError(
                "discovery.ordered_keys", "only for listing: notifications need no key order"
            )
    else:
        for key in ("queue", "backstop_interval"):
            if key in section:
                raise SourceSettingsError(f"discovery.{key}", "only for mode: notifications")
    return DiscoverySettings(mode, queue, ordered, interval)


def parse_source_cleanup(raw: Any, source: str) -> SourceCleanupSettings:
    """The `source_cleanup` section of a stream whose source is `source` (archive_to already a
    checked URL or None); raises `SourceSettingsError` naming the field."""
    section = _section("source_cleanup", raw, ("mode", "after", "archive_to"))
    mode = section.get("mode", CLEANUP_OFF)
    mode = _choice("source_cleanup.mode", CLEANUP_OFF if mode is False else mode, CLEANUP_MODES)
    after = _duration("source_cleanup.after", section.get("after", DEFAULT_CLEANUP_AFTER))
    archive_to = section.get("archive_to")
    if mode == ARCHIVE:
        if not isinstance(archive_to, str):
            raise SourceSettingsError(
                "source_cleanup.archive_to", "archive needs a file:// or s3:// location"
            )
        if (archive_to + "/").startswith(source + "/"):
            raise SourceSettingsError(
                "source_cleanup.archive_to",
                f"{archive_to!r} is inside the source {source!r}: archived objects would be "
                "discovered again",
            )
    elif archive_to is not None:
        raise SourceSettingsError("source_cleanup.archive_to", "only for mode: archive")
    return SourceCleanupSettings(mode, after, archive_to)
