"""What a recorded publication under a dedupe policy serves, read back from its version
directory: its state (`dedupe.json`), the files it serves and those they were made from, and
the keys replacements retracted (`resources/publication/deduped_files.py` writes them)."""

from __future__ import annotations

from resources.dedupe.retracted_keys import RetractedKeys
from resources.dedupe.served import STATE_NAME, ServedState
from resources.ledger.publication import Publication
from resources.objects.base import ObjectStore
from resources.publication.manifest import read_spectrum


def served_state(objects: ObjectStore, publication: Publication) -> ServedState | None:
    """What `publication` serves under a dedupe policy (its `dedupe.json`, in the table's
    `objects`); None for one recorded without a policy. Raises `ObjectStoreError`,
    `ServedStateError`."""
    key = objects.key_of(publication.location + STATE_NAME)
    if objects.size(key) is None:
        return None
    return ServedState.from_json(objects.get_bytes(key), objects.url(key))


def served_and_sources(
    objects: ObjectStore, location: str | None
) -> tuple[list[str], list[str], RetractedKeys]:
    """The data files the publication whose version directory is `location` serves (its
    manifest), the ledger files they were made from (its `dedupe.json`; none for a
    publication recorded without a policy) and the keys replacements retracted from them
    (rightly served by none); nothing for no publication. Raises `ObjectStoreError`,
    `ServedStateError`, `RetractedKeysError`."""
    if location is None:
        return [], [], RetractedKeys.empty()
    urls = [e.url for e in read_spectrum(objects, location)]
    key = objects.key_of(location + STATE_NAME)
    if objects.size(key) is None:
        return urls, [], RetractedKeys.empty()
    state = ServedState.from_json(objects.get_bytes(key), objects.url(key))
    retracted = (
        RetractedKeys.from_bytes(objects.get_bytes(objects.key_of(location + state.retracted)))
        if state.retracted
        else RetractedKeys.empty()
    )
    return urls, [f.source for f in state.files], retracted
