"""A manifest version: the two immutable files that tell an engine which data files a table
partition is made of (docs/architecture.md).

A version lives in its own directory under the table's root, named so that no two attempts
share one (`_manifests/dt=<dt>/<kind>-<upper>-<token>/`), and is never written again once the
ledger records it: an in-place overwrite would race readers. The directory holds
`manifest.json`, Redshift Spectrum's format (`{"entries": [{"url", "mandatory", "meta":
{"content_length"}}]}`), and `symlink/manifest`, Hive's symlink text (one URL per line) that
Athena, Trino and Presto read through `SymlinkTextInputFormat`; the catalog partition points at
`symlink/` (an engine reads every file in that directory), so the JSON sits one level up.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from resources.catalog.target import MANIFESTS
from resources.ledger.publication import DataFile, PublicationKind
from resources.objects.base import ObjectStore, ObjectStoreError

MANIFESTS_PREFIX = "_manifests/"
SPECTRUM_NAME = "manifest.json"
SYMLINK_DIR = "symlink/"
SYMLINK_NAME = "manifest"


@dataclass(frozen=True)
class ManifestEntry:
    """One data file a manifest version names: URL and size."""

    url: str
    content_length: int


def new_version_key(dt: str, kind: PublicationKind, upper: int) -> str:
    """A fresh version directory's key (relative to the table's root, ends with `/`)."""
    return f"{MANIFESTS_PREFIX}dt={dt}/{kind}-{upper:019d}-{uuid.uuid4().hex[:12]}/"


def spectrum_json(files: Sequence[DataFile]) -> bytes:
    entries = [
        {"url": f.url, "mandatory": True, "meta": {"content_length": f.content_length}}
        for f in files
    ]
    return json.dumps({"entries": entries}, indent=1).encode()


def symlink_text(files: Sequence[DataFile]) -> bytes:
    return "".join(f"{f.url}\n" for f in files).encode()


def parse_spectrum_json(data: bytes, url: str) -> list[ManifestEntry]:
    try:
        doc = json.loads(data)
        return [
            ManifestEntry(str(e["url"]), int(e["meta"]["content_length"])) for e in doc["entries"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ObjectStoreError(f"{url}: not a Spectrum manifest: {exc}") from exc


def parse_symlink_text(data: bytes) -> list[str]:
    return [line.strip() for line in data.decode().splitlines() if line.strip()]


def write_version(objects: ObjectStore, key: str, files: Sequence[DataFile]) -> str:
    """Write a version's two manifests under `key`; returns the version directory's URL. Both
    are written before the ledger records the version, so a recorded version is complete."""
    objects.put_bytes(key + SPECTRUM_NAME, spectrum_json(files))
    objects.put_bytes(key + SYMLINK_DIR + SYMLINK_NAME, symlink_text(files))
    return objects.url(key)


def catalog_location(version_url: str) -> str:
    """What the catalog partition points at: the version's `symlink/` directory."""
    return version_url + SYMLINK_DIR


def served_location(table_format: str, table_root: str, version_url: str) -> str:
    """Where a `PublicationTarget` of `table_format` serves the publication whose version
    directory is `version_url`: `manifests`, the version's `symlink/` directory (what the Hive
    partition points at); any other format (`iceberg`), the table's root `table_root` (an
    engine plans the date's files from the current snapshot). Pure."""
    return catalog_location(version_url) if table_format == MANIFESTS else table_root


def version_url_of(location: str) -> str:
    """The version directory of a catalog location (inverse of `catalog_location`)."""
    if not location.endswith(SYMLINK_DIR):
        raise ObjectStoreError(f"{location!r} is not a manifest version's {SYMLINK_DIR} directory")
    return location[: -len(SYMLINK_DIR)]


def read_spectrum(objects: ObjectStore, version_url: str) -> list[ManifestEntry]:
    """A recorded version's entries, from its Spectrum manifest."""
    key = objects.key_of(version_url + SPECTRUM_NAME)
    return parse_spectrum_json(objects.get_bytes(key), objects.url(key))
