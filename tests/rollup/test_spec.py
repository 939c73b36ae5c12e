"""A rollup's declaration in streams.yaml: validated with the stream, each mistake named by
its field under the stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.rollup.aggregates import Aggregate, Function
from resources.rollup.spec import RollupSpec
from resources.rollup.state import Mode
from resources.streams import StreamConfigError, load_streams

STREAM = """
streams:
  events:
    source: file://sources
    schema: {{event_id: string, user_id: string, amount: double, n: long, event_time: timestamp}}
    event_time: event_time
    table: file://lake/events
    rollups:
{rollups}
"""


def load(tmp_path: Path, rollups: str):
    path = tmp_path / "streams.yaml"
    path.write_text(STREAM.format(rollups=rollups))
    return load_streams(path)["events"]


def test_a_declared_rollup_is_parsed(tmp_path: Path) -> None:
    stream = load(
        tmp_path,
        "      per_user:\n"
        "        group_by: [user_id]\n"
        "        aggregates: {events: count, amount: sum(amount), top: max(n)}\n"
        "        mode: opaque\n"
        "      per_day:\n"
        "        aggregates: {events: count()}\n",
    )
    assert stream.rollups == (
        RollupSpec(
            "per_user",
            ("user_id",),
            (
                Aggregate("events", Function.COUNT),
                Aggregate("amount", Function.SUM, "amount"),
                Aggregate("top", Function.MAX, "n"),
            ),
            Mode.OPAQUE,
        ),
        RollupSpec("per_day", (), (Aggregate("events", Function.COUNT),), Mode.TRANSACTIONAL),
    )


@pytest.mark.parametrize(
    ("declared", "field", "says"),
    [
        ("      r: {group_by: [nope], aggregates: {c: count}}", "rollups.r.group_by", "'nope'"),
        ("      r: {aggregates: {c: sum(user_id)}}", "rollups.r.aggregates.c", "is string"),
        ("      r: {aggregates: {c: avg(amount)}}", "rollups.r.aggregates.c", "is not count"),
        ("      r: {aggregates: {c: sum}}", "rollups.r.aggregates.c", "sum needs a column"),
        ("      r: {aggregates: {c: count}, mode: exactly}", "rollups.r.mode", "'exactly'"),
        ("      r: {aggregates: {}}", "rollups.r.aggregates", "must map"),
        ("      r: {aggregates: {c: count}, by: [x]}", "rollups.r.by", "unknown field"),
        (
            "      r: {group_by: [user_id], aggregates: {user_id: count}}",
            "rollups.r.aggregates.user_id",
            "group_by",
        ),
    ],
)
def test_each_mistake_names_its_field(tmp_path: Path, declared: str, field: str, says: str):
    with pytest.raises(StreamConfigError) as raised:
        load(tmp_path, declared)
    assert raised.value.field == field and says in str(raised.value), str(raised.value)
    assert "stream 'events'" in str(raised.value)
