"""streams.yaml's header documents every field a stream may have, and only those."""

from __future__ import annotations

import re
from pathlib import Path

from resources.streams import STREAM_FIELDS

ROOT = Path(__file__).resolve().parents[2]


def test_the_header_documents_every_stream_field() -> None:
    header = [line for line in (ROOT / "streams.yaml").read_text().splitlines() if line[:1] == "#"]
    documented = {m.group(1) for line in header if (m := re.match(r"#   ([a-z_]+)\s", line))}
    assert documented == set(STREAM_FIELDS)
