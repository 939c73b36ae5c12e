"""`table_format` in streams.yaml: a stream's table is published through the `PublicationTarget`
of that format; a value that is neither fails the load naming the stream and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.catalog import target
from resources.streams import (
    DEFAULT_TABLE_FORMAT,
    TABLE_FORMATS,
    StreamConfigError,
    load_streams,
)

STREAM = """
streams:
  events:
    source: file://sources
    schema: {{event_id: string, event_time: timestamp}}
    event_time: event_time
    table: file://lake/events
{extra}
"""


def load(tmp_path: Path, extra: str = ""):  # type: ignore[no-untyped-def]
    path = tmp_path / "streams.yaml"
    path.write_text(STREAM.format(extra=extra))
    return load_streams(path)["events"]


def test_the_streams_formats_are_the_targets() -> None:
    assert TABLE_FORMATS == target.TABLE_FORMATS
    assert DEFAULT_TABLE_FORMAT in TABLE_FORMATS


def test_without_a_table_format_a_stream_takes_the_default(tmp_path: Path) -> None:
    assert load(tmp_path).table_format == DEFAULT_TABLE_FORMAT


@pytest.mark.parametrize("table_format", [target.ICEBERG, target.MANIFESTS])
def test_each_table_format_is_taken(tmp_path: Path, table_format: str) -> None:
    assert load(tmp_path, f"    table_format: {table_format}").table_format == table_format


@pytest.mark.parametrize("value", ["hive", "Iceberg", "", "[iceberg]"])
def test_a_bad_table_format_fails_the_load_naming_the_field(tmp_path: Path, value: str) -> None:
    with pytest.raises(StreamConfigError, match="table_format") as raised:
        load(tmp_path, f"    table_format: {value!s}")
    assert raised.value.stream == "events"
    assert "iceberg, manifests" in str(raised.value)
