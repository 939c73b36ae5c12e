"""The `discovery` and `source_cleanup` sections: defaults, every field checked, one message
naming the stream and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.source_settings import ARCHIVE, LISTING, NOTIFICATIONS
from resources.streams import StreamConfigError, load_streams

QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/events"


def streams(tmp_path: Path, extra: str, source: str = "s3://bucket/events") -> Path:
    path = tmp_path / "streams.yaml"
    path.write_text(
        "streams:\n  events:\n"
        f"    source: {source}\n"
        "    schema: {id: string, t: timestamp}\n"
        "    event_time: t\n"
        "    table: s3://lake/events\n" + extra
    )
    return path


def test_defaults_are_listing_in_key_order_and_no_cleanup(tmp_path: Path) -> None:
    config = load_streams(streams(tmp_path, ""))["events"]
    assert config.discovery.mode == LISTING and config.discovery.ordered_keys
    assert not config.discovery.notifications
    assert not config.source_cleanup.enabled


def test_notifications_and_archive(tmp_path: Path) -> None:
    extra = (
        f"    discovery: {{mode: notifications, queue: '{QUEUE}', backstop_interval: PT12H}}\n"
        "    source_cleanup: {mode: archive, after: P2D, archive_to: s3://archive/events}\n"
    )
    config = load_streams(streams(tmp_path, extra))["events"]
    assert config.discovery.mode == NOTIFICATIONS and config.discovery.queue == QUEUE
    assert config.discovery.backstop_interval_s == 12 * 3600
    assert config.source_cleanup.mode == ARCHIVE and config.source_cleanup.after_s == 2 * 86400
    assert config.source_cleanup.archive_to == "s3://archive/events"


def test_yaml_off_is_cleanup_off(tmp_path: Path) -> None:
    config = load_streams(streams(tmp_path, "    source_cleanup: {mode: off}\n"))["events"]
    assert not config.source_cleanup.enabled


def test_a_relative_file_archive_resolves_against_the_streams_file(tmp_path: Path) -> None:
    extra = "    source_cleanup: {mode: archive, archive_to: file://archive}\n"
    config = load_streams(streams(tmp_path, extra, source="file://sources"))["events"]
    assert config.source_cleanup.archive_to == f"file://{tmp_path / 'archive'}"


@pytest.mark.parametrize(
    ("extra", "source", "field", "says"),
    [
        ("    discovery: {mode: push}\n", None, "discovery.mode", "not one of"),
        ("    discovery: {mode: notifications}\n", None, "discovery.queue", "https://"),
        (f"    discovery: {{mode: notifications, queue: '{QUEUE}'}}\n", "file://src",
         "discovery.mode", "s3:// source"),
        (f"    discovery: {{queue: '{QUEUE}'}}\n", None, "discovery.queue", "notifications"),
        ("    discovery: {ordered_keys: maybe}\n", None, "discovery.ordered_keys", "true or"),
        (f"    discovery: {{mode: notifications, queue: '{QUEUE}', ordered_keys: false}}\n",
         None, "discovery.ordered_keys", "only for listing"),
        ("    discovery: {mode: notifications, queue: '" + QUEUE + "', backstop_interval: 1d}\n",
         None, "discovery.backstop_interval", "ISO-8601"),
        ("    discovery: {cursor: x}\n", None, "discovery.cursor", "unknown field"),
        ("    source_cleanup: {mode: archive}\n", None, "source_cleanup.archive_to", "archive"),
        ("    source_cleanup: {mode: archive, archive_to: s3://bucket/events/old}\n", None,
         "source_cleanup.archive_to", "inside the source"),
        ("    source_cleanup: {mode: delete, archive_to: s3://archive/b}\n", None,
         "source_cleanup.archive_to", "only for mode: archive"),
        ("    source_cleanup: {mode: delete, after: soon}\n", None, "source_cleanup.after",
         "ISO-8601"),
        ("    source_cleanup: {mode: shred}\n", None, "source_cleanup.mode", "not one of"),
        ("    source_cleanup: [delete]\n", None, "source_cleanup", "mapping"),
    ],
)  # fmt: skip
def test_an_invalid_field_is_named(
    tmp_path: Path, extra: str, source: str | None, field: str, says: str
) -> None:
    path = streams(tmp_path, extra, *([source] if source else []))
    with pytest.raises(StreamConfigError) as raised:
        load_streams(path)
    assert raised.value.stream == "events" and raised.value.field == field
    assert says in str(raised.value)
