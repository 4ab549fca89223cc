"""The period model (`console.periods`): presets and custom ranges in the operator's zone, the
bucket its length asks for, buckets aligned to local hours and midnights across DST changes,
the previous period, and refusals that name the field."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from console.periods import (
    HOUR_BUCKETS_UP_TO,
    MAX_LENGTH,
    PRESETS,
    Period,
    bucket_for,
    change,
    local_midnight,
    parse_period,
)
from telemetry.errors import FieldError

NOW = datetime(2026, 12, 7, 9, 41, 13, tzinfo=UTC)
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
moments = st.datetimes(
    min_value=datetime(2024, 1, 1),  # noqa: DTZ001 - the bounds of hypothesis are naive
    max_value=datetime(2028, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def test_a_preset_ends_now_and_has_its_length_and_bucket() -> None:
    for key, length in PRESETS.items():
        period = parse_period({"range": key}, now=NOW)
        assert (period.start, period.end, period.preset) == (NOW - length, NOW, key)
        assert period.bucket == ("hour" if length <= timedelta(days=2) else "day")
    assert parse_period({}, now=NOW).preset == "24h"


def test_the_bucket_turns_to_days_just_past_two_days() -> None:
    assert bucket_for(HOUR_BUCKETS_UP_TO) == "hour"
    assert bucket_for(HOUR_BUCKETS_UP_TO + timedelta(seconds=1)) == "day"


def test_a_custom_range_of_dates_is_whole_local_days() -> None:
    period = parse_period(
        {"from": "2026-12-01", "to": "2026-12-07", "tz": "Europe/Berlin"}, now=NOW
    )
    assert period.start == datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    assert period.end == datetime(2026, 12, 7, 23, 0, tzinfo=UTC)
    assert (period.bucket, period.preset, period.key) == ("day", "", "custom")
    assert period.query() == {"from": "2026-12-01", "to": "2026-12-07", "tz": "Europe/Berlin"}
    assert period.describe() == "2026-12-01 – 2026-12-07"
    assert period.zone_label() == "Europe/Berlin, UTC+01:00"


def test_a_custom_range_of_date_times_is_local_unless_it_has_an_offset() -> None:
    local = parse_period(
        {"from": "2026-12-01T09:30", "to": "2026-12-01T12:00", "tz": "America/New_York"}, now=NOW
    )
    assert local.start == datetime(2026, 12, 1, 14, 30, tzinfo=UTC)
    assert local.query()["from"] == "2026-12-01T09:30"
    offset = parse_period({"from": "2026-12-01T09:30+00:00", "to": "2026-12-01T12:00"}, now=NOW)
    assert offset.start == datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"range": "2w"}, "range"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"tz": "../../etc/passwd"}, "tz"),
        ({"from": "2026-12-08"}, "from"),  # alone, it must be before now
        ({"from": "2025-11-01"}, "from"),  # alone, now is more than MAX_LENGTH after it
        ({"from": "yesterday", "to": "2026-12-01"}, "from"),
        ({"from": "2026-12-01", "to": "2026-13-01"}, "to"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "to"),
        ({"from": "2026-12-01T10:00", "to": "2026-12-01T10:00"}, "to"),
        ({"from": "2020-01-01", "to": "2026-12-01"}, "to"),
        ({"range": "7d", "from": "2026-12-01", "to": "2026-12-02"}, "range"),
        ({"compare": "yes"}, "compare"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(params: dict[str, str], field: str) -> None:
    with pytest.raises(FieldError) as refused:
        parse_period(params, now=NOW)
    assert refused.value.field == field
    # a page that must not fail takes the default instead
    assert parse_period(params, now=NOW, strict=False).preset == "24h"


def test_a_lone_bound_is_open_from_runs_until_now_to_reaches_back_the_longest_range() -> None:
    since = parse_period({"from": "2026-12-01", "tz": "Europe/Berlin"}, now=NOW)
    assert (since.start, since.end) == (datetime(2026, 11, 30, 23, 0, tzinfo=UTC), NOW)
    assert since.preset == "" and since.zone == "Europe/Berlin"
    # its links keep it open: from alone, the same period back while now stands still
    assert since.query() == {"from": "2026-12-01", "tz": "Europe/Berlin"}
    assert parse_period(since.query(), now=NOW) == since
    assert since.describe() == "since 2026-12-01"
    until = parse_period({"to": "2026-12-01", "tz": "Europe/Berlin"}, now=NOW)
    assert until.end == datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    assert until.start == datetime(2025, 10, 27, 23, 0, tzinfo=UTC)  # 400 local days before
    # the edges: from alone up to MAX_LENGTH before now and strictly before now
    assert parse_period({"from": (NOW - MAX_LENGTH).isoformat()}, now=NOW).length == MAX_LENGTH
    with pytest.raises(FieldError):
        parse_period({"from": (NOW - MAX_LENGTH - timedelta(seconds=1)).isoformat()}, now=NOW)
    with pytest.raises(FieldError):
        parse_period({"from": NOW.isoformat()}, now=NOW)


def _bounds(params: dict[str, str], now: datetime) -> tuple[datetime, datetime] | str:
    try:
        period = parse_period(params, now=now)
    except FieldError:
        return "refused"
    return period.start, period.end


@given(at=moments, zone=st.sampled_from(ZONES))
def test_a_lone_bound_is_the_range_with_its_open_end_filled(at: datetime, zone: str) -> None:
    local = at.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat(timespec="minutes")
    now = datetime(2026, 12, 7, 9, 41, tzinfo=UTC)
    since = _bounds({"from": local, "tz": zone}, now)
    assert since == _bounds({"from": local, "to": now.isoformat(), "tz": zone}, now)
    until = _bounds({"to": local, "tz": zone}, now)
    assert not isinstance(until, str)
    start = until[0].isoformat()
    assert until == _bounds({"from": start, "to": local, "tz": zone}, now)


def test_the_zone_falls_back_to_the_remembered_one_then_utc() -> None:
    assert parse_period({}, now=NOW, zone="Asia/Tokyo").zone == "Asia/Tokyo"
    assert parse_period({"tz": "UTC"}, now=NOW, zone="Asia/Tokyo").zone == "UTC"
    assert parse_period({"range": "x"}, now=NOW, zone="Nope/Nope", strict=False).zone == "UTC"


def test_day_buckets_start_at_local_midnight_across_a_dst_change() -> None:
    # Berlin leaves summer time on 2026-10-25: that day has 25 hours
    period = parse_period(
        {"from": "2026-10-24", "to": "2026-10-26", "tz": "Europe/Berlin"}, now=NOW
    )
    assert period.bucket == "day"
    starts = period.bucket_starts()
    zone = ZoneInfo("Europe/Berlin")
    assert [s.astimezone(zone).hour for s in starts] == [0, 0, 0]
    lengths = [end - start for start, end in period.intervals()]
    assert lengths == [timedelta(hours=24), timedelta(hours=25), timedelta(hours=24)]


def test_the_previous_range_of_whole_days_is_the_same_dates_earlier_across_dst() -> None:
    period = parse_period(
        {"from": "2026-10-26", "to": "2026-11-01", "tz": "Europe/Berlin", "compare": "previous"},
        now=NOW,
    )
    before = period.previous()
    assert before.query()["from"] == "2026-10-19" and before.query()["to"] == "2026-10-25"
    assert before.end == period.start and not before.compare


def test_change_is_relative_and_unknown_without_a_base() -> None:
    assert change(150, 100) == 0.5
    assert change(0, 100) == -1.0
    assert change(5, 0) is None
    assert change(None, 3) is None


@given(
    start=moments,
    hours=st.integers(min_value=1, max_value=24 * 60),
    zone=st.sampled_from(ZONES),
)
# Lord Howe's half-hour DST changes inside hour buckets: an hour of 90 minutes, each way
@example(datetime(2026, 10, 3, 12, tzinfo=UTC), 6, "Australia/Lord_Howe")
@example(datetime(2026, 4, 4, 12, tzinfo=UTC), 6, "Australia/Lord_Howe")
def test_buckets_tile_the_period_aligned_in_the_zone(
    start: datetime, hours: int, zone: str
) -> None:
    period = Period(start, start + timedelta(hours=hours, minutes=7), zone)
    tz = ZoneInfo(zone)
    starts = period.bucket_starts()
    # the first bucket holds the period's start, the last holds its last moment
    assert starts[0] <= period.start < period.next_start(starts[0])
    assert starts[-1] < period.end <= period.next_start(starts[-1])
    # contiguous, each start the bucket of itself, aligned on a local hour or local midnight
    for first, second in zip(starts, starts[1:], strict=False):
        assert period.next_start(first) == second
    for s in starts:
        assert period.bucket_of(s) == s
        local = s.astimezone(tz)
        if period.bucket == "day":
            assert s == local_midnight(local.date(), tz)
        else:
            assert (local.minute, local.second, local.microsecond) == (0, 0, 0)
            assert period.bucket_of(s + timedelta(minutes=59)) == s
    # the clipped intervals cover the period exactly
    intervals = period.intervals()
    assert intervals[0][0] == period.start and intervals[-1][1] == period.end
    assert all(a[1] == b[0] for a, b in zip(intervals, intervals[1:], strict=False))


@given(at=moments, zone=st.sampled_from(ZONES))
def test_every_moment_falls_in_the_local_day_bucket_that_holds_it(at: datetime, zone: str) -> None:
    period = Period(at - timedelta(days=7), at + timedelta(hours=1), zone)
    start = period.bucket_of(at)
    assert start <= at < period.next_start(start)
    assert start.astimezone(ZoneInfo(zone)).date() == at.astimezone(ZoneInfo(zone)).date()


@given(
    first=st.dates(min_value=date(2024, 1, 1), max_value=date(2027, 12, 1)),
    days=st.integers(min_value=1, max_value=MAX_LENGTH.days),
    zone=st.sampled_from(ZONES),
    compare=st.booleans(),
)
def test_a_custom_range_round_trips_through_its_query(
    first: date, days: int, zone: str, compare: bool
) -> None:
    last = first + timedelta(days=days - 1)
    params = {"from": first.isoformat(), "to": last.isoformat(), "tz": zone}
    if compare:
        params["compare"] = "previous"
    period = parse_period(params, now=NOW)
    assert parse_period(period.query(), now=NOW) == period
    before = period.previous()
    assert before.end == period.start
    back = before.start.astimezone(ZoneInfo(zone)).date()
    assert back == first - timedelta(days=days)


@given(start=moments, minutes=st.integers(min_value=1, max_value=60 * 24 * 90))
def test_the_previous_period_of_a_preset_has_its_length(start: datetime, minutes: int) -> None:
    period = Period(start, start + timedelta(minutes=minutes), "America/New_York", "7d")
    before = period.previous()
    assert (before.end, before.length, before.preset) == (period.start, period.length, "7d")


@given(
    start=moments,
    length=st.sampled_from([timedelta(hours=1), timedelta(hours=30), timedelta(days=30)])
    | st.timedeltas(min_value=timedelta(minutes=1), max_value=timedelta(days=60)),
    zone=st.sampled_from(ZONES),
    offset=st.integers(min_value=-2, max_value=24 * 61),
)
# the hour holding the start lies before the first bucket (a half-hour zone's midnight)
@example(datetime(2026, 12, 1, 18, 45, tzinfo=UTC), timedelta(days=30), "Asia/Kolkata", 0)
# the hour a DST change skips and the one it repeats (New York, spring and autumn)
@example(datetime(2026, 3, 7, 12, tzinfo=UTC), timedelta(days=3), "America/New_York", 19)
@example(datetime(2026, 10, 31, 12, tzinfo=UTC), timedelta(days=3), "America/New_York", 18)
@example(datetime(2026, 11, 1, 3, tzinfo=UTC), timedelta(hours=24), "America/New_York", 3)
# a half-hour DST change, in hour buckets
@example(datetime(2026, 4, 4, 10, tzinfo=UTC), timedelta(hours=30), "Australia/Lord_Howe", 5)
def test_the_bucket_holding_an_hour_is_the_last_bucket_start_at_or_before_it(
    start: datetime, length: timedelta, zone: str, offset: int
) -> None:
    # The overview's rollup read (`console.overview._spend`) groups hours by how many bucket
    # starts are at or before them (`telemetry.compiled.BucketNumber`): the same bucket as
    # `bucket_of`, for every hour of the period, in every zone, across DST changes.
    period = Period(start, start + length, zone)
    starts = period.bucket_starts()
    hour = start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=offset)
    if hour >= period.end:
        return
    number = sum(1 for s in starts if s <= hour)
    if number == 0:  # before the first bucket: the hour holding the start, in no bucket
        assert period.bucket_of(hour) < starts[0]
        return
    bucket = starts[number - 1]
    assert bucket <= hour < period.next_start(bucket)  # the bucket whose interval holds it
    # the bucket `bucket_of` names, also across a half-hour DST change (Lord Howe)
    assert bucket == period.bucket_of(hour)
