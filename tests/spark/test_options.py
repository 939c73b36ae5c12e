"""Which options a session gets and from where (resources/spark/options.py); the table of keys in
docs/production.md kept equal to the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resources.spark.options import (
    DEFAULTS,
    EMBEDDED,
    REQUIRED,
    SparkOptionsError,
    parse_entries,
    read_spark_defaults,
    session_options,
    spark_defaults_file,
    uses_loopback,
)
from resources.spark.session import SparkConfigError, SparkSettings

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "spark://10.0.0.2:7077"


def test_the_embedded_session_binds_to_loopback_and_a_cluster_driver_does_not() -> None:
    embedded = session_options(None, None, {}, {})
    assert embedded["spark.driver.host"] == "127.0.0.1"
    assert embedded["spark.driver.bindAddress"] == "127.0.0.1"
    assert embedded["spark.ui.enabled"] == "false"
    cluster = session_options(CLUSTER, None, {}, {})
    for option in EMBEDDED:
        assert option.key not in cluster, option
    assert cluster["spark.sql.session.timeZone"] == "UTC"
    assert cluster["spark.sql.shuffle.partitions"] == "8"
    assert uses_loopback("local[2]", None, {}) and uses_loopback(None, "local[2]", {})
    assert not uses_loopback(CLUSTER, None, {})
    assert not uses_loopback(None, None, {"SPARK_LOCAL_IP": "10.1.2.3"})


def test_the_users_options_win_over_leaseholds_defaults() -> None:
    from_file = {"spark.driver.host": "10.0.0.5", "spark.sql.shuffle.partitions": "64"}
    user = {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "32"}
    options = session_options(None, None, user, from_file)
    # What spark-defaults.conf sets is Spark's to apply: leasehold leaves the key alone...
    assert "spark.driver.host" not in options
    # ...and LEASEHOLD_SPARK_CONF wins over both.
    assert options["spark.sql.shuffle.partitions"] == "32"
    assert options["spark.executor.memory"] == "2g"
    assert options["spark.driver.bindAddress"] == "127.0.0.1"


def test_a_required_key_given_another_value_is_refused_naming_where() -> None:
    with pytest.raises(SparkOptionsError, match=r"conf: spark.sql.session.timeZone=Europe/Paris"):
        session_options(None, None, {"spark.sql.session.timeZone": "Europe/Paris"}, {})
    with pytest.raises(SparkOptionsError, match="spark-defaults.conf"):
        session_options(CLUSTER, None, {}, {"spark.sql.session.timeZone": "Europe/Paris"})
    assert session_options(None, None, {"spark.sql.session.timeZone": "UTC"}, {})


def test_a_connect_client_sends_sql_options_only_and_refuses_others() -> None:
    options = session_options(None, "sc://10.0.0.3:15002", {"spark.sql.x": "1"}, {})
    assert options and all(k.startswith("spark.sql.") for k in options)
    assert options["spark.sql.x"] == "1"
    with pytest.raises(SparkOptionsError, match=r"spark.executor.memory: .*on the server"):
        session_options(None, "sc://10.0.0.3:15002", {"spark.executor.memory": "2g"}, {})
    # A Connect server this process starts is embedded: loopback as any local session.
    assert session_options(None, "local[2]", {}, {})["spark.driver.host"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        ("", {}),
        ("spark.a=1", {"spark.a": "1"}),
        (
            " spark.a = 1 ; spark.b=x=y;\n# note\nspark.c=-Dp=q -Dr=s ",
            {"spark.a": "1", "spark.b": "x=y", "spark.c": "-Dp=q -Dr=s"},
        ),
    ],
)
def test_leasehold_spark_conf_entries(text: str, entries: dict[str, str]) -> None:
    assert parse_entries(text) == entries


@pytest.mark.parametrize("bad", ["spark.a", "a=1", "spark.a=", "spark a=1"])
def test_a_bad_entry_fails_fast_naming_the_setting(bad: str) -> None:
    with pytest.raises(SparkConfigError, match=r"invalid Spark configuration: conf: "):
        SparkSettings.from_env({"LEASEHOLD_SPARK_CONF": f"spark.ok=1;{bad}"})


def test_spark_defaults_conf_is_read_where_spark_reads_it(tmp_path: Path) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text(
        "# comment\n! also\nspark.driver.host   10.0.0.5\nspark.executor.memory=2g\n"
        "spark.local.dir: /scratch\nnot.spark 1\n\n"
    )
    assert spark_defaults_file({"SPARK_CONF_DIR": str(tmp_path)}) == conf
    assert spark_defaults_file({"SPARK_HOME": "/opt/spark"}) == Path(
        "/opt/spark/conf/spark-defaults.conf"
    )
    assert read_spark_defaults(conf) == {
        "spark.driver.host": "10.0.0.5",
        "spark.executor.memory": "2g",
        "spark.local.dir": "/scratch",
    }
    assert read_spark_defaults(tmp_path / "absent.conf") == {}


def test_settings_options_layer_the_file_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.host 10.0.0.5\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    settings = SparkSettings.from_env(
        {"LEASEHOLD_SPARK_MASTER": CLUSTER, "LEASEHOLD_SPARK_CONF": "spark.driver.port=7078"}
    )
    options = settings.options("app")
    assert options["spark.master"] == CLUSTER and options["spark.app.name"] == "app"
    assert options["spark.driver.port"] == "7078"
    assert "spark.driver.host" not in options  # the file's: Spark applies it


def documented_keys() -> dict[str, str]:
    """Key -> value of the rows of docs/production.md's Spark options table."""
    text = (REPO / "docs" / "production.md").read_text()
    section = text.split("### Spark options", 1)[1].split("\n#", 1)[0]
    return dict(re.findall(r"^\| `(spark\.[^`]+)` \| `([^`]*)` \|", section, flags=re.M))


def test_the_documented_keys_are_the_ones_leasehold_sets() -> None:
    assert documented_keys() == {o.key: o.value for o in DEFAULTS + EMBEDDED + REQUIRED}
