"""The `leasehold` command line's parser: the options every command takes, and each command's
subparser, registered by the module that holds the command (`add_<command>_parser`)."""

from __future__ import annotations

import argparse

from resources.cli.changes import add_changes_parser
from resources.cli.check import add_check_parser
from resources.cli.cleanup import add_cleanup_parser
from resources.cli.config import add_config_parser
from resources.cli.demo import add_demo_parser
from resources.cli.doctor import DOCTOR_HELP, add_doctor_command
from resources.cli.exit_status import EPILOG
from resources.cli.gc import add_gc_parser
from resources.cli.init import add_init_parser
from resources.cli.notifications import add_notifications_parser
from resources.cli.purge import add_purge_parser
from resources.cli.redrive import add_redrive_parser
from resources.cli.rollup import add_rollup_parser
from resources.cli.run import add_run_parser
from resources.cli.schema import add_schema_parser
from resources.cli.status import add_status_parser
from resources.cli.table import add_table_parser

DESCRIPTION = """\
`leasehold` command line: run the main job, check the streams, show coordination status and
the configuration, read the published tables as an engine does, collect garbage, clean up
sources, purge expired items.

The store is configured by the same `LEASEHOLD_*` environment variables as the Dagster
resource (`resources.stores.settings`); with none set it is the embedded SQLite file.
"""

DEBUG_HELP = "on an error, print its traceback too; log leasehold's debug messages"
VERBOSE_HELP = (
    "show what libraries print (Spark's and Java's logs, Dagster's warnings) and every "
    "detail line; without it Spark's log goes to LEASEHOLD_SPARK_LOG "
    "(default <data dir>/logs/spark.log)"
)


def build_parser() -> argparse.ArgumentParser:
    """`leasehold [--debug] [--verbose] <command> ...`, each command in the order `--help`
    lists them."""
    parser = argparse.ArgumentParser(
        prog="leasehold",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    common = common_options()
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help, parents=[common], epilog=EPILOG, formatter_class=parser.formatter_class
        )

    add_run_parser(add)
    add_init_parser(add)
    add_demo_parser(add)
    add_status_parser(add)
    add_config_parser(add)
    add_doctor_command(add("doctor", help=DOCTOR_HELP))
    add_purge_parser(add)
    add_check_parser(add)
    add_table_parser(add, common)
    add_gc_parser(add)
    add_cleanup_parser(add)
    add_redrive_parser(add)
    add_changes_parser(add, common)
    add_rollup_parser(add, common)
    add_schema_parser(add)
    add_notifications_parser(add)
    return parser


def common_options() -> argparse.ArgumentParser:
    """`--debug` and `--verbose`, also accepted after the command (`leasehold status --debug`);
    SUPPRESS keeps a subcommand from resetting one given before it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    common.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    )
    return common
