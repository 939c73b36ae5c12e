"""Records by key across dates: the table's key index under `dedupe: {scope: table}`.

    .venv/bin/python bench/table_keys.py [--keys 100000000] [--dates 100]
        [--new 10000 100000 1000000] [--resend 0.2] [--cross 0.01] [--due 3] [--latest]
        [--work DIR]

A table of `--keys` keys over `--dates` dates, each date's key index a `keys.arrow` written
as `DedupedFiles._write_index` writes it (`KeyIndex.to_bytes()`: an uncompressed Arrow file)
into a local object store under `--work` (default a temporary directory under /tmp, removed at
the end). The keys are real: ids `k-<n>` hashed by `resources.dedupe.keys.hash_ids` (the two
SipHash digests), one date at a time so memory holds one date's ids; each date's keys are
spread over small objects of 100,000 rows, named by `row_ids`.

Then one simulated publication run per `--new`: that many new rows over `--due` due dates (a
small object of 1,000 rows each, in turn), a `--resend` share of them re-sends of keys already
in random dates' indexes, a `--cross` share fresh ids sent again on another due date in the same
run (an at-least-once producer across event dates), the rest fresh. Timed, wall and CPU of this
process: (a) reading every date's index as `TableKeysPublication._dates` does through
`DedupedFiles.state` (the object store's bytes, `KeyIndex.from_bytes`; the
served state's `dedupe.json` and the store's queries are left out), (b) `lost_to_other_dates`.
Hashing the new rows is not timed (the same under any scope). Checked: a re-send of another
date's key is lost, of the due date's own key not (its date resolves it); of a fresh key's rows,
those on a date other than its first committed row's are lost, the rest not.

With `--latest` (`mode: latest`, an int64 `order_by`): each index also holds its keys' order
values (key `k`'s is `k % 7`), each new row carries one at random in 0..9, and (b) is
`latest_across_dates`. Checked, row by row from the ids: a key goes to the date of its best
record among the new rows and its index entry (greatest order, then the later commit: an
index entry is older than any new row); new rows elsewhere lose, and an entry elsewhere is
taken.

The indexes are read back from the page cache (just written), not from a cold disk or S3: the
read figures are decoding and copying, the floor of a real read. The process's first read of
the whole table is timed apart (its memory comes fresh from the kernel, page by page, as in a
new process); each run's own read comes after it. Peak RSS is the process's (`ru_maxrss`), so
it never falls from one run to the next.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dedupe import clocked  # noqa: E402
from resources.dedupe.key_index import KeyedRows, KeyIndex, row_ids  # noqa: E402
from resources.dedupe.keys import hash_ids  # noqa: E402
from resources.dedupe.served import INDEX_NAME  # noqa: E402
from resources.dedupe.table_scope import (  # noqa: E402
    DateKeys,
    latest_across_dates,
    lost_to_other_dates,
)
from resources.objects.base import ObjectStore  # noqa: E402
from resources.objects.factory import object_store_for  # noqa: E402

OBJECT_ROWS = 100_000  # rows of a date's published small objects
NEW_OBJECT_ROWS = 1_000  # rows of a run's new small objects
START_MS = 1_772_323_200_000


def system_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def ids(prefix: str, numbers: np.ndarray) -> pa.Array:
    """`<prefix><n>` per number, as a string array (built in Arrow, not in Python)."""
    return pc.binary_join_element_wise(prefix, pc.cast(pa.array(numbers), pa.string()), "")


class Table:
    """The table's dates and their published key indexes in a local object store."""

    def __init__(self, root: Path, keys: int, dates: int, latest: bool) -> None:
        self.latest = latest
        self.order_type = pa.int64() if latest else None
        self.objects: ObjectStore = object_store_for(f"file://{root}")
        self.dts = [str(np.datetime64("2026-01-01") + i) for i in range(dates)]
        self.starts = np.linspace(0, keys, dates + 1).astype(np.int64)  # date d: [d], [d+1]
        self.keys = keys
        self.next_object = 1  # the ledger's dense object ids, in commit order

    def key_of(self, dt: str) -> str:
        return f"_manifests/dt={dt}/v1/{INDEX_NAME}"

    def write(self) -> int:
        """Every date's index, one date in memory at a time; the bytes written."""
        total = 0
        for d, dt in enumerate(self.dts):
            lo, hi = int(self.starts[d]), int(self.starts[d + 1])
            h = hash_ids(ids("k-", np.arange(lo, hi, dtype=np.int64)))
            rows = np.concatenate(
                [self._object(min(OBJECT_ROWS, hi - at)) for at in range(lo, hi, OBJECT_ROWS)]
            )
            by = np.argsort(h.h1, kind="stable")
            order = pa.array(entry_order(lo + by)) if self.latest else None
            entries = KeyedRows(h.h1[by], h.h2[by], rows[by], order)
            index = KeyIndex(entries, self.next_object - 1)
            data = index.to_bytes()  # as DedupedFiles._write_index writes it
            self.objects.put_bytes(self.key_of(dt), data)
            total += len(data)
            if d % 10 == 9:
                print(f"  wrote {d + 1} dates, {hi:,} keys, {total:,} bytes", flush=True)
        return total

    def _object(self, rows: int) -> np.ndarray:
        self.next_object += 1
        return row_ids(self.next_object - 1, rows)

    def read(self, dt: str) -> KeyIndex:
        """`DedupedFiles.state`'s read of a date's index."""
        data = self.objects.get_bytes(self.key_of(dt))
        return KeyIndex.from_bytes(data, self.order_type)

    def first_read(self) -> tuple[float, float, float]:
        """Every date's index read once, the process's first read (its memory fresh from the
        kernel, as in a new run's process): wall, CPU and of it system CPU seconds."""
        before = system_cpu()
        wall, cpu, indexes = clocked(lambda: [self.read(dt) for dt in self.dts])
        assert sum(len(i) for i in indexes) == self.keys
        return wall, cpu, system_cpu() - before


