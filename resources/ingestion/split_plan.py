"""How a chunk's work units become Spark tasks (driver side, pure: object lists and sizes only).

A unit's objects are cut into parts of about `PART_BYTES` (`unit_parts`), each written as one
table object per date. The cut depends on the unit alone — never on which other units share the
chunk — so a retry of a unit writes the same objects per date in the same order, which a unit
committing in several transactions relies on (`unit_commit`). Parts are then packed into tasks
of about an equal share of the chunk's bytes, a few per core (`pack_tasks`): that sets the
parallelism, without changing what is written.

A large object (one whose unit commits it chunk by chunk, `commit_every_bytes`): uncompressed
JSON lines are read as byte ranges in parallel, one part per range, cut at line ends by a census
(`line_census`) that also numbers each range's first line; gzip (which cannot seek) and CSV
(whose records may span lines) are read in sequence by one task (`sequential_part`).
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.ingestion.split_task import Part, Piece
from resources.ingestion.work_units import UnitObject

PART_BYTES = 32 << 20
"""Source bytes of one part: one table object per date each. Smaller parts give a run more
parallel tasks and more small objects (which merges compact)."""
TASKS_PER_CORE = 3
MIN_TASK_BYTES = 1 << 20
UNKNOWN_SIZE = 1 << 20
"""Taken for an object whose size its lease item does not know (written before sizes were)."""


def unit_parts(
    unit: str, objects: Sequence[UnitObject], part_bytes: int = PART_BYTES
) -> list[Part]:
    """The unit's objects in order, cut into consecutive parts of at most `part_bytes` (at
    least one object each)."""
    parts: list[Part] = []
    pieces: list[Piece] = []
    held = 0
    for obj in objects:
        size = obj.size if obj.size >= 0 else UNKNOWN_SIZE
        if pieces and held + size > part_bytes:
            parts.append(Part(unit, len(parts), tuple(pieces)))
            pieces, held = [], 0
        pieces.append(Piece(obj.key))
        held += size
    if pieces:
        parts.append(Part(unit, len(parts), tuple(pieces)))
    return parts


def pack_tasks(parts: Sequence[Part], sizes: dict[str, int], cores: int) -> list[tuple[Part, ...]]:
    """Consecutive parts packed into tasks of about the chunk's bytes / (cores x
    `TASKS_PER_CORE`), at least `MIN_TASK_BYTES` each: a task has enough to amortise its
    start, and the cores stay busy to the end. `sizes`: bytes by object key."""

    def part_size(part: Part) -> int:
        return sum(max(sizes.get(p.key, UNKNOWN_SIZE), 0) for p in part.pieces)

    total = sum(part_size(p) for p in parts)
    target = max(MIN_TASK_BYTES, -(-total // (max(cores, 1) * TASKS_PER_CORE)))
    tasks: list[tuple[Part, ...]] = []
    task: list[Part] = []
    held = 0
    for part in parts:
        size = part_size(part)
        if task and held + size > target:
            tasks.append(tuple(task))
            task, held = [], 0
        task.append(part)
        held += size
    if task:
        tasks.append(tuple(task))
    return tasks


def sequential_part(unit: str, key: str, offset: int, line: int, commit_bytes: int) -> Part:
    """A large object read by one task from `offset` (line `line`) on, in chunks."""
    return Part(unit, 0, (Piece(key, offset, None, line, commit_bytes),))


def nominal_cuts(offset: int, size: int, commit_bytes: int) -> list[int]:
    """Where the ranges of a large object from `offset` are cut before the census moves each
    cut to the next line end: every `commit_bytes`, and the object's end."""
    cuts = list(range(offset, size, max(commit_bytes, 1)))
    return [*cuts, size] if cuts else [offset, size]


def range_parts(unit: str, key: str, ranges: Sequence[tuple[int, int, int]]) -> list[Part]:
    """One part per (start, end, first line) range, in order: part k is the object's chunk k."""
    return [
        Part(unit, k, (Piece(key, start, end, first_line),))
        for k, (start, end, first_line) in enumerate(ranges)
    ]
