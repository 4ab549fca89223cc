"""The one definition of a local day (`telemetry.zones`): it starts at local midnight, or the
first moment after a DST gap that skips it, and runs to the next one (23 or 25 hours across a
DST change); the console's day buckets and the alerts' daily spend both read it (pure)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.zones import (
    day_bounds,
    day_start,
    from_local,
    hour_start,
    local_midnight,
    next_hour_start,
    parse_zone,
)

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kathmandu",
    "Pacific/Chatham",
]
HOUR = timedelta(hours=1)
moments = st.datetimes(
    min_value=datetime(2024, 1, 1),  # noqa: DTZ001 - the bounds of hypothesis are naive
    max_value=datetime(2028, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@given(moments, st.sampled_from(ZONES))
def test_a_moment_lies_in_its_local_day(at: datetime, name: str) -> None:
    zone = ZoneInfo(name)
    start = day_start(at, zone)
    local = at.astimezone(zone)
    assert start <= at < local_midnight(local.date() + timedelta(days=1), zone)
    # the day starts on its own date, at midnight unless a gap skipped it
    assert start.astimezone(zone).date() == local.date()
    assert day_start(start, zone) == start
    assert day_bounds(at, zone) == (start, local_midnight(local.date() + timedelta(days=1), zone))


@pytest.mark.parametrize(
    ("name", "day", "hours"),
    [
        ("Europe/Berlin", date(2026, 3, 29), 23),  # clocks forward at 02:00
        ("Europe/Berlin", date(2026, 10, 25), 25),  # clocks back at 03:00
        ("America/New_York", date(2026, 3, 8), 23),
        ("America/New_York", date(2026, 11, 1), 25),
        ("Asia/Kolkata", date(2026, 10, 25), 24),  # no DST
        ("UTC", date(2026, 10, 25), 24),
    ],
)
def test_a_day_across_a_dst_change_is_23_or_25_hours_long(name: str, day: date, hours: int) -> None:
    zone = ZoneInfo(name)
    start, end = local_midnight(day, zone), local_midnight(day + timedelta(days=1), zone)
    assert end - start == hours * HOUR
    # its last moment is still that day; the next day's first is not
    assert day_start(end - timedelta(microseconds=1), zone) == start
    assert day_start(end, zone) == end


def test_a_day_whose_midnight_a_gap_skips_starts_at_the_first_moment_after_it() -> None:
    # Santiago moved its clocks from 00:00 to 01:00 on 2026-09-06: the day starts at 01:00
    zone = ZoneInfo("America/Santiago")
    start = local_midnight(date(2026, 9, 6), zone)
    assert start.astimezone(zone).replace(tzinfo=None) == datetime(2026, 9, 6, 1, 0)  # noqa: DTZ001


@pytest.mark.parametrize("name", ["", "Mars/Olympus", "utc+1", "../etc/passwd", "x" * 80])
def test_anything_but_an_iana_zone_is_refused_at_the_field_given(name: str) -> None:
    with pytest.raises(FieldError) as refused:
        parse_zone(name, field="time_zone")
    assert refused.value.field == "time_zone"


def test_a_skipped_time_reads_as_the_time_after_the_gap_and_a_repeated_one_as_its_first() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    skipped = from_local(datetime(2026, 3, 29, 2, 30), berlin)  # noqa: DTZ001 - a wall time
    assert skipped == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)  # 03:30 CEST
    repeated = from_local(datetime(2026, 10, 25, 2, 30), berlin)  # noqa: DTZ001
    assert repeated == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST, the first


@given(
    st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2028, 1, 1)),  # noqa: DTZ001
    st.sampled_from([*ZONES, "America/Santiago", "America/Havana"]),
)
def test_a_wall_time_that_exists_comes_back_and_one_that_does_not_lies_after_its_gap(
    naive: datetime, name: str
) -> None:
    zone = ZoneInfo(name)
    at = from_local(naive, zone)
    back = at.astimezone(zone).replace(tzinfo=None)
    assert back >= naive
    if back != naive:  # skipped: moved forward by the gap, at most its length (an hour or less)
        assert back - naive <= HOUR


@given(moments, st.sampled_from(ZONES))
def test_a_moment_lies_in_its_local_hour_and_no_hour_starts_inside_it(
    at: datetime, name: str
) -> None:
    zone = ZoneInfo(name)
    start = hour_start(at, zone)
    end = next_hour_start(start, zone)
    assert start <= at < end
    for edge in (start, end):
        local = edge.astimezone(zone)
        assert (local.minute, local.second, local.microsecond) == (0, 0, 0)
    # an hour is an hour, but across a half-hour DST change (Lord Howe: 30 or 90 minutes)
    assert end - start in {HOUR, HOUR / 2, HOUR * 3 / 2}
    # nothing between them is on a local hour (offsets are whole quarter hours)
    quarter = timedelta(minutes=15)
    inside = start + quarter
    while inside < end:
        assert inside.astimezone(zone).minute != 0
        inside += quarter
    assert hour_start(end, zone) == end


def test_lord_howes_half_hour_dst_changes_keep_the_hours_on_the_hour() -> None:
    zone = ZoneInfo("Australia/Lord_Howe")
    # 2026-10-04 02:00 +10:30 jumps to 02:30 +11:00: the hour from 01:00 runs to 03:00 local
    one = datetime(2026, 10, 3, 14, 30, tzinfo=UTC)  # 01:00 +10:30
    assert next_hour_start(one, zone) == datetime(2026, 10, 3, 16, tzinfo=UTC)  # 03:00 +11:00
    # 2026-04-05 02:00 +11:00 falls back to 01:30 +10:30: the hour from 01:00 takes 90 minutes
    one = datetime(2026, 4, 4, 14, tzinfo=UTC)  # 01:00 +11:00
    after = next_hour_start(one, zone)
    assert after == datetime(2026, 4, 4, 15, 30, tzinfo=UTC)  # 02:00 +10:30
    assert hour_start(datetime(2026, 4, 4, 15, 10, tzinfo=UTC), zone) == one


def test_a_local_mean_time_offset_falls_back_to_the_utc_hour() -> None:
    zone = ZoneInfo("Australia/Sydney")  # +10:04:52 before 1895
    at = datetime(1890, 6, 1, 12, 40, tzinfo=UTC)
    assert hour_start(at, zone) == datetime(1890, 6, 1, 12, tzinfo=UTC)
    assert next_hour_start(hour_start(at, zone), zone) == datetime(1890, 6, 1, 13, tzinfo=UTC)
