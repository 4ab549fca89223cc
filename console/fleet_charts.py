"""The fleet overview's charts as plain data: spend, cache-hit trend and compactions per origin,
with time on the x axis. Standard library only, as `console.charts` (whose colours, cost buckets
and layout they share).

A bucket is an interval [start, start + step): its bar spans it (x at the start, `offset` 0,
`width` the step), and a line's point sits at its middle, so an hour's spend is drawn over that
hour, not centred on the hour's start. `on_interval` is the one place that says so.

Times are drawn in the operator's zone (`zone`, named by `zone_label`): plotly has no time
zones and draws a time's wall clock, so each start is written as its local time; a day bucket
is a local day (`console.periods`).

The time axis spans the period (`span`, its [start, end)), never plotly's padded autorange: the
first tick is never before the period's start. A bucket cut by an edge is drawn over the part
inside the period, and a line's point sits in the middle of that part (`mid_interval`). Both ends
are taken up to the whole minute (`whole_minutes`): a rolling period's axis moves once a minute,
so a refresh within the minute whose data did not change finds its charts unchanged and sends
none (`console.parts`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any, Final

from console.charts import COLORS, COST_BUCKETS, Figure, chart_layout, rounded, whole_ticks

ORIGIN_COLORS: Final = {
    "manual": "#1f4e79",
    "auto": "#00838f",
    "overflow": "#b71c1c",
    "agent": "#6a1b9a",
    "provider": "#ef6c00",
}


Span = tuple[datetime, datetime]


def whole_minutes(span: Span | None) -> Span | None:
    """`span` with each end taken up to the whole minute (never before the period's start)."""
    if span is None:
        return None
    return (_minute_up(span[0]), _minute_up(span[1]))


def _minute_up(at: datetime) -> datetime:
    floored = at.replace(second=0, microsecond=0)
    return floored if floored == at else floored + timedelta(minutes=1)


def span_axis(span: Span | None, zone: tzinfo = UTC) -> dict[str, Any]:
    """What fixes a date axis to the period `span` ([start, end), as wall times in `zone`, to the
    minute: `whole_minutes`); nothing without a span (plotly's autorange)."""
    span = whole_minutes(span)
    if span is None:
        return {}
    start, end = span
    return {
        "range": [start.astimezone(zone).isoformat(), end.astimezone(zone).isoformat()],
        "autorange": False,
    }


def _time_layout(
    title: str,
    zone_label: str = "UTC",
    span: Span | None = None,
    zone: tzinfo = UTC,
    **extra: Any,
) -> dict[str, Any]:
    layout = chart_layout(title, **extra)
    layout["xaxis"] = {
        "type": "date",
        "gridcolor": "#eceff1",
        "zeroline": False,
        "automargin": layout["xaxis"]["automargin"],
        # calls are dated by the agent's clock (the time each record carries)
        "title": {"text": f"time ({zone_label}, agent's clock)"},
        **span_axis(span, zone),
    }
    # a legend above the plot never collides with the axis title on a narrow screen
    layout["margin"] = {"l": 64, "r": 24, "t": 84, "b": 48}
    layout["title"] = {**layout["title"], "y": 0.98, "yanchor": "top"}
    return layout


def on_interval(
    starts: Sequence[datetime], step: timedelta, zone: tzinfo = UTC, zone_label: str = "UTC"
) -> dict[str, Any]:
    """What places a bar over its bucket [start, start + step): x at the start (its wall time
    in `zone`), no offset, the step as width (plotly takes both in milliseconds on a date axis),
    and each interval in words for the hover."""
    x, customdata = _on_interval(tuple(starts), step, zone, zone_label)
    return {
        "x": list(x),
        "offset": 0,
        "width": step.total_seconds() * 1000,
        "customdata": list(customdata),
    }


# The overview's three charts place the same buckets (its day buckets are the compactions'
# days), on every refresh: each placement is worked out once, and each call gets lists of its own.
@lru_cache(maxsize=64)
def _on_interval(
    starts: tuple[datetime, ...], step: timedelta, zone: tzinfo, zone_label: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (
        tuple(start.astimezone(zone).isoformat() for start in starts),
        tuple(_interval(start, step, zone, zone_label) for start in starts),
    )


def mid_interval(
    starts: Sequence[datetime],
    step: timedelta,
    zone: tzinfo = UTC,
    zone_label: str = "UTC",
    span: Span | None = None,
) -> dict[str, Any]:
    """What places a line's point in the middle of its bucket (of the part of it inside `span`,
    so a point is never off the axis), with the bucket's interval for the hover."""
    x, customdata = _mid_interval(tuple(starts), step, zone, zone_label, whole_minutes(span))
    return {"x": list(x), "customdata": list(customdata)}


@lru_cache(maxsize=64)
def _mid_interval(
    starts: tuple[datetime, ...],
    step: timedelta,
    zone: tzinfo,
    zone_label: str,
    span: Span | None,  # the axis's (`whole_minutes`)
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # the span's ends on the wall clock of `zone` (aware, and as plotly reads them), once for
    # every point
    walls = None if span is None else tuple(_wall(at.astimezone(zone)) for at in span)
    return (
        tuple(_middle(start, step, zone, walls).isoformat() for start in starts),
        tuple(_interval(start, step, zone, zone_label) for start in starts),
    )


def _wall(at: datetime) -> tuple[datetime, datetime]:
    """`at` and its wall clock (naive): what plotly reads of it."""
    return at, at.replace(tzinfo=None)


def _middle(
    start: datetime,
    step: timedelta,
    zone: tzinfo,
    walls: tuple[tuple[datetime, datetime], ...] | None,
) -> datetime:
    """The middle of [start, start + step) on the wall clock of `zone`, cut to the span whose
    ends are `walls` (`_wall`, in the same zone)."""
    left = start.astimezone(zone)
    left_wall = left.replace(tzinfo=None)
    right_wall = left_wall + step  # the wall clock, as `_interval` and the bar's width
    if walls is not None:
        (first, first_wall), (_last, last_wall) = walls
        # compared as wall times: the axis is a wall clock
        if first_wall > left_wall:
            left, left_wall = first, first_wall
        right_wall = min(right_wall, last_wall)
    return left + (right_wall - left_wall) / 2


def _own(placed: dict[str, Any]) -> dict[str, Any]:
    """`placed` (`on_interval`'s) with lists of its own for one trace: computed once for a
    figure's bars, never shared between them."""
    return {key: list(value) if isinstance(value, list) else value for key, value in placed.items()}


# The same buckets are drawn on every refresh of a page (and by the spend, hit and compactions
# charts alike): each bucket's words are written once. Equal instants in different tzinfos are
# equal keys, and the words depend on the instant alone.
@lru_cache(maxsize=4096)
def _interval(start: datetime, step: timedelta, zone: tzinfo, zone_label: str) -> str:
    local = start.astimezone(zone)
    end = local + step  # the wall clock: a local day ends at the next local midnight
    if step >= timedelta(days=1):
        return f"{local:%Y-%m-%d} 00:00 – {end:%Y-%m-%d} 00:00 {zone_label}"
    return f"{local:%Y-%m-%d %H:%M} – {end:%H:%M} {zone_label}"


def spend_figure(
    *,
    starts: Sequence[datetime],
    step: timedelta,
    costs: Mapping[str, Sequence[float]],
    saved: Sequence[float],
    zone: tzinfo = UTC,
    zone_label: str = "UTC",
    previous_cost: Sequence[float] | None = None,
    span: Span | None = None,
) -> Figure:
    """Spend per bucket [start, start + step) stacked by token bucket (`COST_BUCKETS`), and what
    the cache saved (no-cache cost − cost) as a line on the same dollar axis."""
    bars = on_interval(starts, step, zone, zone_label)  # the same buckets for every bar
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": label,
            **_own(bars),
            "y": [rounded(v) for v in costs[key]],
            "marker": {"color": COLORS[key]},
            "hovertemplate": "$%{y:.4f} · %{customdata}<extra>" + label + "</extra>",
        }
        for key, label in COST_BUCKETS
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "saved by the cache",
            **mid_interval(starts, step, zone, zone_label, span),
            "y": [rounded(v) for v in saved],
            "line": {"color": COLORS["ok"], "width": 2, "dash": "dot"},
            "hovertemplate": "$%{y:.4f} · %{customdata}<extra>saved by the cache</extra>",
        }
    )
    if previous_cost is not None:
        # the previous period's spend per bucket, drawn over this period's buckets
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "spend, previous period",
                **mid_interval(starts, step, zone, zone_label, span),
                "y": [rounded(v) for v in previous_cost],
                "line": {"color": COLORS["window"], "width": 1.5, "dash": "dash", "shape": "hvh"},
                "hovertemplate": "$%{y:.4f}<extra>previous period</extra>",
            }
        )
    layout = _time_layout("Spend and what the cache saved", zone_label, span, zone, barmode="stack")
    layout["yaxis"] = {**layout["yaxis"], "title": {"text": "USD"}, "tickprefix": "$"}
    return {"data": data, "layout": layout}