def entry_order(numbers: np.ndarray) -> np.ndarray:
    """The order value of the indexed key `k-<n>`."""
    values: np.ndarray = numbers % 7
    return values


class NewRows:
    """One run's new rows in commit order: objects of `NEW_OBJECT_ROWS` rows, each on a due
    date in turn; per row its kind, its key's source date (re-sends) and its id."""

    def __init__(self, table: Table, args: argparse.Namespace, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.due = sorted(rng.choice(len(table.dts), args.due, replace=False).tolist())
        obj = np.arange(n) // NEW_OBJECT_ROWS
        self.date = np.array(self.due)[obj % args.due]  # per row, its due date (index in dts)
        self.committed_at = START_MS + obj * 1000
        self.object_id = table.next_object + obj
        u = rng.random(n)
        self.resend = u < args.resend
        cross = (u >= args.resend) & (u < args.resend + args.cross)
        key = rng.integers(0, table.keys, n)
        self.source = np.searchsorted(table.starts, key, side="right") - 1
        self.source[~self.resend] = -1
        number = np.where(self.resend, key, np.arange(n))
        fresh = ~self.resend & ~cross
        elsewhere = {d: np.nonzero(fresh & (self.date != d))[0] for d in self.due}
        for i in np.nonzero(cross)[0]:  # again the fresh id of a row on another due date
            others = elsewhere[int(self.date[i])]
            number[i] = others[rng.integers(len(others))] if len(others) else i
        self.number = number
        self.order = rng.integers(0, 10, n)
        self.ids = pa.array(
            [
                f"k-{k}" if r else f"new-{seed}-{k}"
                for r, k in zip(self.resend, number.tolist(), strict=True)
            ]
        )

    def keyed(self, d: int, latest: bool) -> tuple[KeyedRows, np.ndarray, np.ndarray]:
        """Due date `d`'s new rows (row ids after its index's), their commit times, and their
        positions among all new rows."""
        at = np.nonzero(self.date == d)[0]
        h = hash_ids(self.ids.take(pa.array(at)))
        position = at % NEW_OBJECT_ROWS
        rows = (self.object_id[at].astype(np.int64) << 32) | position
        order = pa.array(self.order[at]) if latest else None
        return KeyedRows(h.h1, h.h2, rows, order), self.committed_at[at], at


def expected_lost(new: NewRows, code: dict[int, int], rows: np.ndarray) -> np.ndarray:
    """The rule, row by row from the ids: a re-send loses to its key's date when that is
    another date; of a fresh key's rows, those on another date than its first committed row
    (commit time, date's code, row id) lose."""
    lost = new.resend & (new.source != new.date)
    first: dict[int, tuple[int, int, int, int]] = {}
    for i in np.nonzero(~new.resend)[0]:
        k = int(new.number[i])
        mine = (int(new.committed_at[i]), code[int(new.date[i])], int(rows[i]), int(new.date[i]))
        if k not in first or mine < first[k]:
            first[k] = mine
    for i in np.nonzero(~new.resend)[0]:
        lost[i] = first[int(new.number[i])][3] != new.date[i]
    return lost


def expected_latest(
    new: NewRows, table: Table, rows: np.ndarray
) -> tuple[np.ndarray, dict[int, int]]:
    """The rule under `latest`, from the ids: per new row whether it loses to another date;
    and per re-sent key, the due date (index in dts) that takes it from its indexed date (its
    best new record beats the entry there)."""
    best: dict[tuple[str, int], tuple[int, int, str, int, int]] = {}
    for i in range(len(new.number)):
        key = ("k" if new.resend[i] else "new", int(new.number[i]))
        dt = table.dts[int(new.date[i])]
        mine = (int(new.order[i]), int(new.committed_at[i]), dt, int(rows[i]), int(new.date[i]))
        best[key] = max(best.get(key, mine), mine)
    taken: dict[int, int] = {}
    for (kind, k), (*_, date) in list(best.items()):
        if kind != "k":
            continue
        home = int(np.searchsorted(table.starts, k, side="right") - 1)
        entry = (int(entry_order(np.array(k))), 0, table.dts[home], 0, home)
        if entry > best[(kind, k)]:  # older than any new row: ties go to the new one
            best[(kind, k)] = entry
        elif home != date:
            taken[k] = date
    lost = np.array(
        [
            best[("k" if r else "new", int(k))][4] != d
            for r, k, d in zip(new.resend, new.number, new.date, strict=True)
        ]
    )
    return lost, taken


def run(table: Table, args: argparse.Namespace, n: int, seed: int) -> dict[str, Any]:
    new = NewRows(table, args, n, seed)
    order = new.due + [d for d in range(len(table.dts)) if d not in new.due]
    code = {d: c for c, d in enumerate(order)}
    keyed = {d: new.keyed(d, table.latest) for d in new.due}
    read_wall, read_cpu, indexes = clocked(lambda: [table.read(table.dts[d]) for d in order])
    none_order = pa.array([], pa.int64()) if table.latest else None
    none = KeyedRows(
        np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64), none_order
    )
    dates = [
        DateKeys(table.dts[d], idx.entries, keyed[d][0], keyed[d][1])
        if d in keyed
        else DateKeys(table.dts[d], idx.entries, none, np.zeros(0, np.int64))
        for d, idx in zip(order, indexes, strict=True)
    ]
    if table.latest:
        look_wall, look_cpu, moves = clocked(lambda: latest_across_dates(dates))
        lost, taken = moves.lost, moves.taken
    else:
        look_wall, look_cpu, lost = clocked(lambda: lost_to_other_dates(dates))
        taken = {}
    got, rows = np.zeros(n, bool), np.zeros(n, np.int64)
    for d in new.due:
        got[keyed[d][2]] = lost.get(table.dts[d], np.zeros(0, bool))  # none: no new rows
        rows[keyed[d][2]] = keyed[d][0].row
    if table.latest:
        want, want_taken = expected_latest(new, table, rows)
        assert sum(int(m.sum()) for m in taken.values()) == len(want_taken)
    else:
        want = expected_lost(new, code, rows)
    assert np.array_equal(got, want), f"{int((got != want).sum())} rows judged otherwise"
    indexed = sum(len(i) for i in indexes)
    return {
        "new": n, "read_wall": read_wall, "read_cpu": read_cpu, "look_wall": look_wall,
        "look_cpu": look_cpu, "indexed": indexed, "lost": int(got.sum()),
        "taken": sum(int(m.sum()) for m in taken.values()),
        "resent_elsewhere": int((new.resend & (new.source != new.date)).sum()),
        "rss": peak_rss_mib(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=100_000_000)
    parser.add_argument("--dates", type=int, default=100)
    parser.add_argument("--new", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--resend", type=float, default=0.2)
    parser.add_argument("--cross", type=float, default=0.01)
    parser.add_argument("--due", type=int, default=3)
    parser.add_argument("--latest", action="store_true", help="mode: latest (an order column)")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-table-keys-"))
    try:
        table = Table(work / "table", args.keys, args.dates, args.latest)
        wall, cpu, written = clocked(table.write)
        print(f"wrote {args.dates} indexes in {wall:.1f} s ({cpu:.1f} CPU s)", flush=True)
        on_disk = sum(p.stat().st_size for p in (work / "table").rglob(INDEX_NAME))
        assert on_disk == written
        first = table.first_read()
        print(f"first read: {first}", flush=True)
        results = []
        for seed, n in enumerate(args.new, start=1):
            results.append(run(table, args, n, seed))
            print(f"  {results[-1]}", flush=True)
        report(args, on_disk, first, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(
    args: argparse.Namespace,
    on_disk: int,
    first: tuple[float, float, float],
    results: list[dict[str, Any]],
) -> None:
    print(
        f"\n{'latest' if args.latest else 'first'}: "
        f"{args.keys:,} keys over {args.dates} dates; new rows over {args.due} due dates, "
        f"{args.resend:.0%} re-sends, {args.cross:.0%} fresh ids again on another due date"
    )
    print(f"key indexes: {on_disk:,} bytes, {on_disk / args.keys:.2f} bytes a key")
    print(
        f"first read of every index in the process: {first[0]:.2f} s wall, {first[1]:.2f} s "
        f"CPU ({first[2]:.2f} s system), {first[0] / args.keys * 1e9:.1f} ns a key; the runs "
        "below read again, into memory the process already has"
    )
    print(
        "\n| new rows | lost to other dates | taken from other dates | read s (wall / CPU) "
        "| lookup s (wall / CPU) | lookup µs per new record | read ns per indexed key "
        "| peak RSS MiB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['new']:,} | {r['lost']:,} | {r['taken']:,} "
            f"| {r['read_wall']:.2f} / {r['read_cpu']:.2f} "
            f"| {r['look_wall']:.3f} / {r['look_cpu']:.3f} "
            f"| {r['look_wall'] / r['new'] * 1e6:.2f} "
            f"| {r['read_wall'] / r['indexed'] * 1e9:.1f} | {r['rss']:,.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
