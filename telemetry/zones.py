"""Time zones and local days, pure (standard library only, no clock): the one definition of
"the day" in a zone, which the console's periods (`console.periods`: day buckets, custom ranges)
and the alerts (`daily_spend`: the spend since the rule's local midnight) both use.

- a zone is an IANA name (`Europe/Berlin`, `UTC`); anything else is refused with the field named;
- a local day starts at its local midnight, or at the first moment after it when a DST gap
  skips midnight; a day across a DST change is 23 or 25 hours long;
- a local wall time skipped by a gap reads as the time after the gap; a repeated one as its first
  occurrence;
- a local hour starts at an instant whose local time is on the hour: most are an hour apart, but
  across Lord Howe Island's half-hour DST change an hour bucket is 30 or 90 minutes long.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from telemetry.errors import FieldError

_ZONE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_+\-/]{0,63}")


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def parse_zone(name: str, *, field: str = "tz") -> ZoneInfo:
    """The IANA zone `name` (`Europe/Berlin`, `UTC`); anything else is refused at `field`."""
    if not _ZONE_NAME.fullmatch(name) or name not in _zones():
        raise FieldError(field, f"{name[:64]!r} is not an IANA time zone (e.g. Europe/Berlin, UTC)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # listed but not loadable
        raise FieldError(field, f"{name[:64]!r} is not an IANA time zone") from exc


def is_zone(name: str) -> bool:
    """Whether `name` is a zone `parse_zone` takes (a remembered choice is checked so)."""
    return bool(_ZONE_NAME.fullmatch(name)) and name in _zones()


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The UTC instant of `day`'s first local moment (midnight, or the first time after a gap)."""
    return from_local(datetime.combine(day, time()), zone)


def day_start(at: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant the local day holding `at` (aware) began: `local_midnight` of its date.
    `day_start(at) <= at < local_midnight(its date + 1 day)`."""
    return local_midnight(at.astimezone(zone).date(), zone)


def day_bounds(at: datetime, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The local day holding `at` as [start, end) in UTC: `day_start(at)` and the next local
    day's start (23, 24 or 25 hours later)."""
    day = at.astimezone(zone).date()
    return local_midnight(day, zone), local_midnight(day + timedelta(days=1), zone)


def from_local(naive: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a local wall time. A time skipped by a DST gap is read as the time
    after the gap (the time it would be had the clock not jumped: 02:30 on a night the clock
    jumps from 02:00 to 03:00 is 03:30); a repeated time is its first occurrence."""
    # fold 0 (PEP 495): the offset in force before the transition, which places a repeated time
    # at its first occurrence and a skipped one past the gap
    return naive.replace(tzinfo=zone, fold=0).astimezone(UTC)


# Every offset in use since 1980 is a whole number of quarter hours (Nepal +05:45, Chatham
# +12:45), so an instant on a local hour is on a UTC quarter hour; across a DST change two local
# hours are at most 90 minutes apart. Older local mean times (e.g. +10:36:20) have no instant on
# the hour: there the UTC hour stands in.
_QUARTER: Final = timedelta(minutes=15)
_MOST_QUARTERS: Final = 8


def _on_local_hour(at: datetime, zone: ZoneInfo) -> bool:
    local = at.astimezone(zone)
    return local.minute == 0 and local.second == 0


def hour_start(at: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant the local hour holding `at` (aware) began: the latest instant at or
    before `at` whose local time is on the hour. `hour_start(at) <= at < next_hour_start(it)`."""
    at = at.astimezone(UTC)
    quarter = at.replace(minute=at.minute - at.minute % 15, second=0, microsecond=0)
    for n in range(_MOST_QUARTERS):
        candidate = quarter - n * _QUARTER
        if _on_local_hour(candidate, zone):
            return candidate
    return at.replace(minute=0, second=0, microsecond=0)


def next_hour_start(start: datetime, zone: ZoneInfo) -> datetime:
    """The start of the local hour after the one starting at `start` (a `hour_start`): the first
    instant after it whose local time is on the hour."""
    start = start.astimezone(UTC)
    for n in range(1, _MOST_QUARTERS + 1):
        candidate = start + n * _QUARTER
        if _on_local_hour(candidate, zone):
            return candidate
    return start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
