"""The fleet overview's charts as plain data: spend, cache-hit trend and compactions per origin,
with time on the x axis. Standard library only, as `console.charts` (whose colours, cost buckets
and layout they share)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from console.charts import COLORS, COST_BUCKETS, Figure, chart_layout, rounded

ORIGIN_COLORS: Final = {
    "manual": "#1f4e79",
    "auto": "#00838f",
    "overflow": "#b71c1c",
    "agent": "#6a1b9a",
    "provider": "#ef6c00",
}


def _time_layout(title: str, **extra: Any) -> dict[str, Any]:
    layout = chart_layout(title, **extra)
    layout["xaxis"] = {
        "type": "date",
        "gridcolor": "#eceff1",
        "zeroline": False,
        "title": {"text": "time (UTC)"},
    }
    # a legend above the plot never collides with the axis title on a narrow screen
    layout["margin"] = {"l": 64, "r": 24, "t": 84, "b": 48}
    layout["title"] = {**layout["title"], "y": 0.98, "yanchor": "top"}
    return layout


def spend_figure(
    *, starts: Sequence[str], costs: Mapping[str, Sequence[float]], saved: Sequence[float]
) -> Figure:
    """Spend per bucket stacked by token bucket (`COST_BUCKETS`), and what the cache saved
    (no-cache cost − cost) as a line on the same dollar axis. `starts` are ISO bucket starts."""
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": label,
            "x": list(starts),
            "y": [rounded(v) for v in costs[key]],
            "marker": {"color": COLORS[key]},
            "hovertemplate": "$%{y:.4f}<extra>" + label + "</extra>",
        }
        for key, label in COST_BUCKETS
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "saved by the cache",
            "x": list(starts),
            "y": [rounded(v) for v in saved],
            "line": {"color": COLORS["ok"], "width": 2, "dash": "dot"},
            "hovertemplate": "$%{y:.4f}<extra>saved by the cache</extra>",
        }
    )
    layout = _time_layout("Spend and what the cache saved", barmode="stack")
    layout["yaxis"] = {**layout["yaxis"], "title": {"text": "USD"}, "tickprefix": "$"}
    return {"data": data, "layout": layout}


def hit_trend_figure(*, starts: Sequence[str], hit: Sequence[float | None]) -> Figure:
    """Cache-hit % per bucket (Σread / Σ(uncached + read + writes)); a gap where nothing was
    reported, never a zero."""
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "cache hit %",
            "x": list(starts),
            "y": [None if r is None else rounded(r * 100.0, 4) for r in hit],
            "line": {"color": COLORS["hit"], "width": 2},
            "connectgaps": False,
            "hovertemplate": "%{y:.1f} %<extra>cache hit</extra>",
        }
    ]
    layout = _time_layout("Cache-hit trend", height=260, showlegend=False)
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
    days: Sequence[str],
    counts: Mapping[str, Sequence[int]],
    labels: Mapping[str, str],
    freed: Sequence[int],
) -> Figure:
    """Compactions per day stacked by origin (ours: manual, automatic, overflow; the agent's;
    the provider's), and the tokens they freed as a line on a second axis."""
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": labels[key],
            "x": list(days),
            "y": list(values),
            "marker": {"color": ORIGIN_COLORS.get(key, COLORS["window"])},
            "hovertemplate": "%{y} compactions<extra>" + labels[key] + "</extra>",
        }
        for key, values in counts.items()
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "tokens freed",
            "x": list(days),
            "y": list(freed),
            "yaxis": "y2",
            "line": {"color": COLORS["context"], "width": 2},
            "hovertemplate": "%{y:,} tokens<extra>freed</extra>",
        }
    )
    layout = _time_layout("Compactions per day by origin", barmode="stack")
    layout["xaxis"] = {**layout["xaxis"], "title": {"text": "day (UTC)"}, "dtick": 86_400_000}
    most = max((sum(day) for day in zip(*counts.values(), strict=True)), default=0)
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "compactions"},
        "rangemode": "tozero",
        "tickformat": ",d",
    }
    if most < 6:
        layout["yaxis"] |= {"range": [0, max(most, 1) + 0.5], "dtick": 1}
    layout["yaxis2"] = {
        "title": {"text": "tokens freed"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "tickformat": ".3~s",
        "showgrid": False,
    }
    layout["margin"] = {**layout["margin"], "r": 64}
    return {"data": data, "layout": layout}
