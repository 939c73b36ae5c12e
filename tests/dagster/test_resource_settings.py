"""Resources configured by environment: the code location loads, and its resources see it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from dagster import Definitions, EnvVar, build_resources

from resources.catalog.settings import CatalogConfigError
from resources.coordination.errors import StoreConfigError
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.errors import ConfigError
from resources.publication.settings import PublicationConfigError
from resources.settings import field_types
from tests.support.settings_samples import Variable, documented_variables, sample
from tests.test_settings import DECLARATIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clicks_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A streams file somewhere else than the project, named by LEASEHOLD_STREAMS."""
    path = tmp_path / "elsewhere" / "streams.yaml"
    path.parent.mkdir()
    path.write_text(
        """
streams:
  clicks:
    source: file://sources/clicks
    schema: {click_id: string, clicked_at: timestamp}
    event_time: clicked_at
    table: file://lake/clicks
"""
    )
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(path))
    monkeypatch.setenv("LEASEHOLD_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LEASEHOLD_SQLITE_PATH", str(tmp_path / "c.db"))
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    return path


def test_the_code_location_reads_its_streams_file_from_the_environment(
    clicks_streams: Path,
) -> None:
    """Definitions-time code reads the settings from the environment, not from the fields of
    a resource bound to `EnvVar`s (reading those raises: they resolve only at run time)."""
    from coordination_assets.definitions import build_definitions

    defs = build_definitions()
    assert [s.name for s in defs.sensors or []] == [
        "clicks_discovery",
        "clicks_merge",
        "clicks_publish",
        "clicks_checks",
    ]
    assert [j.name for j in defs.jobs or []] == ["clicks_gc"]
    assert [s.name for s in defs.schedules or []] == [
        "coordination_status_hourly",
        "clicks_gc_hourly",
    ]
    assert [s.job_name for s in defs.schedules or []][1:] == ["clicks_gc"]
    with build_resources(defs.resources or {}) as resources:
        assert sorted(resources.lake.streams()) == ["clicks"]
        assert resources.lake.s3_endpoint_url == "http://127.0.0.1:9"
        assert (
            resources.lake.stream("clicks").table == f"file://{clicks_streams.parent}/lake/clicks"
        )


RESOURCES = (CoordinationResource, LakeResource, SparkResource, CatalogResource)


def test_the_resources_declare_every_setting() -> None:
    assert {d for r in RESOURCES for d in r.declarations} == set(DECLARATIONS)


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.__name__)
def test_a_resources_fields_are_its_declarations(resource: type) -> None:
    """Name, type, default and description of each field: those of its declared setting."""
    declared = [
        (f.name, field_types(d)[f.name], f.default, f.metadata["doc"] or None)
        for d in resource.declarations
        for f in dataclasses.fields(d)
    ]
    fields = [
        (name, info.annotation, info.default, info.description)
        for name, info in resource.model_fields.items()
    ]
    assert fields == declared


