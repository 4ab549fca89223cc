"""The overview's bars sit on their interval: a bucket [start, start + step) is drawn from its
start, as wide as its step, and a line's point in its middle (issue 38, case 6)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from console.cache_charts import premiums_by_bucket_figure
from console.charts import COST_KEYS, whole_ticks
from console.fleet_charts import (
    compactions_figure,
    hit_trend_figure,
    mid_interval,
    on_interval,
    spend_figure,
)
from console.periods import (
    BUCKET_STEPS,
    COMMON_ZONES,
    PRESETS,
    Period,
    local_midnight,
    preset_period,
)

START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def test_a_bar_spans_its_hour_from_its_start() -> None:
    placed = on_interval([START, START + HOUR], HOUR)
    assert placed["x"] == ["2026-12-01T10:00:00+00:00", "2026-12-01T11:00:00+00:00"]
    assert (placed["offset"], placed["width"]) == (0, 3_600_000)
    assert placed["customdata"][0] == "2026-12-01 10:00 – 11:00 UTC"


def test_a_line_point_sits_mid_bucket() -> None:
    assert mid_interval([START], HOUR)["x"] == ["2026-12-01T10:30:00+00:00"]
    assert mid_interval([START.replace(hour=0)], DAY)["x"] == ["2026-12-01T12:00:00+00:00"]


@given(
    st.lists(st.integers(min_value=0, max_value=24 * 60), min_size=1, max_size=30, unique=True),
    st.sampled_from([HOUR, DAY]),
)
def test_every_bar_covers_exactly_its_bucket_and_every_point_is_inside_it(
    offsets: list[int], step: timedelta
) -> None:
    starts = sorted(START + step * n for n in offsets)
    bars, points = on_interval(starts, step), mid_interval(starts, step)
    for start, x, mid in zip(starts, bars["x"], points["x"], strict=True):
        left = datetime.fromisoformat(x) + timedelta(milliseconds=bars["offset"])
        right = left + timedelta(milliseconds=bars["width"])
        assert (left, right) == (start, start + step)
        assert left < datetime.fromisoformat(mid) < right


def test_the_overview_figures_put_every_bar_on_its_interval() -> None:
    starts = [START, START + HOUR]
    spend = spend_figure(
        starts=starts,
        step=HOUR,
        costs={key: [1.0, 2.0] for key in COST_KEYS},
        saved=[0.5, 0.25],
    )
    compactions = compactions_figure(
        days=[START.replace(hour=0)],
        counts={"manual": [1]},
        labels={"manual": "manual"},
        freed=[100],
    )
    premiums = premiums_by_bucket_figure(
        starts=starts, step=HOUR, by_bucket={START: {"expiry": Decimal(1)}}, labels={}
    )
    hit = hit_trend_figure(starts=starts, step=HOUR, hit=[0.5, None])
    for figure, width in ((spend, 3_600_000), (compactions, 86_400_000), (premiums, 3_600_000)):
        bars = [t for t in figure["data"] if t["type"] == "bar"]
        assert bars and all((b["offset"], b["width"]) == (0, width) for b in bars)
    lines = [t for f in (spend, compactions, hit) for t in f["data"] if t["type"] == "scatter"]
    assert all(t["x"][0].endswith(("10:30:00+00:00", "12:00:00+00:00")) for t in lines)
    # the clock is stated on the axis
    assert "agent's clock" in spend["layout"]["xaxis"]["title"]["text"]
    assert "server clock" in compactions["layout"]["xaxis"]["title"]["text"]


def _wall(text: str) -> datetime:
    """A date plotly reads: its wall clock (plotly ignores the offset)."""
    return datetime.fromisoformat(text).replace(tzinfo=None)


@given(
    st.sampled_from(sorted(PRESETS)),
    st.sampled_from(COMMON_ZONES),
    st.datetimes(
        min_value=datetime(2026, 1, 1),  # noqa: DTZ001 - the bounds of hypothesis are naive
        max_value=datetime(2027, 12, 31),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
)
def test_every_time_axis_starts_at_the_period_start_in_every_zone_and_preset(
    preset: str, zone: str, now: datetime
) -> None:
    period = preset_period(preset, now=now, zone=zone)
    starts = period.bucket_starts()
    step = BUCKET_STEPS[period.bucket]
    span, tz = (period.start, period.end), period.tz
    n = len(starts)
    day_starts = [local_midnight(d, tz) for d in _local_days(period)]
    figures = [
        spend_figure(
            starts=starts,
            step=step,
            costs={key: [1.0] * n for key in COST_KEYS},
            saved=[0.5] * n,
            previous_cost=[1.0] * n,
            zone=tz,
            span=span,
        ),
        hit_trend_figure(starts=starts, step=step, hit=[0.5] * n, zone=tz, span=span),
        compactions_figure(
            days=day_starts,
            counts={"manual": [1] * len(day_starts)},
            labels={"manual": "manual"},
            freed=[1] * len(day_starts),
            zone=tz,
            span=span,
        ),
        premiums_by_bucket_figure(
            starts=starts,
            step=step,
            by_bucket={starts[0]: {"expiry": Decimal(1)}},
            labels={},
            zone=tz,
            span=span,
        ),
    ]
    start, end = (
        _wall(period.local(period.start).isoformat()),
        _wall(period.local(period.end).isoformat()),
    )
    for figure in figures:
        axis = figure["layout"]["xaxis"]
        assert axis["autorange"] is False
        first, last = (_wall(x) for x in axis["range"])
        # the period to the whole minute: never before its start, never short of its end
        assert start <= first < start + timedelta(minutes=1) and first.second == 0
        assert end <= last < end + timedelta(minutes=1) and last.second == 0
        # every point of every line is on the axis, none before the period's start
        for trace in figure["data"]:
            if trace["type"] == "scatter":
                assert all(first <= _wall(x) <= last for x in trace["x"])


def _local_days(period: Period) -> list[date]:
    first, last = period.local(period.start).date(), period.local(period.end).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def test_a_point_sits_in_the_middle_of_the_part_of_its_bucket_inside_the_period() -> None:
    # 24h from 09:40: the first hour bucket is 09:00-10:00, its part inside 09:40-10:00
    now = datetime(2026, 12, 2, 9, 40, tzinfo=UTC)
    period = preset_period("24h", now=now)
    placed = mid_interval(period.bucket_starts(), HOUR, span=(period.start, period.end))
    assert placed["x"][0] == "2026-12-01T09:50:00+00:00"
    assert placed["x"][1] == "2026-12-01T10:30:00+00:00"
    assert placed["x"][-1] == "2026-12-02T09:20:00+00:00"  # 09:00-09:40
    assert placed["customdata"][0] == "2026-12-01 09:00 – 10:00 UTC"  # the bucket it sums


def test_a_rolling_periods_axis_moves_once_a_minute_not_on_every_refresh() -> None:
    """Two refreshes within the minute draw the same figure (the poll then sends no chart);
    the next minute moves the axis."""

    def figure(now: datetime) -> dict[str, Any]:
        period = preset_period("24h", now=now)
        starts = period.bucket_starts()
        return spend_figure(
            starts=starts,
            step=HOUR,
            costs={key: [1.0] * len(starts) for key in COST_KEYS},
            saved=[0.5] * len(starts),
            span=(period.start, period.end),
        )

    now = datetime(2026, 12, 2, 9, 40, 0, 1, tzinfo=UTC)
    assert figure(now) == figure(now + timedelta(seconds=59))
    later = figure(now + timedelta(minutes=1))
    assert later["layout"]["xaxis"]["range"][0] == "2026-12-01T09:42:00+00:00"


def test_a_short_period_keeps_automatic_ticks_on_the_compactions_axis() -> None:
    def axis(span: tuple[datetime, datetime]) -> dict[str, Any]:
        figure = compactions_figure(
            days=[START.replace(hour=0)],
            counts={"manual": [1]},
            labels={"manual": "m"},
            freed=[1],
            span=span,
        )
        return figure["layout"]["xaxis"]  # type: ignore[no-any-return]

    assert "dtick" not in axis((START, START + HOUR))
    assert axis((START - 7 * DAY, START))["dtick"] == 86_400_000


def test_small_counts_tick_whole_units_from_zero_and_larger_ones_are_plotlys() -> None:
    assert whole_ticks(0) == {"range": [0, 1.5], "dtick": 1}
    assert whole_ticks(5) == {"range": [0, 5.5], "dtick": 1}
    assert whole_ticks(6) == {}
    assert whole_ticks(9, below=10) == {"range": [0, 9.5], "dtick": 1}
    assert whole_ticks(10, below=10) == {}


def test_a_day_without_freed_tokens_draws_no_fraction_of_a_token() -> None:
    def axes(freed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        layout = compactions_figure(
            days=[START.replace(hour=0)],
            counts={"manual": [0]},
            labels={"manual": "manual"},
            freed=[freed],
        )["layout"]
        return layout["yaxis"], layout["yaxis2"]

    counts, tokens = axes(0)
    assert (counts["range"], counts["dtick"]) == ([0, 1.5], 1)
    assert (tokens["range"], tokens["dtick"]) == ([0, 1.5], 1)  # not plotly's 0…667m
    assert "range" not in axes(120_000)[1]
    # wide tick labels move the axis titles aside on a phone rather than under them
    assert counts["automargin"] and tokens["automargin"]
