"""Spark's value rules in plain Python: what today's read (`read_plan`) makes of one JSON value
or one text for a column of each type, for `record_parser`'s exact (slow) path.

Two rules, as the Spark read has them. The typed parse (Spark's JSON reader with the declared
types, `typed_value`) takes a JSON token as its column's type or rejects the line; a rejected
line is parsed again as text and every column's text `try_cast` (`cast_text`), which may
accept what the typed parse refused (a quoted number) and refuse what it took (an epoch-seconds
timestamp, a bare NaN). Texts are parsed as Spark's casts parse them: integers as digits with a
sign, doubles as Java's `Double.parseDouble` (with Spark's inf/nan words), booleans by Spark's
word lists, timestamps and dates by Spark's `stringToTimestamp`/`stringToDate` (session time
zone UTC, as `resources.spark.session` sets it). No Spark here.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

log = logging.getLogger(__name__)

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
EPOCH_DAY = date(1970, 1, 1).toordinal()
WHITESPACE = "".join(chr(c) for c in range(33))
"""What Spark's `trimAll` of a cast's input drops: the space and the control characters."""

_INTEGER = re.compile(r"[+-]?[0-9]+").fullmatch
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
).fullmatch
_JAVA_HEX = re.compile(
    r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
).fullmatch
POSITIVE_INF = {"inf", "+inf", "infinity", "+infinity"}
NEGATIVE_INF = {"-inf", "-infinity"}
TRUE_WORDS = {"t", "true", "y", "yes", "1"}
FALSE_WORDS = {"f", "false", "n", "no", "0"}
TYPED_DOUBLE_WORDS = {
    "NaN": math.nan,
    "+INF": math.inf,
    "+Infinity": math.inf,
    "Infinity": math.inf,
    "-INF": -math.inf,
    "-Infinity": -math.inf,
}
"""The strings Spark's JSON reader takes for a double column (any other string: rejected)."""
SHORT_IDS = {
    "EST": "-05:00", "MST": "-07:00", "HST": "-10:00", "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney", "AGT": "America/Argentina/Buenos_Aires", "ART": "Africa/Cairo",
    "AST": "America/Anchorage", "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare", "CNT": "America/St_Johns", "CST": "America/Chicago",
    "CTT": "Asia/Shanghai", "EAT": "Africa/Addis_Ababa", "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis", "IST": "Asia/Kolkata", "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia", "NET": "Asia/Yerevan", "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi", "PNT": "America/Phoenix", "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal", "VST": "Asia/Ho_Chi_Minh",
}  # fmt: skip
"""Java's `ZoneId.SHORT_IDS`, which Spark's zone parsing honours."""
_OFFSET = re.compile(r"([+-])([0-9]{1,2})(?::?([0-9]{2}))?(?::?([0-9]{2}))?").fullmatch
_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+").fullmatch


class Number(str):
    """A JSON number token, kept as its text (`json.loads(parse_int=..., parse_float=...)`)."""


class Nested(str):
    """A JSON object or array value, kept as its text."""


