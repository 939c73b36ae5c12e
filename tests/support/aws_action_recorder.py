"""Records every AWS action product code calls, in the test process and in the child processes
the tests start (`python -m tests.support.aws_action_recorder <module> <args>...`).

How calls are recorded: botocore's `before-parameter-build` event, which a client emits once
per API call with the call's own parameters. The recorder wraps `botocore.session.Session.
create_client` — every boto3 client, in product code or in a test, is made there — and
registers its hook on a new client only when **product code made it**: the nearest frame of
this checkout on the creating stack is under `resources/` or `coordination_assets/`. A client a
test makes to create a bucket or a table is therefore never recorded. A product client used
directly by a test (`store.client.update_item(...)` to corrupt an item) is not recorded either:
at call time the nearest frame of this checkout must not be under `tests/`. Calls from
s3transfer's worker threads (uploads, downloads) have no frame of this checkout and are
recorded: their client is the product's. The hook only reads; every call still goes over HTTP
to the moto server. Nothing in product code knows about any of this.

Child processes: the plugin (`tests/support/iam_policy_plugin.py`) names a directory in
`IAM_RECORD_DIR`, which children inherit; a child started through `recorded_command` installs a
recorder that appends each new action to its own file there as soon as it is first called (a
child killed by a chaos test keeps what it recorded), and the plugin reads them all at the end.
A wrapper command rather than a hook in product code or a sitecustomize: the product stays
unaware of tests, and nothing is installed into the environment. Every child started on
AWS-backed settings uses it; the subprocesses that do not (`dagster dev`, the `tests/dagster`
and `tests/cli/test_run_outcomes.py` commands) run on SQLite and local files only.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import botocore.session

from tests.support.aws_actions import ROOT, iam_actions

RECORD_DIR_ENV = "IAM_RECORD_DIR"
PRODUCT_DIRS = frozenset({"resources", "coordination_assets"})
THIS_FILE = os.path.abspath(__file__)


@functools.lru_cache(maxsize=4096)
def _origin(filename: str) -> str | None:
    """`product`, `tests` or None (a library, the standard library, this module) for a
    frame's file."""
    path = os.path.abspath(filename)
    if path == THIS_FILE:
        return None
    try:
        top = Path(path).relative_to(ROOT).parts[0]
    except (ValueError, IndexError):
        return None
    if top in PRODUCT_DIRS:
        return "product"
    return "tests" if top == "tests" else None


def nearest_origin(frame: FrameType | None) -> str | None:
    """The origin of the innermost frame of this checkout on the stack from `frame` out."""
    while frame is not None:
        origin = _origin(frame.f_code.co_filename)
        if origin is not None:
            return origin
        frame = frame.f_back
    return None


class ActionRecorder:
    """The IAM actions product clients called, each with the API operations that needed it;
    with a `sink`, each new (action, operation) is also appended there at once."""

    def __init__(self, sink: Path | None = None) -> None:
        self.actions: dict[str, set[str]] = {}
        self.sink = sink
        self._lock = threading.Lock()
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        """Wrap client creation so that product clients report their calls."""
        if self._original is not None:
            return
        original = botocore.session.Session.create_client
        recorder = self

        @functools.wraps(original)
        def create_client(session: botocore.session.Session, *args: Any, **kwargs: Any) -> Any:
            client = original(session, *args, **kwargs)
            if nearest_origin(sys._getframe(1)) == "product":
                client.meta.events.register("before-parameter-build", recorder.on_call)
            return client

        self._original = original
        botocore.session.Session.create_client = create_client  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._original is not None:
            botocore.session.Session.create_client = self._original  # type: ignore[method-assign]
            self._original = None

    def on_call(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        """botocore's `before-parameter-build` handler: record the call unless a test made it
        directly on a product client."""
        if nearest_origin(sys._getframe(1)) == "tests":
            return
        service = model.service_model.service_name
        for action in iam_actions(service, model.name, params):
            self.add(action, f"{service}:{model.name}")

    def add(self, action: str, operation: str) -> None:
        with self._lock:
            seen = self.actions.setdefault(action, set())
            if operation in seen:
                return
            seen.add(operation)
            if self.sink is not None:
                with self.sink.open("a") as out:
                    out.write(f"{action}\t{operation}\n")

    def merge_children(self, directory: Path) -> int:
        """Add what child processes recorded under `directory`; how many files there were."""
        files = sorted(directory.glob("*.tsv"))
        for path in files:
            for line in path.read_text().splitlines():
                action, _, operation = line.partition("\t")
                if operation:
                    self.add(action, operation)
        return len(files)


def recorded_command(module: str, *args: str) -> list[str]:
    """The command running `python -m <module> <args>` with its AWS actions recorded (when the
    test run asked for it through `IAM_RECORD_DIR`)."""
    return [sys.executable, "-m", "tests.support.aws_action_recorder", module, *args]


def run_child(argv: list[str]) -> None:
    """`python -m <argv[0]> <argv[1:]>` in this process, recorded if `IAM_RECORD_DIR` is set."""
    directory = os.environ.get(RECORD_DIR_ENV)
    if directory:
        ActionRecorder(Path(directory) / f"{os.getpid()}.tsv").install()
    module, *rest = argv
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    run_child(sys.argv[1:])
