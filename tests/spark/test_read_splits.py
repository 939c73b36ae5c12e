"""Reads split into a few tasks per core, and the session's setting is put back after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resources.spark import session
from resources.spark.session import SPLIT_CONF, read_splits


def test_a_read_is_split_for_the_cores_and_the_setting_restored(
    spark: Any, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(session.os, "cpu_count", lambda: 2)
    line = '{"a": "' + "x" * 90 + '"}\n'
    for i in range(8):
        (tmp_path / f"{i}.json").write_text(line * 50_000)  # ~4.6 MB each, ~37 MB in all
    read_bytes = sum(p.stat().st_size for p in tmp_path.iterdir())
    before = spark.conf.get(SPLIT_CONF)
    with read_splits(spark, read_bytes, 8):
        split = int(spark.conf.get(SPLIT_CONF))
        partitions = spark.read.schema("a string").json(str(tmp_path)).rdd.getNumPartitions()
    total = read_bytes + 8 * session.OPEN_COST_BYTES
    assert split == max(session.MIN_SPLIT_BYTES, -(-total // 8))
    assert partitions >= 8  # 4 tasks per core, 2 cores: no core left idle in a last wave
    assert spark.conf.get(SPLIT_CONF) == before
    # Without the split, Spark's session default: these 37 MB are far fewer tasks.
    assert spark.read.schema("a string").json(str(tmp_path)).rdd.getNumPartitions() < partitions


def test_the_split_stays_within_bounds(spark: Any, monkeypatch) -> None:
    monkeypatch.setattr(session.os, "cpu_count", lambda: 2)
    with read_splits(spark, 1000, 1):
        assert int(spark.conf.get(SPLIT_CONF)) == session.MIN_SPLIT_BYTES
    with read_splits(spark, 100 << 30, 1):
        assert int(spark.conf.get(SPLIT_CONF)) == session.MAX_SPLIT_BYTES
