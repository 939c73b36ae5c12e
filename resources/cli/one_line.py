"""A message on one line: how `leasehold` prints an error, or a check's summary."""


def one_line(exc: BaseException | str) -> str:
    """The message on one line (a library's may span several); the type's name when empty."""
    return " ".join(str(exc).split()) or type(exc).__name__
