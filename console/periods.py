"""The period every page with figures reads: a preset or a custom range, in the operator's time
zone, with its buckets and its previous period. Pure: no Django, no clock (`now` is passed in).

One definition of each rule a page with figures follows:

- a period is the half-open interval [start, end), held in UTC;
- a preset (`PRESETS`) ends now; a custom range is `from` and `to` in the operator's zone, a
  date meaning that day's local midnight (`to` as a date takes in that whole day);
- a missing bound is open: `from` alone runs until now, `to` alone reaches back as far as a
  range may (`MAX_LENGTH`);
- the bucket follows the length (`bucket_for`): hours up to two days, days beyond;
- buckets are aligned in the zone: an hour bucket starts on a local hour, a day bucket at local
  midnight (`telemetry.zones`, the one definition of a local day, which the alerts' daily spend
  reads too; a day across a DST change is 23 or 25 hours long);
- the previous period has the same length and ends where this one starts; a range of whole
  local days steps back the same number of local days.

The hour rollups are UTC hours: a rollup hour counts in the bucket that holds its start (in a
zone whose offset is not a whole number of hours, such as Asia/Kolkata, a bucket's edge is the
rollup hour's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo

from telemetry import zones
from telemetry.errors import FieldError
from telemetry.zones import day_start, from_local, hour_start, next_hour_start, parse_zone

# the zones' rules, which the console reads through here too
from telemetry.zones import is_zone as is_zone

PRESETS: Final[dict[str, timedelta]] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "14d": timedelta(days=14),
    "30d": timedelta(days=30),
}
DEFAULT_PRESET: Final = "24h"
BUCKET_STEPS: Final[dict[str, timedelta]] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
# the longest period drawn in hour buckets; longer ones are drawn in day buckets
HOUR_BUCKETS_UP_TO: Final = timedelta(days=2)
# the longest custom range (a chart of day buckets stays readable, a query stays bounded)
MAX_LENGTH: Final = timedelta(days=400)
DEFAULT_ZONE: Final = "UTC"
# the zones the picker offers (any IANA name is taken in the URL; the browser's own is used
# when none is chosen)
COMMON_ZONES: Final = (
    "UTC",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/Helsinki",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
)
# the query parameters a period is read from (`parse_period`) and written to (`Period.query`)
PERIOD_PARAMETERS: Final = frozenset({"range", "from", "to", "tz", "compare"})

_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


@lru_cache(maxsize=4096)
def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """`telemetry.zones.local_midnight`, remembered: a page draws the same local days on every
    load (its day buckets, its compactions' days and their ends), each a midnight to find."""
    return zones.local_midnight(day, zone)


def bucket_for(length: timedelta) -> str:
    """The bucket a period of `length` is drawn in: `hour` up to `HOUR_BUCKETS_UP_TO`, else
    `day`."""
    return "hour" if length <= HOUR_BUCKETS_UP_TO else "day"


def _parse_moment(text: str, zone: ZoneInfo, field: str, *, end: bool) -> datetime:
    """A `from`/`to` value: an ISO date (local midnight; for `to`, the next local midnight) or
    an ISO date-time (local unless it carries an offset)."""
    text = text.strip()
    try:
        if _DATE.fullmatch(text):
            day = date.fromisoformat(text)
            return local_midnight(day + timedelta(days=1) if end else day, zone)
        at = datetime.fromisoformat(text)
    except (ValueError, OverflowError) as exc:
        raise FieldError(
            field, f"{text[:40]!r} is not an ISO date (2026-12-01) or date-time (2026-12-01T09:30)"
        ) from exc
    if not 1 < at.year < 9999:
        raise FieldError(field, "the year is out of range")
    if at.tzinfo is not None:
        return at.astimezone(UTC)
    return from_local(at, zone)


@dataclass(frozen=True)
class Period:
    """[start, end) in UTC, in `zone`; `preset` is its preset key, "" for a custom range;
    `compare`: the previous period is shown beside; `to_now`: a custom range given by `from`
    alone, which ends now (its links keep it open)."""

    start: datetime
    end: datetime
    zone: str = DEFAULT_ZONE
    preset: str = ""
    compare: bool = False
    to_now: bool = False

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    @property
    def bucket(self) -> str:
        return bucket_for(self.length)

    @property
    def key(self) -> str:
        """The preset key, or "custom"."""
        return self.preset or "custom"

    def local(self, at: datetime) -> datetime:
        return at.astimezone(self.tz)

    def bucket_of(self, at: datetime) -> datetime:
        """The UTC start of the bucket `at` falls in: its local hour, or its local day."""
        if self.bucket == "day":
            return day_start(at, self.tz)
        return hour_start(at, self.tz)

    def next_start(self, start: datetime) -> datetime:
        """The start of the bucket after the one starting at `start` (a local day may be 23 or
        25 hours long; an hour is an hour but across a half-hour DST change)."""
        if self.bucket == "day":
            return local_midnight(start.astimezone(self.tz).date() + timedelta(days=1), self.tz)
        return next_hour_start(start, self.tz)

    def bucket_starts(self) -> list[datetime]:
        """Every bucket start (UTC) from the bucket holding `start` to the one holding the last
        moment before `end`, in order: the chart's axis, so an empty bucket is drawn as zero."""
        starts = []
        at = self.bucket_of(self.start)
        while at < self.end:
            starts.append(at)
            at = self.next_start(at)
        return starts

    def intervals(self) -> list[tuple[datetime, datetime]]:
        """Each bucket as [start, end) in UTC, clipped to the period (what a drill-down
        opens)."""
        return [
            (max(start, self.start), min(self.next_start(start), self.end))
            for start in self.bucket_starts()
        ]

    def previous(self) -> Period:
        """The period before this one, of the same length, ending at `start`. A custom range of
        whole local days steps back as many local days (the same dates a week earlier, even
        across a DST change)."""
        zone = self.tz
        local_start, local_end = self.start.astimezone(zone), self.end.astimezone(zone)
        whole_days = (
            not self.preset
            and local_midnight(local_start.date(), zone) == self.start
            and local_midnight(local_end.date(), zone) == self.end
        )
        if whole_days:
            days = (local_end.date() - local_start.date()).days
            start = local_midnight(local_start.date() - timedelta(days=days), zone)
        else:
            start = self.start - self.length
        return Period(start, self.start, self.zone, self.preset, compare=False)

    def query(self) -> dict[str, str]:
        """The query parameters that give this period back (`parse_period`): the preset, or
        `from` and `to` as local date-times (dates when both are local midnights; `from` alone
        for a range that ends now); `tz` always (a link means the same period whatever zone the
        browser remembers); `compare` when on."""
        params: dict[str, str] = {}
        if self.preset:
            params["range"] = self.preset
        elif self.to_now:
            params["from"] = self.local_bounds_text()[0]
        else:
            params["from"], params["to"] = self.local_bounds_text()
        params["tz"] = self.zone
        if self.compare:
            params["compare"] = "previous"
        return params

    def local_bounds_text(self) -> tuple[str, str]:
        """`from` and `to` as the picker's fields show them: local dates when the range is whole
        local days (`to` the last day in it), else local date-times to the minute; `to` is ""
        for a range that ends now (`to_now`), `from` a date when it is a local midnight."""
        zone = self.tz
        start, end = self.start.astimezone(zone), self.end.astimezone(zone)
        if self.to_now:
            first = (
                start.date().isoformat()
                if local_midnight(start.date(), zone) == self.start
                else start.strftime("%Y-%m-%dT%H:%M")
            )
            return first, ""
        if (
            local_midnight(start.date(), zone) == self.start
            and local_midnight(end.date(), zone) == self.end
        ):
            return start.date().isoformat(), (end.date() - timedelta(days=1)).isoformat()
        return start.strftime("%Y-%m-%dT%H:%M"), end.strftime("%Y-%m-%dT%H:%M")

    def describe(self) -> str:
        """The period in words: "the last 24h", "2026-12-01 – 2026-12-07" or "since
        2026-12-01"."""
        if self.preset:
            return f"the last {self.preset}"
        first, last = self.local_bounds_text()
        if self.to_now:
            return f"since {first.replace('T', ' ')}"
        return f"{first.replace('T', ' ')} – {last.replace('T', ' ')}"

    def zone_label(self, at: datetime | None = None) -> str:
        """The zone as a label: its name and offset at `at` (the period's end by default)."""
        moment = (at or self.end).astimezone(self.tz)
        offset = moment.strftime("%z")
        if self.zone == "UTC":
            return "UTC"
        return f"{self.zone}, UTC{offset[:3]}:{offset[3:]}"


def parse_period(
    params: Mapping[str, str], *, now: datetime, zone: str = DEFAULT_ZONE, strict: bool = True
) -> Period:
    """The period `params` ask for (`range`, `from`, `to`, `tz`, `compare`), `now` being the
    end of a preset. `zone` is the fallback when `tz` is absent (the operator's remembered zone).

    Refused with the field named (`FieldError`): an unknown preset, a zone that is not IANA, a
    date that does not parse, `to` not after `from` (`from` alone: not before now), a range
    longer than `MAX_LENGTH`, `range` beside `from`/`to`, a `compare` other than "previous".
    `from` alone runs until now; `to` alone reaches back `MAX_LENGTH`. With `strict=False`, a bad value falls back to its default instead (a page that
    must never 400, such as a list's poll).
    """
    try:
        return _parse(params, now=now, zone=zone)
    except FieldError:
        if strict:
            raise
        fallback = zone if is_zone(zone) else DEFAULT_ZONE
        return preset_period(DEFAULT_PRESET, now=now, zone=fallback)


def preset_period(key: str, *, now: datetime, zone: str = DEFAULT_ZONE) -> Period:
    """The preset `key` ending at `now`."""
    return Period(now - PRESETS[key], now, zone, key)


def _parse(params: Mapping[str, str], *, now: datetime, zone: str) -> Period:
    tz_name = (params.get("tz") or "").strip() or zone
    tz = parse_zone(tz_name)
    compare_text = (params.get("compare") or "").strip()
    if compare_text not in ("", "previous"):
        raise FieldError("compare", "the only comparison is 'previous'")
    compare = compare_text == "previous"
    first = (params.get("from") or "").strip()
    last = (params.get("to") or "").strip()
    preset = (params.get("range") or "").strip()
    if not first and not last:
        if preset and preset not in PRESETS:
            raise FieldError("range", f"one of {', '.join(PRESETS)}, or from and to")
        return Period(
            now - PRESETS[preset or DEFAULT_PRESET], now, tz_name, preset or DEFAULT_PRESET, compare
        )
    if preset and preset != "custom":
        raise FieldError("range", "give a preset or from and to, not both")
    end = _parse_moment(last, tz, "to", end=True) if last else now
    if first:
        start = _parse_moment(first, tz, "from", end=False)
    else:  # as far back as a range reaches, by the local clock
        start = from_local(_wall(end, tz) - MAX_LENGTH, tz)
    # the field a refusal names: the one given, `to` when both are
    field = "to" if last else "from"
    if end <= start:
        raise FieldError(field, "must be after from" if last else "must be before now")
    # by the local clock: whole local days across a DST change are as many days
    if _wall(end, tz) - _wall(start, tz) > MAX_LENGTH:
        raise FieldError(field, f"a range is at most {MAX_LENGTH.days} days long")
    return Period(start, end, tz_name, "", compare, to_now=not last)


def _wall(at: datetime, zone: ZoneInfo) -> datetime:
    """`at` as the local clock shows it (naive)."""
    return at.astimezone(zone).replace(tzinfo=None)


def change(now: Decimal | float | None, before: Decimal | float | None) -> float | None:
    """The relative change from `before` to `now` (0.25: a quarter more), None when there is no
    base to compare with (nothing before, or either side unknown)."""
    if now is None or before is None or before == 0:
        return None
    return (float(now) - float(before)) / float(before)
