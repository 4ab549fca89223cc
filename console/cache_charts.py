"""Charts of cache misses (D1, D2) as plain plotly data. Standard library only.

`misses_figure`: a session's misses on the turn axis, one marker trace per cause (so the legend
names the causes), sized by missed tokens, hover showing the premium and the evidence.
`premiums_figure`: premiums by cause per day, stacked bars (the fleet and the profiles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any, Final

from console.charts import Figure, chart_layout
from console.fleet_charts import Span, on_interval, span_axis

CAUSE_COLORS: Final = {
    "model_switch": "#6a1b9a",
    "expiry": "#ef6c00",
    "our_compaction": "#00838f",
    "agent_compaction": "#2e7d32",
    "prefix_break": "#c62828",
    "unexplained": "#757575",
}
# Misses drawn per cause at most (the table lists them all).
MAX_MARKERS: Final = 1500


@dataclass(frozen=True, slots=True)
class MissPoint:
    turn: float
    missed_tokens: int
    premium_usd: Decimal | None
    cause: str
    label: str
    evidence: str


def misses_figure(points: Sequence[MissPoint], *, last_turn: int | None = None) -> Figure:
    """Missed tokens per miss on the turn axis, one trace per cause present (in cause order)."""
    data: list[dict[str, Any]] = []
    for cause, color in CAUSE_COLORS.items():
        mine = [p for p in points if p.cause == cause]
        if not mine:
            continue
        if len(mine) > MAX_MARKERS:
            # keep the costliest: they are what an operator acts on
            mine = sorted(mine, key=lambda p: -(p.premium_usd or 0))[:MAX_MARKERS]
            mine.sort(key=lambda p: p.turn)
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": mine[0].label,
                "x": [p.turn for p in mine],
                "y": [p.missed_tokens for p in mine],
                "marker": {
                    "color": color,
                    "size": 9,
                    "symbol": "x" if cause == "expiry" else "circle",
                },
                "text": [f"{_dollars(p.premium_usd)} — {_short(p.evidence)}" for p in mine],
                "hovertemplate": "turn %{x}: %{y:,} tokens missed<br>%{text}<extra>"
                + mine[0].label
                + "</extra>",
            }
        )
    layout = chart_layout("Cache misses by cause", height=300)
    layout["hovermode"] = "closest"
    layout["yaxis"] = {**layout["yaxis"], "title": {"text": "missed tokens"}, "rangemode": "tozero"}
    if last_turn is not None:
        layout["xaxis"] = {**layout["xaxis"], "range": [-0.5, last_turn + 0.5]}
    return {"data": data, "layout": layout}


def miss_markers(points: Sequence[MissPoint]) -> list[dict[str, Any]]:
    """Traces that mark each miss on the session's cache chart (its hit-% pane, at the top):
    one per cause, a downward triangle at the miss's turn, hover naming cause and premium."""
    traces: list[dict[str, Any]] = []
    for cause, color in CAUSE_COLORS.items():
        mine = [p for p in points if p.cause == cause][:MAX_MARKERS]
        if not mine:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"miss: {mine[0].label}",
                "x": [p.turn for p in mine],
                "y": [101] * len(mine),
                "marker": {"color": color, "size": 10, "symbol": "triangle-down"},
                "text": [f"{p.missed_tokens:,} tokens, {_dollars(p.premium_usd)}" for p in mine],
                "hovertemplate": "%{text}<extra>miss: " + mine[0].label + "</extra>",
            }
        )
    return traces


def premiums_figure(
    by_day: Mapping[str, Mapping[Any, Decimal]], labels: Mapping[Any, str], title: str
) -> Figure:
    """Premium $ per day, stacked by cause (causes with no premium at all are left out)."""
    days = sorted(by_day)
    data: list[dict[str, Any]] = []
    for cause, color in CAUSE_COLORS.items():
        values = [float(by_day[day].get(cause, Decimal(0))) for day in days]
        if not any(values):
            continue
        data.append(
            {
                "type": "bar",
                "name": labels.get(cause, cause),
                "x": days,
                "y": [round(v, 6) for v in values],
                "marker": {"color": color},
                "hovertemplate": "$%{y:.4f}<extra>" + labels.get(cause, cause) + "</extra>",
            }
        )
    layout = chart_layout(title, height=320)
    layout["barmode"] = "stack"
    layout["xaxis"] = {**layout["xaxis"], "title": {"text": "day"}, "type": "category"}
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "miss premium $"},
        "rangemode": "tozero",
    }
    return {"data": data, "layout": layout}


def premiums_by_bucket_figure(
    *,
    starts: Sequence[datetime],
    step: timedelta,
    by_bucket: Mapping[datetime, Mapping[Any, Decimal]],
    labels: Mapping[Any, str],
    zone: tzinfo = UTC,
    zone_label: str = "UTC",
    span: Span | None = None,
) -> Figure:
    """Premium $ per bucket [start, start + step) of the overview's range, stacked by cause,
    each bar over its interval in the operator's zone (causes with no premium at all are left
    out); the axis spans `span`, the period (`console.fleet_charts`)."""
    data: list[dict[str, Any]] = []
    for cause, color in CAUSE_COLORS.items():
        values = [float(by_bucket.get(start, {}).get(cause, Decimal(0))) for start in starts]
        if not any(values):
            continue
        label = labels.get(cause, cause)
        data.append(
            {
                "type": "bar",
                "name": label,
                **on_interval(starts, step, zone, zone_label),
                "y": [round(v, 6) for v in values],
                "marker": {"color": color},
                "hovertemplate": "$%{y:.4f} · %{customdata}<extra>" + label + "</extra>",
            }
        )
    layout = chart_layout("Miss premiums by cause", height=300)
    layout["barmode"] = "stack"
    layout["xaxis"] = {
        **layout["xaxis"],
        "type": "date",
        "title": {"text": f"time ({zone_label}, agent's clock)"},
        **span_axis(span, zone),
    }
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "miss premium $"},
        "rangemode": "tozero",
        "tickprefix": "$",
    }
    return {"data": data, "layout": layout}


def _dollars(value: Decimal | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def _short(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
