"""Settings shared by every layer: ISO-8601 durations and the data directory.

Imports only `resources.errors`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from resources.errors import ConfigError

_DURATION = re.compile(
    r"^P(?!$)(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_iso_duration(text: str, field: str, error: type[ConfigError] = ConfigError) -> float:
    """ISO-8601 duration to seconds (`P7D`, `PT12H`, `P1DT30M`, `P2W`).

    Years and months are refused: they have no fixed length, and a TTL that silently means
    something else than the operator thought is how live items get deleted.
    """
    match = _DURATION.match(text.strip().upper()) if isinstance(text, str) else None
    if match is None:
        raise error(
            field,
            f"{text!r} is not an ISO-8601 duration such as 'P7D' or 'PT12H' "
            "(weeks, days, hours, minutes, seconds)",
        )
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    seconds = (
        parts.get("weeks", 0) * 604800
        + parts.get("days", 0) * 86400
        + parts.get("hours", 0) * 3600
        + parts.get("minutes", 0) * 60
        + parts.get("seconds", 0)
    )
    if seconds <= 0:
        raise error(field, f"{text!r} must be longer than zero")
    return seconds


def default_data_dir() -> Path:
    return Path(os.environ.get("LEASEHOLD_DATA_DIR", "data")).resolve()
