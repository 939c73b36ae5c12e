"""What an Iceberg table's retained snapshots reference, and the metadata files of expired
snapshots that none of them references any more.

A snapshot is a manifest list naming manifests, which name data files. Expiry
(`switching.expired_snapshots`, staged in a switch's commit) removes snapshots from the
table's metadata only: their manifest lists, and the manifests only they named, would stay
under `<table>/metadata/` for ever. Once that commit landed, `unreferenced_metadata` names
them, computed from the metadata as committed: the manifest list of each expired snapshot and
each manifest an expired snapshot names that no snapshot the committed metadata retains
names. Those are safe against a concurrent committer: a snapshot committed later is built on
a snapshot the table holds (its parent, a branch or tag head: never expired) and names only
that one's manifests and files it wrote itself, so it cannot name a manifest only expired
snapshots named. Data files are never deleted here (`gc.enabled=false` keeps other engines'
expiry from doing it; leasehold's GC deletes a data file no retained snapshot references,
`referenced_files`, after its safety delay).

What protects a reader is the retention (`iceberg_snapshot_retention_seconds`, and the count
`iceberg_max_snapshots`): a reader that loaded the table's metadata and is still planning a
scan of a snapshot expired since fails to read its manifest list (FileNotFoundError). A reader
planning on the current snapshot is safe until that snapshot expires: for age, the retention
after it was replaced; for count, `iceberg_max_snapshots` switches later.

`ManifestLists` remembers what each manifest list names (a manifest list is never rewritten),
and is told what the list a switch wrote names: after the first switch of a process, a switch
reads no manifest list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.concurrent import ExecutorFactory


@dataclass
class ManifestLists:
    """Manifest list path -> the paths of the manifests it names, each list read once."""

    named: dict[str, frozenset[str]] = field(default_factory=dict)

    def manifests(self, io: FileIO, manifest_list: str) -> frozenset[str]:
        """The manifests `manifest_list` names. Raises `FileNotFoundError` (or `OSError`)
        when it cannot be read."""
        found = self.named.get(manifest_list)
        if found is None:
            listed = read_manifest_list(io.new_input(manifest_list))
            found = self.named[manifest_list] = frozenset(m.manifest_path for m in listed)
        return found

    def remember(self, manifest_list: str, manifests: frozenset[str]) -> None:
        """Record what `manifest_list` names (a list this process just wrote)."""
        self.named[manifest_list] = manifests

    def keep_only(self, manifest_lists: Iterable[str]) -> None:
        """Forget every list but `manifest_lists` (those of the retained snapshots)."""
        keep = set(manifest_lists)
        self.named = {k: v for k, v in self.named.items() if k in keep}


def unreferenced_metadata(
    io: FileIO, expired: Sequence[Snapshot], committed: TableMetadata, lists: ManifestLists
) -> list[str]:
    """The manifest lists of the `expired` snapshots that `committed` (the table's metadata as
    the commit that expired them left it, or any later) no longer holds, and the manifests
    they name that no snapshot of `committed` names; manifests first, then lists, each once.
    An expired snapshot whose manifest list is gone already (another process deleted it) adds
    only its list. Raises `OSError` when a retained snapshot's manifest list cannot be read:
    nothing can then be called unreferenced."""
    retained = committed.snapshots
    kept_lists = {s.manifest_list for s in retained}
    gone = [
        s
        for s in expired
        if committed.snapshot_by_id(s.snapshot_id) is None and s.manifest_list not in kept_lists
    ]
    candidates: dict[str, None] = {}
    for s in gone:
        try:
            candidates.update(dict.fromkeys(sorted(lists.manifests(io, s.manifest_list))))
        except FileNotFoundError:
            continue
    # Strike what a retained snapshot names, newest first (it shares the most with the
    # candidates); each step costs the candidates left, not the manifests a list names.
    left = set(candidates)
    for s in sorted(retained, key=lambda r: r.timestamp_ms, reverse=True):
        if not left:
            break
        left = left - lists.manifests(io, s.manifest_list)
    lists.keep_only(kept_lists)
    return [*(m for m in candidates if m in left), *dict.fromkeys(s.manifest_list for s in gone)]


def distinct_manifests(io: FileIO, metadata: TableMetadata) -> list[ManifestFile]:
    """Every manifest a snapshot of `metadata` names, once, by path. Raises `OSError`
    (`FileNotFoundError`: a manifest list is gone)."""
    found: dict[str, ManifestFile] = {}
    for s in metadata.snapshots:
        for m in s.manifests(io):
            found.setdefault(m.manifest_path, m)
    return list(found.values())


def metadata_files(io: FileIO, metadata: TableMetadata, metadata_location: str) -> set[str]:
    """Every metadata file `metadata` (read from `metadata_location`) names: that file and the
    earlier ones its log names, each retained snapshot's manifest list and the manifests each
    list names, the statistics files. Anything else under the table's metadata directory was
    written by a commit that never landed (a writer killed or refused between writing its
    files and the catalog's swap), or expired and not yet deleted. Reads each manifest list;
    raises `OSError` (`FileNotFoundError`: a list is gone)."""
    named = {metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    named.update(f.statistics_path for f in metadata.statistics)
    named.update(f.statistics_path for f in metadata.partition_statistics)
    for m in distinct_manifests(io, metadata):
        named.add(m.manifest_path)
    named.update(s.manifest_list for s in metadata.snapshots)
    return named


def referenced_files(io: FileIO, metadata: TableMetadata) -> set[str]:
    """The path of every live file (data and delete files) a snapshot of `metadata` holds:
    the ADDED and EXISTING entries of their distinct manifests, each manifest read once, in
    parallel. Raises `OSError` (`FileNotFoundError`: a manifest or manifest list is gone)."""

    def live(manifest: ManifestFile) -> list[str]:
        return [e.data_file.file_path for e in manifest.fetch_manifest_entry(io)]

    executor = ExecutorFactory.get_or_create()
    out: set[str] = set()
    for paths in executor.map(live, distinct_manifests(io, metadata)):
        out.update(paths)
    return out


def delete_files(io: FileIO, paths: Sequence[str], prefix: str) -> tuple[int, list[str]]:
    """Delete each of `paths` that lies under `prefix` (a table's metadata: anything else is
    left alone, whatever named it), in parallel. A file missing already counts as deleted.
    Returns (deleted, failures as `path: error`); never raises for one file."""

    def delete(path: str) -> str | None:
        if not path.startswith(prefix):
            return f"{path}: not under {prefix}"
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            return f"{path}: {exc}"
        return None

    executor = ExecutorFactory.get_or_create()
    failures = [f for f in executor.map(delete, paths) if f is not None]
    return len(paths) - len(failures), failures
