"""A pytest plugin: the AWS actions product code called during the run (recorded by
`tests/support/aws_action_recorder.py`, in this process and in the children started through
`recorded_command`), compared at session finish with `docs/iam-policy.json`.

"Called but not granted" (and "called, but no IAM name known") is checked on every run, whatever
subset ran: a subset calls a subset of the actions, each of which must be granted. "Granted but
never called" is checked only when the run was the whole suite — collected from `tests/` (or
from no path), no `-k`/`-m`/`--ignore`/deselection, every collected test run through teardown,
none failed — since only then is "never called" evidence. A problem fails the run (exit status
1, so the CI command `python -m pytest` fails) and is listed in the terminal summary, which
with `-v` also lists every action recorded and the API operations that needed it.

Under pytest-xdist each worker records into the directory as a child process does, and the
controller compares at its session finish.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws_action_recorder import RECORD_DIR_ENV, ActionRecorder
from tests.support.aws_actions import ROOT, load_policy, policy_actions, policy_problems


@dataclass
class _Run:
    """What the session's hooks learn about the run."""

    recorder: ActionRecorder = field(default_factory=ActionRecorder)
    children_dir: Path | None = None
    deselected: int = 0
    finished: int = 0
    problems: list[str] = field(default_factory=list)
    summary: str = ""


RUN = _Run()


def pytest_configure(config: pytest.Config) -> None:
    if is_xdist_worker(config):
        # The controller set the directory before starting its workers: a worker records
        # there, as a child process does, and the controller compares at its session finish.
        RUN.recorder = ActionRecorder(Path(os.environ[RECORD_DIR_ENV]) / f"{os.getpid()}.tsv")
    RUN.recorder.install()
    if RECORD_DIR_ENV not in os.environ:  # not already inside a recorded run
        RUN.children_dir = Path(tempfile.mkdtemp(prefix="iam-actions-"))
        os.environ[RECORD_DIR_ENV] = str(RUN.children_dir)


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_unconfigure(config: pytest.Config) -> None:
    RUN.recorder.uninstall()
    if RUN.children_dir is not None:
        shutil.rmtree(RUN.children_dir, ignore_errors=True)
        os.environ.pop(RECORD_DIR_ENV, None)


def pytest_deselected(items: list[pytest.Item]) -> None:
    """-k, -m, --deselect, --lf and --sw all report here: such a run is not the whole suite."""
    RUN.deselected += len(items)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        RUN.finished += 1


def whole_suite(session: pytest.Session) -> str | None:
    """None if this run was the whole suite, run through; otherwise why not."""
    config = session.config
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        for arg in config.args:
            path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
            if "::" in arg or path not in (ROOT, ROOT / "tests"):
                return f"only {arg} was collected"
    option = config.option
    if option.keyword or option.markexpr or option.ignore or option.ignore_glob:
        return "tests were selected (-k, -m or --ignore)"
    # Under xdist the workers collect and deselect; the controller sees only these options.
    if option.deselect or option.lf or option.stepwise:
        return "tests were deselected (--deselect, --lf or --sw)"
    if RUN.deselected:
        return f"{RUN.deselected} tests were deselected"
    if session.testsfailed:
        return f"{session.testsfailed} tests failed"
    # `testscollected`, not `items`: under xdist the controller holds no items of its own.
    if RUN.finished < session.testscollected:
        return f"{session.testscollected - RUN.finished} collected tests did not run"
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Compare the actions called with the policy; a problem fails the run."""
    if session.config.option.collectonly or is_xdist_worker(session.config):
        return
    children = RUN.recorder.merge_children(RUN.children_dir) if RUN.children_dir else 0
    partial = whole_suite(session)
    called = set(RUN.recorder.actions)
    RUN.problems = policy_problems(
        called, policy_actions(load_policy()), whole_suite=partial is None
    )
    unused = "checked" if partial is None else f"not checked: {partial}"
    RUN.summary = (
        f"{len(called)} AWS actions called by product code (this process and {children} "
        f"recorded child processes); grants never called: {unused}"
    )
    if RUN.problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not RUN.summary:
        return
    terminalreporter.section("IAM policy (docs/iam-policy.json)", red=bool(RUN.problems))
    for problem in RUN.problems:
        terminalreporter.line(f"IAM: {problem}", red=True)
    if config.option.verbose > 0 or RUN.problems:
        for action, operations in sorted(RUN.recorder.actions.items()):
            terminalreporter.line(f"  {action}  <- {', '.join(sorted(operations))}")
    terminalreporter.line(RUN.summary)
