"""A rollup writer in its own OS process, for the rollup chaos tests.

`python -m tests.support.rollup_child '<json>'` runs `RollupRunner.run(dts)` over the lake
(`tests.support.merge_child.Lake`) with the `events` table's rollup `per_user` in the given
mode, computing partials with pyarrow (`ArrowPartials`: no JVM per child); with `served`, recomputed
from what each publication serves (`ServedRows`, as under `dedupe: latest`). At the `nth` time
the runner reaches `step` ("computed", "pending", "transaction", "committed") it writes
`marker` and then SIGKILLs itself (`do: kill`) or blocks until `<marker>.release` exists
(`do: pause`; the test SIGSTOPs it meanwhile, so it wakes a zombie). Outcomes go to `out`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from resources.aggregation.partials import ArrowPartials
from resources.aggregation.runner import RollupRunner
from resources.aggregation.served_rows import ServedRows
from resources.rollup.spec import RollupSpec, parse_rollups
from resources.stores.base import CoordinationStore
from tests.support.merge_child import TABLE, Lake, write_atomically

SCHEMA = {"event_id": "string", "user_id": "string", "amount": "double", "event_time": "timestamp"}


def per_user(mode: str) -> RollupSpec:
    """Events, total and largest amount per user and day."""
    declared = {
        "group_by": ["user_id"],
        "aggregates": {"events": "count", "amount": "sum(amount)", "largest": "max(amount)"},
        "mode": mode,
    }
    return parse_rollups({"per_user": declared}, SCHEMA)[0]


def runner(
    lake: Lake,
    store: CoordinationStore,
    mode: str,
    owner: str,
    on_step: Any = None,
    max_objects_per_batch: int = 4,
    served: bool = False,
) -> RollupRunner:
    return RollupRunner(
        store,
        lake.objects(),
        TABLE,
        per_user(mode),
        lambda input_bytes: ArrowPartials(lake.config().columns),
        owner=owner,
        timing=lake.timing(),
        work_dir=Path(lake.root) / "work" / owner,
        max_objects_per_batch=max_objects_per_batch,
        on_step=on_step,
        served_rows=ServedRows(store, lake.objects(), TABLE) if served else None,
    )


def main(args: dict[str, Any]) -> None:
    lake = Lake(**args["lake"])
    seen = 0

    def on_step(step: str, dt: str) -> None:
        nonlocal seen
        if step != args.get("step"):
            return
        seen += 1
        if seen != args["nth"]:
            return
        marker = Path(args["marker"])
        write_atomically(marker, {"step": step, "dt": dt, "pid": os.getpid()})
        if args["do"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        release = marker.with_name(marker.name + ".release")
        while not release.exists():
            time.sleep(0.02)

    store = lake.store()
    served = bool(args.get("served"))
    outcomes = runner(lake, store, args["mode"], args["owner"], on_step, served=served).run(
        args["dts"]
    )
    write_atomically(Path(args["out"]), [asdict(o) for o in outcomes])
    store.close_store()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
