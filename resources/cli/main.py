"""The `leasehold` entry point: parse the command line (`resources.cli.parser`), run the
command, and end it with its exit status (`resources.cli.exit_status`): an error leasehold
expects is one line on stderr, any other a bug with its traceback.

Each command is in its own module (`run`, `check`, `status`, `table`, `doctor`, ...).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence

from resources.cli.exit_status import EXIT_CONFIG, EXIT_FAILURE
from resources.cli.faults import door_hint, leasehold_error_in, retries_to_log_file
from resources.cli.one_line import one_line
from resources.cli.parser import build_parser
from resources.errors import ConfigError


def configure_logging(debug: bool) -> None:
    """Warnings and errors of every library on stderr; leasehold's own debug messages too with
    --debug. The root stays at WARNING even then: botocore's debug log prints signed request
    headers (session tokens among them), py4j's every gateway command."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if debug:
        for name in ("resources", "coordination_assets"):
            logging.getLogger(name).setLevel(logging.DEBUG)


def quiet_libraries(verbose: bool) -> None:
    """Unless --verbose, what libraries print for their developers stays out of the output:
    PySpark's warning about the pandas version is dropped (`quiet_spark` moves the JVM's log)."""
    if verbose:
        return
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A `LeaseholdError` (also one Dagster wrapped) ends it with one line on
    stderr — two for a component that could not be used (`door_hint`) — and exit code 2
    (`ConfigError`) or 1; any other error is a bug and propagates with its traceback."""
    args = build_parser().parse_args(argv)
    configure_logging(args.debug)
    quiet_libraries(args.verbose)
    quiet_retries = retries_to_log_file(args.verbose or args.debug)
    command: Callable[[argparse.Namespace], int] = args.fn  # each subparser sets its command
    try:
        return command(args)
    except BrokenPipeError:
        # The reader stopped reading (`| head`): nothing wrong with the command. Python's own
        # advice: point stdout at devnull, so flushing it at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        error = leasehold_error_in(exc)  # Dagster wraps what a resource or a sensor raises
        if error is None:
            raise
        shown = args.debug or args.verbose
        if shown:
            traceback.print_exception(exc)
        print(f"leasehold: {one_line(error)}", file=sys.stderr)
        hint = door_hint(error, exc, shown=shown, argv=sys.argv[1:] if argv is None else argv)
        if hint:
            print(f"leasehold: {hint}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(error, ConfigError) else EXIT_FAILURE
    finally:
        quiet_retries()


if __name__ == "__main__":
    sys.exit(main())
