"""The rollup check on a stream really ingested (discovery tick, range run, Spark): a rollup
brought up to date passes `leasehold check`; a state that gained a batch the ledger never
committed fails it (exit 4, naming `rollups_exact` and the key); a batch half written only
warns; `leasehold rollup read` prints the state."""

from __future__ import annotations

import json

import pytest

from resources.aggregation.checks import run_all
from resources.aggregation.partials import ArrowPartials
from resources.aggregation.runner import ROLLED_UP, RollupRunner
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.cli.exit_status import EXIT_CHECK_FAILED
from resources.cli.main import main
from resources.coordination.items import ItemType
from resources.coordination.lease import LeaseTiming
from resources.objects.factory import object_store_for
from resources.rollup.cursor import RollupCursor, rollup_id
from resources.stores import build_store
from resources.streams import load_streams
from tests.cli.test_check import check, ingested  # noqa: F401 - the fixture
from tests.support.pipeline_env import STREAM, PipelineEnv

pytestmark = pytest.mark.slow

ROLLUP = """    rollups:
      per_user:
        group_by: [user_id]
        aggregates: {events: count, amount: sum(amount), largest: max(amount)}
"""


@pytest.fixture
def backend() -> str:
    """SQLite only: the check reads the store through the interface both backends pass the
    contract suite of (tests/ledger/test_rollup_state_contract.py); one Spark ingestion less."""
    return "sqlite"


@pytest.fixture
def rolled(ingested: PipelineEnv) -> PipelineEnv:  # noqa: F811 - the imported fixture
    """The ingested stream with a rollup declared and run until current."""
    with ingested.streams_path.open("a") as f:
        f.write(ROLLUP)
    config = load_streams(ingested.streams_path)[STREAM]
    store = build_store(ingested.settings)
    outcomes = RollupRunner(
        store,
        object_store_for(config.table),
        STREAM,
        config.rollups[0],
        lambda input_bytes: ArrowPartials(config.columns),
        owner="test",
        timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
        work_dir=ingested.root / "scratch",
    ).run(dates(ingested))
    assert {o.outcome for o in outcomes} == {ROLLED_UP}
    return ingested


def dates(env: PipelineEnv) -> list[str]:
    return [tp.dt for tp in build_store(env.settings).table_partitions(STREAM)]


def test_a_current_rollup_passes_and_a_forged_batch_fails(
    rolled: PipelineEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    dt = dates(rolled)[0]
    store = build_store(rolled.settings)
    code, lines = check(capsys, "--full")
    [line] = [x for x in lines if "rollups_exact" in x]
    assert code == 0 and line.startswith("PASS"), lines
    assert main(["rollup", "read", STREAM, dt, "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sum(r["events"] for r in rows) == sum(
        o.row_count for o in store.ledger_objects(STREAM, dt)
    )

    # A batch the ledger never committed, written through the real fenced path.
    config = load_streams(rolled.streams_path)[STREAM]
    spec = config.rollups[0]
    sid = store.source_identifier(rollup_id(STREAM, spec), ItemType.ROLLUP_JOB)
    job = store.acquire(sid, dt, "forger", 60)
    key = next(iter(store.rollup_states(rollup_id(STREAM, spec), dt)))
    store.write_rollup_batch(
        job.token,
        rollup_id(STREAM, spec),
        dt,
        spec.mode,
        spec.aggregates,
        10**6,
        {key: (1, 1.0, 1.0)},
    )
    code, lines = check(capsys, "--full")
    [line] = [x for x in lines if "rollups_exact" in x]
    assert code == EXIT_CHECK_FAILED and line.startswith("FAIL") and key in line, lines

    # A batch being written is not judged: a warning, exit 0 for this check.
    store.renew(job.token, 60, json.dumps(RollupCursor(1, (1, 2)).state()))
    catalog = HiveManifestsTarget(LocalCatalog(rolled.root / "catalog.json"))
    [outcome] = run_all(config, store, object_store_for(config.table), catalog, full=True)
    assert outcome.verdict == "WARN" and "being written" in outcome.summary, outcome