def test_from_env_binds_each_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text as `EnvVar`, integers as `EnvVar.int` (the UI shows where a value comes from);
    booleans parsed here: Dagster would take `no` for true."""
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_TABLE", "coord")
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_READ_CAPACITY", "25")
    monkeypatch.setenv("LEASEHOLD_SKIP_TABLE_CREATION", "no")
    monkeypatch.setenv("LEASEHOLD_SPARK_MASTER", "local[1]")
    coordination = CoordinationResource.from_env()
    assert isinstance(coordination.table_name, EnvVar)
    assert coordination.table_name.env_var_name == "LEASEHOLD_DYNAMODB_TABLE"
    assert coordination.provisioned_read_capacity_units.env_var_name == (
        "LEASEHOLD_DYNAMODB_READ_CAPACITY"
    )
    assert coordination.skip_table_creation is False
    assert coordination.backend == "sqlite"  # not set: the default
    assert SparkResource.from_env().master.env_var_name == "LEASEHOLD_SPARK_MASTER"
    with build_resources({"coordination": coordination}) as resources:
        settings = resources.coordination.settings()
    assert (settings.table_name, settings.provisioned_read_capacity_units) == ("coord", 25)


@pytest.mark.parametrize(
    ("var", "raw", "field", "error"),
    [
        (
            "LEASEHOLD_DYNAMODB_READ_CAPACITY",
            "ten",
            "provisioned_read_capacity_units",
            StoreConfigError,
        ),
        ("LEASEHOLD_STORE_BACKEND", "cassandra", "backend", StoreConfigError),
        ("LEASEHOLD_SKIP_TABLE_CREATION", "maybe", "skip_table_creation", StoreConfigError),
        ("LEASEHOLD_S3_ENDPOINT_URL", "localhost:9000", "s3_endpoint_url", ConfigError),
        ("LEASEHOLD_CATALOG", "hive", "catalog", CatalogConfigError),
        ("LEASEHOLD_GLUE_ENDPOINT_URL", "glue.local", "glue_endpoint_url", CatalogConfigError),
        (
            "LEASEHOLD_MAX_PUBLICATIONS_PER_RUN",
            "many",
            "max_publications_per_run",
            PublicationConfigError,
        ),
        (
            "LEASEHOLD_GC_SAFETY_DELAY_SECONDS",
            "a day",
            "gc_safety_delay_seconds",
            PublicationConfigError,
        ),
    ],
)
def test_a_bad_variable_fails_the_code_location_at_load_naming_the_field(
    clicks_streams: Path,
    monkeypatch: pytest.MonkeyPatch,
    var: str,
    raw: str,
    field: str,
    error: type[ConfigError],
) -> None:
    from coordination_assets.definitions import build_definitions

    monkeypatch.setenv(var, raw)
    with pytest.raises(error) as err:
        build_definitions()
    assert err.value.field == field and repr(raw) in str(err.value)


@pytest.mark.parametrize(
    ("resource", "field"),
    [
        (CoordinationResource(renew_interval_seconds=30.0), "renew_interval_seconds"),
        (
            CoordinationResource(unassigned_retry_after_seconds=0.5),
            "unassigned_retry_after_seconds",
        ),
        (CoordinationResource(backend="dynamodb", billing_mode="FREE"), "billing_mode"),
        (LakeResource(chunk_size=0), "chunk_size"),
        (CatalogResource(catalog="hive"), "catalog"),
        (CatalogResource(max_publications_per_run=0), "max_publications_per_run"),
    ],
)
def test_setup_validates_through_the_declarations(resource, field: str) -> None:
    with pytest.raises(Exception) as err:  # Dagster wraps it: "Error executing resource_fn"
        with build_resources({"resource": resource}):
            pass
    cause = err.value.__cause__ or err.value
    assert isinstance(cause, ConfigError) and cause.field == field


def test_an_unresolved_resource_says_to_read_the_environment(clicks_streams: Path) -> None:
    with pytest.raises(RuntimeError, match=r"LEASEHOLD_STREAMS.*LakeSettings\.from_env"):
        LakeResource.from_env().streams()


@pytest.mark.parametrize("variable", documented_variables(), ids=str)
def test_the_code_location_loads_with_each_variable_set(
    variable: Variable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each documented variable alone, set to a valid non-default value: the definitions load
    and the resource that declares it is bound to it (`EnvVar` for text and integers)."""
    from coordination_assets.definitions import build_definitions

    for name in [n for n in os.environ if n.startswith("LEASEHOLD_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(ROOT)  # the project's streams.yaml unless LEASEHOLD_STREAMS says else
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    raw, value = sample(variable, tmp_path)
    monkeypatch.setenv(variable.name, raw)
    defs = build_definitions()
    Definitions.validate_loadable(defs)
    (bound,) = [
        getattr(resource, variable.field)
        for resource in (defs.resources or {}).values()
        if variable.declaration in type(resource).declarations
    ]
    if hasattr(bound, "env_var_name"):
        assert bound.env_var_name == variable.name
    else:
        assert bound == value
    streams = ["clicks"] if variable.name == "LEASEHOLD_STREAMS" else ["events"]
    assert [s.name for s in defs.sensors or []] == [
        *(f"{s}_discovery" for s in streams),
        *(f"{s}_merge" for s in streams),
        *(f"{s}_publish" for s in streams),
        # The repository's events stream declares a rollup; the clicks test stream does not.
        *(f"{s}_rollup" for s in streams if s == "events"),
        *(f"{s}_checks" for s in streams),
    ]


@pytest.mark.parametrize(
    ("master", "remote", "local"),
    [
        (None, None, True),
        ("local[2]", None, True),
        ("local", None, True),
        ("spark://127.0.0.1:7077", None, False),
        ("yarn", None, False),
        (None, "sc://127.0.0.1:15002", False),
        ("local[2]", "sc://127.0.0.1:15002", False),  # the remote wins
    ],
)
def test_only_a_local_masters_executors_see_the_run_workers_disk(
    master: str | None, remote: str | None, local: bool
) -> None:
    """Merges take Spark's path (local files by path) only where the executors see them."""
    assert SparkResource(master=master, remote=remote).sees_local_files is local