def hit_trend_figure(
    *,
    starts: Sequence[datetime],
    step: timedelta,
    hit: Sequence[float | None],
    zone: tzinfo = UTC,
    zone_label: str = "UTC",
    span: Span | None = None,
) -> Figure:
    """Cache-hit % per bucket (Σread / Σ(uncached + read + writes)), each point in the middle of
    its bucket; a gap where nothing was reported, never a zero."""
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "cache hit %",
            **mid_interval(starts, step, zone, zone_label, span),
            "y": [None if r is None else rounded(r * 100.0, 4) for r in hit],
            "line": {"color": COLORS["hit"], "width": 2},
            "connectgaps": False,
            "hovertemplate": "%{y:.1f} % · %{customdata}<extra>cache hit</extra>",
        }
    ]
    layout = _time_layout("Cache-hit trend", zone_label, span, zone, height=260, showlegend=False)
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "cache hit %"},
        "range": [0, 102],
        "rangemode": "normal",
        "ticksuffix": " %",
    }
    layout["margin"] = {**layout["margin"], "t": 48}
    return {"data": data, "layout": layout}


def compactions_figure(
    *,
    days: Sequence[datetime],
    counts: Mapping[str, Sequence[int]],
    labels: Mapping[str, str],
    freed: Sequence[int],
    zone: tzinfo = UTC,
    zone_label: str = "UTC",
    span: Span | None = None,
) -> Figure:
    """Compactions per day stacked by origin (ours: manual, automatic, overflow; the agent's;
    the provider's), each bar over its day, and the tokens they freed as a line on a second
    axis."""
    step = timedelta(days=1)
    bars = on_interval(days, step, zone, zone_label)  # the same days for every bar
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": labels[key],
            **_own(bars),
            "y": list(values),
            "marker": {"color": ORIGIN_COLORS.get(key, COLORS["window"])},
            "hovertemplate": "%{y} compactions · %{customdata}<extra>" + labels[key] + "</extra>",
        }
        for key, values in counts.items()
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "tokens freed",
            **mid_interval(days, step, zone, zone_label, span),
            "y": list(freed),
            "yaxis": "y2",
            "line": {"color": COLORS["context"], "width": 2},
            "hovertemplate": "%{y:,} tokens · %{customdata}<extra>freed</extra>",
        }
    )
    layout = _time_layout("Compactions per day by origin", zone_label, span, zone, barmode="stack")
    layout["xaxis"] = {
        **layout["xaxis"],
        # two short lines: one long line is clipped at the sides on a phone
        "title": {"text": f"day ({zone_label})<br>ours by server clock, others by agent's"},
    }
    if span is None or span[1] - span[0] >= 2 * step:
        # a tick a day; on a shorter span a day tick would leave the axis with one or none
        layout["xaxis"]["dtick"] = 86_400_000
    most = max((sum(day) for day in zip(*counts.values(), strict=True)), default=0)
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "compactions"},
        "rangemode": "tozero",
        "tickformat": ",d",
    }
    layout["yaxis"] |= whole_ticks(most)
    layout["yaxis2"] = {
        "title": {"text": "tokens freed"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "tickformat": ".3~s",
        "showgrid": False,
        "automargin": True,
        # nothing freed: plotly's own range would tick 0.2-token steps ("667m")
        **whole_ticks(max(freed, default=0)),
    }
    layout["margin"] = {**layout["margin"], "r": 64, "b": 72}
    return {"data": data, "layout": layout}
