"""What `workspace.yaml` loads: the definitions, in the project directory.

Dagster adds the workspace's `working_directory` to the import path but leaves the process in
the directory `dagster dev` (or the daemon) was started from, and the run workers it launches
inherit that. leasehold's relative defaults — `streams.yaml`, `data/` — would then depend on
where someone happened to start Dagster. The code location therefore works in the project
directory, like `leasehold run` started from it; absolute `LEASEHOLD_*` paths are unaffected.
"""

import os
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
os.chdir(PROJECT_DIR)

from coordination_assets.definitions import defs  # noqa: E402

__all__ = ["defs"]
