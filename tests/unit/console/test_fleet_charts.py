"""The overview's bars sit on their interval: a bucket [start, start + step) is drawn from its
start, as wide as its step, and a line's point in its middle (issue 38, case 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from console.cache_charts import premiums_by_bucket_figure
from console.charts import COST_KEYS
from console.fleet_charts import (
    compactions_figure,
    hit_trend_figure,
    mid_interval,
    on_interval,
    spend_figure,
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
