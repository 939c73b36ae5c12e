"""A source object's fingerprint: what tells one content of a key from another.

S3 gives every object an ETag (its listing's and HEAD's `ETag`, an event's `eTag`), quoted in
listings and HEADs, bare in events: kept bare here. A local file has none, so its fingerprint
is its modification time in nanoseconds and its size, `mtime-<ns>-<size>`: a file rewritten
in place gets a new one (a rewrite that keeps both — `touch -d` back to the same nanosecond
and the same length — is not seen). An empty fingerprint is unknown (recorded before
fingerprints were kept): then sizes are compared, as before.

Pure: no I/O.
"""

from __future__ import annotations

UNKNOWN = ""
"""The fingerprint of an object recorded before fingerprints were kept."""


def bare_etag(etag: str | None) -> str:
    """An S3 ETag without its quotes (`"abc"` -> `abc`); None -> `UNKNOWN`. Raises nothing."""
    return (etag or UNKNOWN).strip('"')


def file_etag(mtime_ns: int, size: int) -> str:
    """A local file's fingerprint: `mtime-<ns>-<size>`. Raises nothing."""
    return f"mtime-{mtime_ns}-{size}"


def same_content(recorded_etag: str, recorded_size: int, etag: str, size: int) -> bool:
    """Whether an object seen now (`etag`, `size`) is the content that was recorded: equal
    fingerprints when both are known (whatever the sizes), else equal sizes when both are known
    (-1 is unknown), else True (nothing to tell them apart by). Raises nothing."""
    if recorded_etag and etag:
        return recorded_etag == etag
    if recorded_size >= 0 and size >= 0:
        return recorded_size == size
    return True
