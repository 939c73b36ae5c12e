"""The exit statuses of `leasehold` and the text of `--help` that says what each means.

Every command ends with one of these; `EPILOG` is printed under the help of `leasehold` and of
each of its commands.
"""

EXIT_FAILURE = 1
EXIT_CONFIG = 2  # also argparse's code for a bad command line
EXIT_PARTITIONS_FAILED = 3
EXIT_CHECK_FAILED = 4

EPILOG = """\
exit status:
  0  success (`check`, `run`: every check passed or only warned)
  1  failure: a store, object store or catalog unreachable, no store or catalog where one
     was looked for, a table or date the catalog does not have, a run that crashed, a stream
     whose garbage collection stopped (`gc` collects the others), a key `redrive` did not
     put back (not a dead letter, or no such item; the others were re-driven)
  2  invalid configuration (the message names the field; `leasehold config` checks it all
     and shows what each setting is and where it came from) or invalid command line
  3  `run`: some source partitions were not ingested, each listed with its reason and when it
     is retried; the others were ingested
  4  a check failed (`check`: one line per check: PASS, WARN or FAIL, stream, check, summary)

`init`: 1 when the source cannot become a stream (no objects, unreadable objects, nothing that
parses); 2 when the sample does not settle a choice: the message names the flag that does
(--format, --event-time, --record-id, --name).

An error leasehold expects is printed as one line, `leasehold: <message>`; --debug adds its
traceback and leasehold's debug logs. Any other error is a bug and prints its traceback.
"""