def long_of(text: str, low: int = LONG_MIN, high: int = LONG_MAX) -> int | None:
    """`try_cast(text as long)` (`low`/`high`: int's range for an int column)."""
    text = text.strip(WHITESPACE)
    if not _INTEGER(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def double_of(text: str) -> float | None:
    """`try_cast(text as double)`: Spark's inf/nan words, else Java's `Double.parseDouble`."""
    text = text.strip(WHITESPACE)
    lower = text.lower()
    if lower in POSITIVE_INF:
        return math.inf
    if lower in NEGATIVE_INF:
        return -math.inf
    if lower == "nan":
        return math.nan
    if _JAVA_DOUBLE(text):
        body = text.rstrip("fFdD") if not text.endswith(("NaN", "Infinity")) else text
        return float(body.replace("Infinity", "inf"))
    hexed = _JAVA_HEX(text)
    if hexed:
        value = float.fromhex(hexed.group(2))
        return -value if hexed.group(1) == "-" else value
    return None


def boolean_of(text: str) -> bool | None:
    """`try_cast(text as boolean)`."""
    lower = text.strip(WHITESPACE).lower()
    if lower in TRUE_WORDS:
        return True
    if lower in FALSE_WORDS:
        return False
    return None


def _valid_digits(segment: int, digits: int) -> bool:
    if segment == 0:
        return 4 <= digits <= 6
    if segment == 6:
        return digits <= 9
    return 0 < digits <= 2


def _segments(text: str) -> tuple[list[int], int, str | None, bool] | None:
    """Spark's `parseTimestampString`: (year, month, day, hour, minute, second, micros), the
    year's sign, the zone text (or None), whether only a time was given; None when invalid."""
    s = text.strip(WHITESPACE)
    if not s:
        return None
    segments = [1, 1, 1, 0, 0, 0, 0]
    sign, j, i, value, digits, fraction, just_time, zone = 1, 0, 0, 0, 0, 0, False, None
    if s[0] in "+-":
        sign, j = (-1 if s[0] == "-" else 1), 1
    while j < len(s):
        c = s[j]
        if "0" <= c <= "9" and c.isascii():
            if i == 6:
                fraction += 1
            if i != 6 or digits < 6:
                value = value * 10 + ord(c) - 48
            digits += 1
        elif j == 0 and c == "T":
            just_time, i = True, 3
        elif i < 2:
            if c == "-":
                if not _valid_digits(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i == 0 and c == ":" and sign == 1 and s[0] not in "+-":
                if not _valid_digits(3, digits):
                    return None
                segments[3], value, digits, i, just_time = value, 0, 0, 4, True
            else:
                return None
        elif i == 2:
            if c not in " T" or not _valid_digits(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        elif i in (3, 4):
            if c != ":" or not _valid_digits(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        else:  # 5 or 6: a fraction, or the zone from here on
            if not _valid_digits(i, digits):
                return None
            segments[i], value, digits = value, 0, 0
            if c == "." and i == 5:
                i += 1
            else:
                zone, i, j = s[j:], 7, len(s)
                break
        j += 1
    if i < 7:
        if not _valid_digits(i, digits):
            return None
        segments[i] = value
        if i == 6:
            fraction = digits
    segments[6] *= 10 ** (6 - min(fraction, 6))
    return segments, sign, zone, just_time


@lru_cache(maxsize=256)
def zone_of(text: str) -> tzinfo | None:
    """Spark's `getZoneId` of a timestamp's zone text (Java's `ZoneId.of` with its short ids):
    Z, UTC/GMT/UT, offsets (alone or after UTC/GMT/UT), region ids; None when unknown."""
    text = re.sub(r"([+-])([0-9]):", r"\g<1>0\2:", text.strip(WHITESPACE), count=1)
    text = re.sub(r"([+-][0-9][0-9]):([0-9])$", r"\1:0\2", text, count=1)
    if text == "Z":
        return timezone.utc
    for prefix in ("UTC", "GMT", "UT"):
        if text == prefix:
            return timezone.utc
        if text.startswith(prefix) and text[len(prefix) : len(prefix) + 1] in ("+", "-"):
            return _offset(text[len(prefix) :])
    if text[:1] in ("+", "-"):
        return _offset(text)
    text = SHORT_IDS.get(text, text)
    if text[:1] in ("+", "-"):
        return _offset(text)
    if not _REGION(text):
        return None
    try:
        return ZoneInfo(text)
    except (ValueError, OSError) as exc:  # not a zone Java knows either: the value is refused
        log.debug("no time zone %r: %s", text, exc)
        return None


def _offset(text: str) -> tzinfo | None:
    found = _OFFSET(text)
    if not found:
        return None
    sign, hours, minutes, seconds = found.groups()
    h, m, s = int(hours), int(minutes or 0), int(seconds or 0)
    if h > 18 or m > 59 or s > 59 or (h == 18 and (m or s)):
        return None
    delta = timedelta(hours=h, minutes=m, seconds=s)
    return timezone(-delta if sign == "-" else delta)


_PLAIN_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{3}|\.[0-9]{6})?"
    r"(?:Z|[+-](?:0[0-9]|1[0-7]):[0-5][0-9]|[+-]18:00)?"
).fullmatch
"""ISO times Python's `datetime.fromisoformat` reads as Spark does (C, not `_segments`)."""


def timestamp_of(text: str) -> int | None:
    """`try_cast(text as timestamp)`, as Spark parses it in the JSON reader too: microseconds
    since the epoch, a time without zone in UTC (the session's zone), a time alone on today's
    date; None when Spark gives null."""
    if _PLAIN_TIME(text):
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:  # no such day or hour: Spark gives null too
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return (moment - EPOCH) // timedelta(microseconds=1)
    parsed = _segments(text)
    if parsed is None:
        return None
    (year, month, day, hour, minute, second, micros), sign, zone, just_time = parsed
    tz = timezone.utc if zone is None else zone_of(zone)
    if tz is None or hour > 23 or minute > 59 or second > 59:
        return None
    try:
        if just_time:
            today = datetime.now(tz).date()
            year, month, day, sign = today.year, today.month, today.day, 1
        return _micros(sign * year, month, day, hour, minute, second, micros, tz)
    except (ValueError, OverflowError):  # no such date (Feb 30), or beyond Python's years
        return None


def _micros(
    year: int, month: int, day: int, hour: int, minute: int, second: int, micros: int, tz: tzinfo
) -> int:
    """Microseconds since the epoch of a local time in `tz` (a year outside 1..9999 through the
    proleptic day count, with the zone's offset at year 2000)."""
    if 1 <= year <= 9999:
        local = datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
        return (local - EPOCH) // timedelta(microseconds=1)
    days = _days(year, month, day)
    offset = datetime(2000, 1, 1, tzinfo=tz).utcoffset() or timedelta(0)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - int(offset.total_seconds())
    return seconds * 1_000_000 + micros


def _days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date of any year (ValueError if none)."""
    if not 1 <= month <= 12 or not 1 <= day <= _month_days(year, month):
        raise ValueError("no such date")
    shift = (year - 2000) // 400
    base = date(year - shift * 400, month, day).toordinal() - EPOCH_DAY
    return base + shift * 146097


def _month_days(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def date_of(text: str) -> int | None:
    """`try_cast(text as date)` (Spark's `stringToDate`): days since the epoch, or None. A
    year, a year-month or a full date, anything after a space or `T` following the day
    ignored."""
    s = text.strip(WHITESPACE)
    found = re.match(r"([+-]?)([0-9]{4,6})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T].*)?)?)?$", s)
    if not found:
        return None
    sign, year, month, day = found.groups()
    try:
        return _days((-1 if sign == "-" else 1) * int(year), int(month or 1), int(day or 1))
    except ValueError:
        return None


def int_of(text: str) -> int | None:
    """`try_cast(text as int)`."""
    return long_of(text, INT_MIN, INT_MAX)


def string_of(text: str) -> str:
    return text


CASTS: dict[str, Callable[[str], Any]] = {
    "long": long_of,
    "int": int_of,
    "double": double_of,
    "boolean": boolean_of,
    "timestamp": timestamp_of,
    "date": date_of,
    "string": string_of,
}
"""Column type -> `try_cast` of a text to it (None: null)."""


def text_of(value: Any) -> str | None:
    """The text Spark's text parse (`from_json` to strings) gives a JSON value: a string's
    own text, any other value's JSON text as written; None for null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return "true" if value is True else "false"


def finite_number(value: Number) -> bool:
    """Whether a number token is finite as a double (a bare NaN, Infinity or 1e999 is not: the
    text parse refuses it for every column type)."""
    return math.isfinite(float(value.replace("Infinity", "inf")))


def cast_value(value: Any, type_name: str) -> tuple[bool, Any]:
    """(whether the text parse accepts it, its value) of JSON value `value` in a `type_name`
    column of a line Spark's typed parse rejected."""
    if value is None:
        return True, None
    if type_name != "string" and isinstance(value, Number) and not finite_number(value):
        return False, None
    text = text_of(value)
    assert text is not None
    cast = CASTS[type_name](text)
    return cast is not None, cast


def typed_value(value: Any, type_name: str) -> tuple[bool, Any]:
    """(whether Spark's typed parse takes it, its value) of JSON value `value` (a `Number`,
    `Nested`, str, bool or None) in a `type_name` column."""
    if value is None:
        return True, None
    if type_name == "string":
        return True, text_of(value)
    if isinstance(value, bool):
        return (True, value) if type_name == "boolean" else (False, None)
    if isinstance(value, Number):
        return _typed_number(value, type_name)
    if isinstance(value, Nested) or not isinstance(value, str):
        return False, None
    if type_name == "double":
        special = TYPED_DOUBLE_WORDS.get(value)
        return (special is not None), special
    if type_name in ("timestamp", "date"):
        cast = CASTS[type_name](value)
        return cast is not None, cast
    return False, None


def _typed_number(value: Number, type_name: str) -> tuple[bool, Any]:
    integral = _INTEGER(value) is not None
    if type_name == "double":
        return True, float(value.replace("Infinity", "inf"))
    if not integral:
        return False, None
    number = int(value)
    if type_name == "long":
        return (True, number) if LONG_MIN <= number <= LONG_MAX else (False, None)
    if type_name == "int":
        return (True, number) if INT_MIN <= number <= INT_MAX else (False, None)
    if type_name == "date":
        days = date_of(value)
        return days is not None, days
    if type_name == "timestamp" and LONG_MIN <= number <= LONG_MAX:
        micros = number * 1_000_000
        return (True, micros) if LONG_MIN <= micros <= LONG_MAX else (False, None)
    return False, None


def wrong_type(name: str, type_name: str) -> str:
    """The reason of a record whose value for column `name` is not a `type_name`."""
    return f"wrong type for {name}: expected {type_name}"
