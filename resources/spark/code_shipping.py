"""The project's code on the executors: shipped with the session, not required in the image.

Tasks that run leasehold's own functions (a reader that fetches, parses and writes on the
executors) import `resources...` there. On `local[*]` the executors are threads of this
process's JVM and their Python workers are started from this interpreter, so the driver's own
`sys.path` serves. On a standalone cluster or behind a Spark Connect server the executors are
other processes, possibly on other machines, that see none of the driver's disk.

The choice: ship, not bake. When a session is built for a master or a Connect URL, the
`resources` package (every file of it, as it is on the driver) goes into one zip, named by the
hash of its contents and cached under `$LEASEHOLD_DATA_DIR/spark-code`, and is added to the
session: `SparkContext.addPyFile` on a classic session, `SparkSession.addArtifacts(...,
pyfile=True)` over Spark Connect. Each Python worker then has the zip on its `sys.path`, so the
executors run exactly the driver's code — no image rebuild per change, and no skew between a
driver and executors of different versions. Baking the code into the executors' image would
also work, but then a driver and an image of different commits fail in ways no check catches.

What is not shipped, and is the image's job: the interpreter and the third-party packages the
tasks import (pyspark itself, pyarrow, boto3, pyyaml), at the versions of the driver's
environment, and `spark.pyspark.python` / `PYSPARK_PYTHON` naming that interpreter.
`coordination_assets` is not shipped either: it is Dagster's definitions, never imported by a
task. Data files of the package travel in the zip but are read through `zipimport` only, not as
paths on disk.

May import nothing of the project but `resources.errors` and `resources.settings`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from resources.settings import default_data_dir

log = logging.getLogger(__name__)

PACKAGES = ("resources",)
"""The packages tasks import; `coordination_assets` (Dagster's definitions) is not one."""

ZIP_PREFIX = "leasehold-code-"


def project_root() -> Path:
    """The directory holding the `resources` package this module was imported from."""
    return Path(__file__).resolve().parents[2]


def needs_shipping(master: str | None, remote: str | None) -> bool:
    """Whether the executors are other processes than this interpreter's: a master or a Connect
    URL, not `local[...]` (nor a local Connect server, `remote="local[N]"`)."""
    target = remote or master
    return bool(target) and not str(target).startswith("local")


def package_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, Path]]:
    """Every file of `packages` under `root` as (name in the zip, path), sorted, without
    bytecode caches."""
    files = []
    for package in packages:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((path.relative_to(root).as_posix(), path))
    return files


def code_zip(cache_dir: Path | None = None, root: Path | None = None) -> Path:
    """The zip of the project's packages, built once per content: its name carries the hash of
    every file's name and bytes, so a changed file makes a new zip and an unchanged tree reuses
    the one already built. Written to a temporary name and renamed, so a concurrent builder
    never sees half a zip."""
    root = root or project_root()
    cache_dir = cache_dir or default_data_dir() / "spark-code"
    files = [(name, path.read_bytes()) for name, path in package_files(root)]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    target = cache_dir / f"{ZIP_PREFIX}{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".building-", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in files:
                # A fixed date: the same tree gives the same bytes.
                z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.info("built %s (%d files)", target, len(files))
    return target


def ship_code(spark: Any, master: str | None, remote: str | None) -> Path | None:
    """Add the project's code to `spark`'s executors when they are not this interpreter's
    (`needs_shipping`); the zip shipped, or None."""
    if not needs_shipping(master, remote):
        return None
    path = code_zip()
    if remote:
        # Connect: uploaded to the server, on the Python path of this session's workers only.
        spark.addArtifacts(str(path), pyfile=True)
    else:
        context = spark.sparkContext
        if path.name in (context._python_includes or ()):
            return path  # a session got again (`getOrCreate`): Spark refuses a path twice
        # Classic: served by the driver, fetched by each executor. It is also put on this
        # process's `sys.path`, behind the `resources` already imported (its `__path__` wins).
        context.addPyFile(str(path))
    log.info("shipped %s to the executors of %s", path.name, remote or master)
    return path
