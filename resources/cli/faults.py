"""How a command ends on an error leasehold raised on purpose: a few lines, not a traceback.

A `LeaseholdError` may reach the command wrapped — Dagster wraps what a resource's setup or a
sensor raises in its own errors — so the chain of causes is searched for it. A component that
could not be used (`ComponentUnreachableError`: the lease store, an object store, the catalog,
Spark, Dagster's storage) gets a second line naming it and pointing at `leasehold doctor`; its
traceback goes to the log file (on the terminal with --verbose or --debug). Anything else is a
bug: `main` lets it propagate with its traceback.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from resources.errors import ComponentUnreachableError, LeaseholdError, causes
from resources.retry import RETRY_RECORD
from resources.settings import default_data_dir


def leasehold_error_in(exc: BaseException) -> LeaseholdError | None:
    """The first `LeaseholdError` in `exc`'s chain of causes; None when there is none."""
    return next((e for e in causes(exc) if isinstance(e, LeaseholdError)), None)


def error_log() -> Path:
    return default_data_dir() / "logs" / "leasehold.log"


def log_traceback(raised: BaseException, argv: Sequence[str]) -> Path | None:
    """Append `raised`'s traceback to the log file; where it went, None if it could not be
    written (the data directory may be what is wrong)."""
    path = error_log()
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(f"{stamp} leasehold {' '.join(argv)}\n")
            traceback.print_exception(raised, file=out)
        return path
    return None


def door_hint(
    error: LeaseholdError, raised: BaseException, *, shown: bool, argv: Sequence[str] = ()
) -> str | None:
    """For a component that could not be used, the line after the error's own: which one, and
    `leasehold doctor`; where the traceback is (above when `shown`, else in the log file)."""
    if not isinstance(error, ComponentUnreachableError):
        return None
    line = f"{error.component} could not be used: run `leasehold doctor` for more"
    if shown:
        return f"{line} (the traceback is above)"
    logged = log_traceback(raised, argv)
    return f"{line} (the traceback: {logged})" if logged else line


class _RetriesToLogFile(logging.Handler):
    """Retry records (`log_retries`) appended to the log file; nothing said if it cannot be."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.addFilter(lambda record: getattr(record, RETRY_RECORD, False))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError):
            path = error_log()
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as out:
                out.write(self.format(record) + "\n")


def retries_to_log_file(verbose: bool) -> Callable[[], None]:
    """Unless --verbose (or --debug), a retry's warning goes to the log file, not the terminal:
    a retry that worked changes nothing the command prints, and the error after the last
    attempt says how many there were. Call after `logging.basicConfig`; returns what undoes
    it (for a process that runs more than one command: the tests)."""
    if verbose:
        return lambda: None
    root = logging.getLogger()
    handlers = list(root.handlers)
    to_file = _RetriesToLogFile()
    for handler in handlers:
        handler.addFilter(_not_a_retry)
    root.addHandler(to_file)

    def undo() -> None:
        root.removeHandler(to_file)
        for handler in handlers:
            handler.removeFilter(_not_a_retry)

    return undo


def _not_a_retry(record: logging.LogRecord) -> bool:
    return not getattr(record, RETRY_RECORD, False)
