"""A reader holding one manifest version, in its own OS process, for the garbage-collection race
(`tests/chaos/test_gc_reader_race.py`).

`python -m tests.support.gc_reader_child '<json>'` resolves nothing itself: it was handed the
version (`location`, as an engine that planned a query against it would hold it) and reads it
again and again — the Spectrum manifest, then every file it names, checking each length — until
`stop` exists or `limit_s` passes. `ready` is written after the first complete read; `saw_missing`
after the first failed one. `out` gets {rounds, first_ms, last_ok_ms, failures: [{at_ms, key,
error}]}, every time taken after the fact on the wall clock (so a failure's `at_ms` is no earlier
than the deletion that caused it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from resources.objects.factory import object_store_for
from resources.publication.manifest import SPECTRUM_NAME, read_spectrum


def now_ms() -> int:
    return int(time.time() * 1000)


def main(args: dict[str, Any]) -> None:
    objects = object_store_for(args["root_url"], endpoint_url=args.get("endpoint_url"))
    location: str = args["location"]
    stop, ready, saw_missing = Path(args["stop"]), Path(args["ready"]), Path(args["saw_missing"])
    deadline = time.monotonic() + float(args["limit_s"])
    rounds, first_ms, last_ok_ms = 0, now_ms(), 0
    failures: list[dict[str, Any]] = []
    while not stop.exists() and time.monotonic() < deadline:
        key = objects.key_of(location + SPECTRUM_NAME)
        try:
            for entry in read_spectrum(objects, location):
                key = objects.key_of(entry.url)
                data = objects.get_bytes(key)
                if len(data) != entry.content_length:
                    raise ValueError(f"{len(data)} bytes, the manifest says {entry.content_length}")
        except Exception as exc:  # noqa: BLE001 — every failure is the verdict's evidence
            failures.append(
                {"at_ms": now_ms(), "key": key, "error": f"{type(exc).__name__}: {exc}"}
            )
            saw_missing.touch()
            time.sleep(0.01)  # once the version is gone every round fails: do not spin
            continue
        rounds += 1
        last_ok_ms = now_ms()
        if rounds == 1:
            ready.touch()
    out = {"rounds": rounds, "first_ms": first_ms, "last_ok_ms": last_ok_ms, "failures": failures}
    Path(args["out"]).write_text(json.dumps(out))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
