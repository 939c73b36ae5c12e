"""Source partition key <-> Dagster dynamic partition key: reversible, never ambiguous.

Dagster accepts almost any key, with three traps measured on 1.13 (docs/architecture.md): the empty
key can't be materialized, a key containing `...` can't end a CLI `--partition-range`, and `|`
breaks inside a MultiPartitionsDefinition. Keys are therefore percent-escaped minimally: `%`
(the escape itself), `|`, and the third dot of any run of dots. Everything else — spaces,
commas, brackets, slashes, non-ASCII — stays as it is, so keys read naturally in the UI.
"""

from __future__ import annotations

from urllib.parse import unquote

from resources.errors import LeaseholdError


class PartitionKeyError(LeaseholdError, ValueError):
    """A key that has no partition key (empty), or a partition key no source key maps to."""


def to_partition_key(source_key: str) -> str:
    if not source_key:
        raise PartitionKeyError("a source partition key can't be empty")
    out: list[str] = []
    for ch in source_key:
        if ch == "%":
            out.append("%25")
        elif ch == "|":
            out.append("%7C")
        elif ch == "." and len(out) >= 2 and out[-1] == "." and out[-2] == ".":
            out.append("%2E")
        else:
            out.append(ch)
    return "".join(out)


def from_partition_key(partition_key: str) -> str:
    # Every literal '%' was escaped, so unquoting is the exact inverse. Non-ASCII characters
    # were never escaped and pass through unchanged.
    try:
        return unquote(partition_key, errors="strict")
    except UnicodeDecodeError as exc:  # an escape `to_partition_key` never writes, e.g. %FF
        raise PartitionKeyError(
            f"{partition_key!r} is not a partition key leasehold wrote: {exc.reason} in its "
            "percent-escapes"
        ) from None
