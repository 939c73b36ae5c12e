"""Run several `leasehold` commands in one process, as a user would type them one by one.

`python -m tests.support.cli_sequence '[["init", "dir"], ["run", "--stream", "x"]]'` calls the
real entry point (`resources.cli.main.main`) with each argument list in turn and prints
`=== leasehold <args> -> exit <code>` after each, stopping at the first failure. One process
means one Spark JVM for all of them: a test of init + run on two streams pays Spark's start-up
once, not four times (tens of seconds each on a loaded 2-core CI machine).
"""

from __future__ import annotations

import json
import sys

from resources.cli.main import main


def run_all(commands: list[list[str]]) -> int:
    for argv in commands:
        code = main(argv)
        sys.stdout.flush()
        print(f"=== leasehold {' '.join(argv)} -> exit {code}", flush=True)
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(run_all(json.loads(sys.argv[1])))
