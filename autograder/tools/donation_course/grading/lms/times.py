"""An LMS's local times, in nbgrader's terms (naive UTC).

Times in file names (Blackboard's attempt times, a `--name-regex`'s `timestamp`) are the
LMS's local time, read in `--timezone` (default: the course's nbgrader timezone,
`c.Exchange.timezone`) and turned into UTC, as nbgrader's own timestamps are.
"""
from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

TIMESTAMP_FORMATS = ("%Y-%m-%d-%H-%M-%S", "%Y-%m-%d %H:%M:%S.%f %Z", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")


def zone(name: str) -> ZoneInfo:
    """The time zone of an IANA name ('Europe/Berlin'; '' is UTC), or ValueError in one line."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"--timezone {name!r}: not a time zone name (e.g. Europe/Berlin, UTC)") from None


def course_timezone(config) -> str:
    """The course's nbgrader timezone: `c.Exchange.timezone` (the zone nbgrader records submission
    times in), else `c.NbGraderAPI.timezone` (formgrader's display zone), else UTC."""
    for section in ("Exchange", "NbGraderAPI"):
        if section in config and config[section].get("timezone"):
            return str(config[section].timezone)
    return "UTC"


def parse_timestamp(text: str, local: str = ""):
    """A naive UTC datetime. A time with no zone is in `local` ('': UTC): an LMS's local time."""
    text = text.strip()
    for fmt in TIMESTAMP_FORMATS:
        try:
            when = dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
        if "%Z" in fmt or not local:
            return when
        return when.replace(tzinfo=zone(local)).astimezone(dt.UTC).replace(tzinfo=None)
    from nbgrader.utils import parse_utc

    return parse_utc(text).replace(tzinfo=None)
