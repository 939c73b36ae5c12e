"""The `dedupe` and `on_change` fields: defaults, every field checked, one message naming the
stream and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.key_settings import DATE, FIRST, IGNORE, LATEST, NONE, published_rows_leave
from resources.streams import StreamConfigError, load_streams


def streams(tmp_path: Path, extra: str, record_id: str = "    record_id: id\n") -> Path:
    path = tmp_path / "streams.yaml"
    path.write_text(
        "streams:\n  events:\n"
        "    source: s3://bucket/events\n"
        "    schema: {id: string, t: timestamp, v: long}\n"
        "    event_time: t\n"
        "    table: s3://lake/events\n" + record_id + extra
    )
    return path


def test_a_stream_with_a_record_id_keeps_the_first_record_per_date(tmp_path: Path) -> None:
    config = load_streams(streams(tmp_path, ""))["events"]
    assert (config.dedupe.mode, config.dedupe.scope, config.dedupe.active) == (FIRST, DATE, True)
    assert config.on_change == IGNORE


def test_a_stream_without_a_record_id_dedupes_nothing(tmp_path: Path) -> None:
    config = load_streams(streams(tmp_path, "", record_id=""))["events"]
    assert config.dedupe.mode == NONE and not config.dedupe.active


def test_latest_by_a_column(tmp_path: Path) -> None:
    extra = "    dedupe: {mode: latest, order_by: v}\n    on_change: append\n"
    config = load_streams(streams(tmp_path, extra))["events"]
    assert (config.dedupe.mode, config.dedupe.order_by) == (LATEST, "v")
    assert config.on_change == "append"
    table = load_streams(
        streams(tmp_path, "    dedupe: {mode: latest, order_by: v, scope: table}\n")
    )
    assert (table["events"].dedupe.mode, table["events"].dedupe.scope) == (LATEST, "table")


@pytest.mark.parametrize(
    ("extra", "record_id", "field", "words"),
    [
        ("    dedupe: {mode: newest}\n", True, "dedupe.mode", "not one of first, latest, none"),
        ("    dedupe: {mode: latest}\n", True, "dedupe.order_by", "greatest value wins"),
        ("    dedupe: {mode: latest, order_by: w}\n", True, "dedupe.order_by", "not a schema"),
        ("    dedupe: {mode: first, order_by: v}\n", True, "dedupe.order_by", "only latest"),
        ("    dedupe: {mode: first}\n", False, "dedupe.mode", "needs the stream's record_id"),
        ("    dedupe: {scope: week}\n", True, "dedupe.scope", "not one of date, table"),
        ("    dedupe: {keep: 1}\n", True, "dedupe.keep", "unknown field"),
        ("    dedupe: first\n", True, "dedupe", "must be a mapping"),
        ("    on_change: overwrite\n", True, "on_change", "not one of ignore, replace, append"),
    ],
)
def test_an_invalid_field_is_named(
    tmp_path: Path, extra: str, record_id: bool, field: str, words: str
) -> None:
    path = streams(tmp_path, extra, record_id="    record_id: id\n" if record_id else "")
    with pytest.raises(StreamConfigError) as raised:
        load_streams(path)
    assert raised.value.field == field and words in str(raised.value), str(raised.value)
    assert "'events'" in str(raised.value)


@pytest.mark.parametrize(
    ("extra", "served"),
    [
        ("    dedupe: {mode: latest, order_by: v}\n", True),
        ("    dedupe: {mode: latest, order_by: v, scope: table}\n", True),
        ("    on_change: replace\n", True),
        ("    dedupe: {mode: first}\n", False),
        ("    dedupe: {mode: none}\n", False),
    ],
)
def test_rollups_are_recomputed_per_publication_where_published_rows_can_leave(
    tmp_path: Path, extra: str, served: bool
) -> None:
    extra += "    rollups: {per_v: {group_by: [v], aggregates: {n: count, top: max(v)}}}\n"
    config = load_streams(streams(tmp_path, extra))["events"]
    assert published_rows_leave(config.dedupe, config.on_change) is served
    assert [s.name for s in config.rollups] == ["per_v"]


@pytest.mark.parametrize(
    ("extra", "record_id", "words"),
    [
        ("", False, "needs a dedupe policy"),
        ("    dedupe: {mode: none}\n", True, "needs a dedupe policy"),
        ("    dedupe: {scope: table}\n", True, "scope: table is not built"),
    ],
)
def test_replace_is_refused_where_it_cannot_keep_its_promise(
    tmp_path: Path, extra: str, record_id: bool, words: str
) -> None:
    path = streams(
        tmp_path,
        extra + "    on_change: replace\n",
        record_id="    record_id: id\n" if record_id else "",
    )
    with pytest.raises(StreamConfigError) as raised:
        load_streams(path)
    assert raised.value.field == "on_change" and words in str(raised.value), str(raised.value)


def test_replace_under_a_policy_per_date_is_accepted(tmp_path: Path) -> None:
    config = load_streams(streams(tmp_path, "    on_change: replace\n"))["events"]
    assert (config.on_change, config.dedupe.mode) == ("replace", "first")
