"""Which streams of the streams file a command works on: the one it names, or all of them."""

from __future__ import annotations

from collections.abc import Mapping

from resources.errors import ConfigError
from resources.streams import StreamConfig


def chosen_streams(
    stream: str | None, streams: Mapping[str, StreamConfig], field: str = "--stream"
) -> list[str]:
    """`[stream]`, or every stream in name order when it is None. A name the streams file does
    not have is a `ConfigError` on `field` (the option or argument that named it)."""
    if stream is not None and stream not in streams:
        raise ConfigError(
            field, f"{stream!r} is not a stream; the streams file has {sorted(streams)}"
        )
    return [stream] if stream is not None else sorted(streams)
