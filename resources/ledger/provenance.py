"""Where a small object's rows came from: the source objects of its work unit whose records it
holds, in row order (`Sources`), as the Spark task that wrote it counted them.

A task writes one small object per (part, date): a part is consecutive objects of one unit (or
one range of a large object), and each date's rows keep the order of the part's objects. So a
small object's rows are runs, one per source object: `(("a.jsonl", 120), ("b.jsonl", 80))`
means rows 0-119 came from `a.jsonl`, rows 120-199 from `b.jsonl`. The ledger keeps this with
the object (`SmallObject.sources`): which rows an object rewritten in place contributed is known
without reading the small object — which is collected once its date is merged — and the row ids
of those rows name them in a key index (`resources.dedupe.key_index`) long after.

An object committed before the ledger kept sources has none (`()`): its rows' source is known
only when its unit held one object. Pure.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib

from resources.errors import LeaseholdError

log = logging.getLogger(__name__)

Sources = tuple[tuple[str, int], ...]
"""(source object key, rows), in row order; the rows add up to the small object's."""


COMPRESS_OVER = 512
"""Sources text longer than this is stored compressed."""
COMPRESSED = "z:"
MAX_SOURCES_BYTES = 32 * 1024
"""The most a small object's sources take in the ledger: about 5,000 source objects of 40-byte
keys compressed (a unit holds at most `partition.max_objects`, 1,000 by default)."""


class SourcesError(LeaseholdError):
    """Sources text that is not what `sources_json` writes."""


def sources_json(sources: Sources) -> str:
    """The text the ledger stores: `""` for none, else a JSON list of `[key, rows]` — past
    `COMPRESS_OVER` characters zlib-compressed and base64-encoded behind `z:` (a unit's keys
    share their prefixes) — and `""` when even that is over `MAX_SOURCES_BYTES`, so that a
    ledger item and a commit's transaction stay within DynamoDB's bounds (400 KB an item, 4 MB
    a transaction of up to `MAX_OBJECTS_PER_COMMIT` objects)."""
    if not sources:
        return ""
    text = json.dumps([[key, rows] for key, rows in sources], ensure_ascii=False)
    if len(text) > COMPRESS_OVER:
        text = COMPRESSED + base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")
    if len(text.encode()) > MAX_SOURCES_BYTES:
        log.warning(
            "the sources of a small object of %d source objects take %d bytes, over %d: not "
            "kept (a replacement of one of them is refused)",
            len(sources), len(text.encode()), MAX_SOURCES_BYTES,
        )  # fmt: skip
        return ""
    return text


def sources_of(text: str | None) -> Sources:
    """What `sources_json` wrote (`()` for none). Raises `SourcesError` otherwise."""
    if not text:
        return ()
    try:
        if text.startswith(COMPRESSED):
            text = zlib.decompress(base64.b64decode(text[len(COMPRESSED) :])).decode()
        runs = json.loads(text)
        out = tuple((str(key), int(rows)) for key, rows in runs)
    except (ValueError, TypeError, zlib.error) as exc:
        raise SourcesError(f"not the sources of a small object: {text[:80]!r}: {exc}") from exc
    if any(rows < 0 for _, rows in out):
        raise SourcesError(f"a negative row count in {text[:80]!r}")
    return out


def positions_of(sources: Sources, key: str) -> list[tuple[int, int]]:
    """The row positions `[start, stop)` that came from `key`."""
    out, at = [], 0
    for source, rows in sources:
        if source == key and rows:
            out.append((at, at + rows))
        at += rows
    return out
