"""Faults at the door, as Dagster meets them: the instance's storage that does not answer, and
a resource whose component does not.

Dagster wraps whatever a resource's setup raises in `DagsterResourceFunctionError` ("Error
executing resource_fn on ResourceDefinition coordination"), so a run failed by a lease table
that refuses connections shows Dagster's sentence on top and leasehold's below it, in a chain
of tracebacks. An error that is a `DagsterError` passes Dagster's user-code boundary as it is:
`LeaseholdRunError` carries leasehold's message through it, the original as its cause, so the
run's failure says first what failed. dagster-postgres retries a connection five times,
logging each retry at WARNING with the driver's four-line message, then raises "too many
retries": `open_instance` keeps those retries, drops their log lines and says once which
storage did not answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import DagsterError, DagsterInstance

from resources.errors import ComponentUnreachableError, LeaseholdError, causes

PG_RETRY_LOG = "Retrying failed database connection"
PG_CONNECT_TIMEOUT_S = "5"
"""libpq's connect timeout (`PGCONNECT_TIMEOUT`) when the environment sets none."""


class LeaseholdRunError(DagsterError):
    """A `LeaseholdError` raised by a resource's setup, as the run's failure: its message on
    top (not Dagster's wrapper's), the original error as `__cause__`."""


@contextmanager
def failing_the_run() -> Iterator[None]:
    """Around a resource's setup: a `LeaseholdError` fails the run with its own message."""
    try:
        yield
    except LeaseholdError as exc:
        raise LeaseholdRunError(" ".join(str(exc).split())) from exc


class DagsterStorageUnreachableError(ComponentUnreachableError):
    """The Dagster instance's storage (Postgres in production) did not answer."""

    component = "Dagster's storage"


class _DropPgRetries(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(PG_RETRY_LOG)


@contextmanager
def open_instance(home: str) -> Iterator[DagsterInstance]:
    """`DagsterInstance.get()` (the instance at `home`, `DAGSTER_HOME`), its storage's failure
    to answer raised as `DagsterStorageUnreachableError` naming `home` and the driver's cause
    (host and port; never the URL, which may hold a password). Each connection attempt is
    bounded (`PG_CONNECT_TIMEOUT_S` unless PGCONNECT_TIMEOUT is set)."""
    # libpq waits for a server that accepts but never answers (or a dropped SYN) as long as
    # the OS lets it, minutes, and dagster-postgres tries six times: bound each attempt.
    os.environ.setdefault("PGCONNECT_TIMEOUT", PG_CONNECT_TIMEOUT_S)
    quiet = _DropPgRetries()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        instance = DagsterInstance.get()
    except Exception as exc:  # noqa: BLE001 - dagster-postgres's, SQLAlchemy's, psycopg2's
        if not _storage_failure(exc):
            raise
        raise DagsterStorageUnreachableError(
            f"Dagster instance at {home} (the storage in its dagster.yaml): {_cause(exc)}"
        ) from exc
    finally:
        root.removeFilter(quiet)
    with instance:
        yield instance


def _storage_failure(exc: BaseException) -> bool:
    """Whether `exc` is a database that did not answer (not a bug, not a bad dagster.yaml)."""
    names = {type(e).__name__ for e in causes(exc)}
    return bool(names & {"DagsterPostgresException", "OperationalError"})


def _cause(exc: BaseException) -> str:
    """The driver's own first line, from the innermost error: psycopg2's names host and port."""
    innermost = list(causes(exc))[-1]
    lines = [line.strip() for line in str(innermost).splitlines() if line.strip()]
    return lines[0] if lines else type(innermost).__name__
