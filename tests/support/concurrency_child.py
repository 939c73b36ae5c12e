"""A lease holder in its own OS process, driven by the concurrency tests.

`hold`: acquire a named partition, save progress, say "ready", wait for "go", then try to
complete twice — through its `Lease` and directly against the store with its old token — and
write down what happened. `take`: wait until the partition can be acquired, then record the
progress state and epoch it received and complete it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from resources.coordination.errors import PartitionNotOwnedError, PartitionUnavailableError
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.stores import build_store
from resources.stores.settings import StoreSettings


def main() -> None:
    args = json.loads(sys.argv[1])
    settings = StoreSettings(**args["settings"])
    timing = LeaseTiming(args["timeout"], args["renew"])
    out = Path(args["out"])
    store = build_store(settings)
    sid = store.source_identifier("race")
    key = args["key"]
    if args["mode"] == "hold":
        item = store.acquire(sid, key, args["owner"], timing.ownership_timeout_s)
        lease = Lease(store, item, timing).start()
        lease.save_progress(args["progress"])
        (out.parent / f"{out.name}.ready").write_text("ready")
        go = out.parent / f"{out.name}.go"
        while not go.exists():
            time.sleep(0.05)
        result = {"epoch": item.epoch}
        try:
            lease.complete({"by": args["owner"]})
            result["lease_complete"] = "accepted"
        except LeaseLostError as exc:
            result["lease_complete"] = f"refused: {exc}"
        try:
            store.complete(item.token)
            result["store_complete"] = "accepted"
        except PartitionNotOwnedError as exc:
            result["store_complete"] = f"refused: {exc}"
        lease.stop()
        out.write_text(json.dumps(result))
    else:
        deadline = time.monotonic() + args["wait"]
        while True:
            try:
                item = store.acquire(sid, key, args["owner"], timing.ownership_timeout_s)
                break
            except PartitionUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        store.complete(item.token, progress_state=json.dumps({"by": args["owner"]}))
        out.write_text(json.dumps({"epoch": item.epoch, "progress": item.progress}))
    store.close_store()


if __name__ == "__main__":
    main()
