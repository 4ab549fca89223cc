"""The console's charts as plain data: peak-keeping downsampling and plotly figure dicts.

Standard library only (the unit suite imports this with `-p no:django`). Figures are the JSON
plotly.js takes (`{"data": [...], "layout": {...}}`), built directly: plotly's graph_objects
validate every point, which costs seconds for a 10,000-turn session.

A chart of a long session must stay small and fast, but what it is for must survive: the peak
of every stretch, the first and last turn, every compaction marker and every cache-write spike
(a prune or a prefix change rewrites the cache; hiding that spike hides the cost it caused).
`downsample` keeps the minimum and the maximum of each bucket (min/max decimation) plus every
index it is told to keep.

The session page's gauge is `console.gauge_chart`; the fleet overview's charts (time on the x
axis) are `console.fleet_charts`; the cache pages' are `console.cache_charts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

Figure = dict[str, Any]

# Points drawn per trace. The ceiling is 2,000; the stacked cost chart draws five traces
# on shared x values and needs fewer bars than a screen has pixels.
PRESSURE_POINTS: Final = 2000
CACHE_POINTS: Final = 1500
COST_POINTS: Final = 700

# A cache write counts as a spike above this multiple of the median non-zero write.
SPIKE_FACTOR: Final = 3.0

COLORS: Final = {
    "context": "#1f4e79",
    "projected": "#6a1b9a",
    "window": "#424242",
    "prune": "#c77700",
    "compact": "#d84315",
    "over": "#b71c1c",
    "ok": "#2e7d32",
    "marker": "#00838f",
    "hit": "#1565c0",
    "write_5m": "#ef6c00",
    "write_1h": "#ad1457",
    "uncached_input": "#5c6bc0",
    "cache_read": "#26a69a",
    "cache_write_5m": "#ffa726",
    "cache_write_1h": "#ec407a",
    "output": "#78909c",
}

COST_BUCKETS: Final = (
    ("uncached_input", "uncached input"),
    ("cache_read", "cache read"),
    ("cache_write_5m", "5m cache write"),
    ("cache_write_1h", "1h cache write"),
    ("output", "output"),
)


COST_KEYS: Final = tuple(key for key, _ in COST_BUCKETS)


@dataclass(frozen=True, slots=True)
class Marker:
    """A compaction drawn on the pressure chart: the turn it took effect at, and its label."""

    turn: int
    label: str
    # what the hover says: for a run of ours, its time (server's clock) and the turn before it
    # with that turn's time (agent's clock)
    hover: str = ""


def downsample(
    values: Sequence[float | None], max_points: int, *, keep: Iterable[int] = ()
) -> list[int]:
    """The sorted indices of `values` to draw.

    Invariants: the first and last index, the index of the global maximum and of the global
    minimum, and every index in `keep` (out-of-range ones are ignored) are always returned.
    Within each of the equal-width buckets the rest is split into, the minimum and the maximum
    are kept, so no peak is flattened away. At most `max_points` indices are returned whenever
    the forced ones fit (len(set(keep)) + 4 <= max_points); otherwise exactly the forced ones.
    `None` values (unknown) are never a bucket's min or max; an all-unknown bucket keeps its
    first index so the gap stays visible. Never mutates `values`.
    """
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4, got {max_points}")
    n = len(values)
    if n <= max_points:
        return list(range(n))
    forced = {0, n - 1} | {i for i in keep if 0 <= i < n}
    known = [i for i in range(n) if values[i] is not None]
    if known:
        forced.add(max(known, key=lambda i: _num(values[i])))
        forced.add(min(known, key=lambda i: _num(values[i])))
    budget = max_points - len(forced)
    buckets = budget // 2
    chosen = set(forced)
    if buckets > 0:
        for b in range(buckets):
            start = b * n // buckets
            stop = (b + 1) * n // buckets
            chosen.update(_extremes(values, start, stop))
    return sorted(chosen)


def series_indices(
    values: Sequence[float | None], limit: int, *, keep: Iterable[int] = ()
) -> list[int]:
    """The sorted indices of `values` to send when at most `limit` points may be sent.

    Invariants: never more than `limit` indices; every index when they fit (`len(values) <=
    limit`); otherwise `downsample`'s choice (first, last, global peak and trough, each
    bucket's extremes) with as many of `keep` as fit beside those four, the latest first. Below
    four points the peak, then the last, then the first are kept. `limit` 0 sends none.
    """
    n = len(values)
    if limit <= 0:
        return []
    if n <= limit:
        return list(range(n))
    if limit < 4:
        known = [i for i in range(n) if values[i] is not None]
        peak = [max(known, key=lambda i: _num(values[i]))] if known else []
        ranked = list(dict.fromkeys([*peak, n - 1, 0]))
        return sorted(ranked[:limit])
    kept = sorted({i for i in keep if 0 <= i < n})
    room = limit - 4
    return downsample(values, limit, keep=kept[len(kept) - room :] if room else [])


def _num(value: float | None) -> float:
    assert value is not None
    return float(value)


def _extremes(values: Sequence[float | None], start: int, stop: int) -> set[int]:
    if start >= stop:
        return set()
    window = values[start:stop]
    if None not in window:
        # The common case, at C speed: a 100,000-turn page calls this ~5,000 times.
        at = window.__getitem__
        span = range(len(window))
        return {start + min(span, key=at), start + max(span, key=at)}  # type: ignore[arg-type]
    low = high = None
    for i in range(start, stop):
        value = values[i]
        if value is None:
            continue
        if low is None or value < _num(values[low]):
            low = i
        if high is None or value > _num(values[high]):
            high = i
    if low is None or high is None:
        return {start}
    return {low, high}


def spike_threshold(values: Sequence[float | None], factor: float = SPIKE_FACTOR) -> float | None:
    """`factor` × the median of the positive values; None when no value is positive."""
    positive = sorted(float(v) for v in values if v is not None and v > 0)
    if not positive:
        return None
    middle = len(positive) // 2
    median = (
        positive[middle] if len(positive) % 2 else (positive[middle - 1] + positive[middle]) / 2.0
    )
    return factor * median


def spike_indices(
    values: Sequence[float | None], *, limit: int, factor: float = SPIKE_FACTOR
) -> list[int]:
    """Sorted indices whose value exceeds `spike_threshold(values, factor)`.

    All of them when there are at most `limit`; otherwise the `limit` largest (a chart of 10,000
    spikes has no spikes, only a level). Never mutates `values`.
    """
    threshold = spike_threshold(values, factor)
    if threshold is None or limit <= 0:
        return []
    above = [i for i, v in enumerate(values) if v is not None and v > threshold]
    if len(above) > limit:
        above = sorted(above, key=lambda i: (-_num(values[i]), i))[:limit]
    return sorted(above)


def marker_indices(turns: Sequence[int], markers: Iterable[Marker]) -> list[int]:
    """For each marker, the index of its turn (or the first later turn) and the one before it,
    so the drop a compaction caused is drawn. `turns` must be ascending."""
    indices: set[int] = set()
    for marker in markers:
        at = _bisect_left(turns, marker.turn)
        for i in (at - 1, at):
            if 0 <= i < len(turns):
                indices.add(i)
    return sorted(indices)


def _bisect_left(items: Sequence[int], value: int) -> int:
    low, high = 0, len(items)
    while low < high:
        mid = (low + high) // 2
        if items[mid] < value:
            low = mid + 1
        else:
            high = mid
    return low


def _pick(items: Sequence[Any], indices: Sequence[int]) -> list[Any]:
    return [items[i] for i in indices]


def rounded(value: float | None, digits: int = 6) -> float | None:
    """Six significant digits: the payload of a long session stays small; nothing drawn changes."""
    if value is None or value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def chart_layout(title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "height": 320,
        "margin": {"l": 64, "r": 24, "t": 84, "b": 44},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        "hovermode": "x unified",
        # above the plot, under the title: on a narrow screen a legend below the plot wraps
        # onto the axis title
        "legend": {
            "orientation": "h",
            "x": 0,
            "y": 1.0,
            "yanchor": "bottom",
            "traceorder": "normal",
        },
        "xaxis": {
            "title": {"text": "turn"},
            "gridcolor": "#eceff1",
            "zeroline": False,
            "rangemode": "tozero",
            # tick labels plotly turns or wraps on a narrow screen push the axis title down
            # instead of running over it
            "automargin": True,
        },
        # wide tick labels push the axis title aside instead of running under it
        "yaxis": {
            "gridcolor": "#eceff1",
            "zeroline": False,
            "rangemode": "tozero",
            "automargin": True,
        },
    }
    layout.update(extra)
    return layout


def whole_ticks(most: float, *, below: int = 6) -> dict[str, Any]:
    """An axis of whole numbers whose largest value is `most`: below `below`, a tick a unit
    from 0 (plotly's own ticks there fall between units: "0.5 compactions", "667m tokens");
    from there on, plotly's."""
    return {"range": [0, max(most, 1) + 0.5], "dtick": 1} if most < below else {}


def _hline(y: float, color: str, dash: str, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    shape = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": y,
        "y1": y,
        "line": {"color": color, "width": 1.5, "dash": dash},
    }
    note = {
        "xref": "paper",
        "x": 1,
        "xanchor": "right",
        "yref": "y",
        "y": y,
        "yanchor": "bottom",
        "text": label,
        "showarrow": False,
        "font": {"size": 11, "color": color},
    }
    return shape, note


def _marker_shapes(
    markers: Sequence[Marker],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shapes, notes = [], []
    for marker in markers:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "x0": marker.turn,
                "x1": marker.turn,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": COLORS["marker"], "width": 1.5, "dash": "dot"},
            }
        )
        notes.append(
            {
                "xref": "x",
                "x": marker.turn,
                "yref": "paper",
                "y": 1,
                "yanchor": "bottom",
                # Right-aligned to its line and level, so a label near the right edge stays in.
                "xanchor": "right",
                "text": marker.label,
                **({"hovertext": marker.hover} if marker.hover else {}),
                "showarrow": False,
                "font": {"size": 10, "color": COLORS["marker"]},
            }
        )
    return shapes, notes


def pressure_figure(
    *,
    turns: Sequence[int],
    context_tokens: Sequence[int],
    projected: int | None,
    window: int | None,
    reserved: int,
    prune_threshold: float,
    summarize_threshold: float,
    markers: Sequence[Marker] = (),
    max_points: int = PRESSURE_POINTS,
) -> Figure:
    """Context tokens per turn, the projected next request, the usable window (window − reserved
    output, 100 % pressure), the prune and summarize thresholds, and compaction markers.

    Every marker is drawn and the turns either side of it are kept by the downsampling. Without
    a known window there are no threshold lines, never guessed ones.
    """
    keep = marker_indices(turns, markers)
    indices = downsample(list(context_tokens), max_points, keep=keep)
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "context tokens",
            "x": _pick(turns, indices),
            "y": _pick(context_tokens, indices),
            "line": {"color": COLORS["context"], "width": 2},
            "hovertemplate": "%{y:,} tokens<extra>context</extra>",
        }
    ]
    if projected is not None:
        next_turn = (turns[-1] + 1) if turns else 0
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "projected next request",
                "x": [next_turn],
                "y": [projected],
                "marker": {"color": COLORS["projected"], "size": 11, "symbol": "diamond"},
                "hovertemplate": "%{y:,} tokens<extra>projected next</extra>",
            }
        )
    shapes, notes = _marker_shapes(markers)
    if window is not None and window > reserved:
        usable = window - reserved
        for y, color, dash, label in (
            (usable, COLORS["over"], "solid", f"usable window {usable:,} (100 %)"),
            (summarize_threshold * usable, COLORS["compact"], "dash", "summarize"),
            (prune_threshold * usable, COLORS["prune"], "dash", "prune"),
        ):
            shape, note = _hline(y, color, dash, label)
            shapes.append(shape)
            notes.append(note)
    else:
        notes.append(
            {
                "xref": "paper",
                "x": 0.5,
                "yref": "paper",
                "y": 0.5,
                "text": "window unknown: no thresholds",
                "showarrow": False,
                "font": {"color": COLORS["window"]},
            }
        )
    layout = chart_layout("Context pressure", shapes=shapes, annotations=notes)
    layout["yaxis"] = {**layout["yaxis"], "title": {"text": "tokens"}, "tickformat": ".3~s"}
    return {"data": data, "layout": _whole_turns(layout, turns)}


def cache_figure(
    *,
    turns: Sequence[int],
    hit_ratio: Sequence[float | None],
    write_5m: Sequence[int],
    write_1h: Sequence[int],
    max_points: int = CACHE_POINTS,
) -> Figure:
    """Cache-hit % per turn (upper pane) and cache-write tokens per turn (a stacked step area,
    lower pane, same turn axis).

    The writes keep every spike (above `SPIKE_FACTOR` × the median write, at most a quarter
    of the budget, the largest first) and the hit line keeps the turns of those spikes too, so a
    rewrite and the hit ratio it cost line up.
    """
    writes = [a + b for a, b in zip(write_5m, write_1h, strict=True)]
    spikes = spike_indices(writes, limit=max(0, max_points // 4))
    write_idx = downsample(writes, max_points, keep=spikes)
    hit_idx = downsample(list(hit_ratio), max_points, keep=spikes)
    # Only the drawn turns are converted (a 100,000-turn session draws 2,000 of them).
    percent = {
        i: None if hit_ratio[i] is None else rounded(_num(hit_ratio[i]) * 100.0, 4) for i in hit_idx
    }
    # Writes are a stacked step area, not bars: at 1,500 turns a bar is under a pixel wide and
    # a spike would vanish; a step area's edge stays visible at any density. Steps are centred
    # on their turn (hvh) so a write lines up with the hit-ratio drop it caused.
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "writes",
            "name": name,
            "x": _pick(turns, write_idx),
            "y": _pick(series, write_idx),
            "yaxis": "y2",
            "line": {"color": COLORS[key], "width": 1, "shape": "hvh"},
            "fillcolor": COLORS[key] + "99",
            "hovertemplate": "%{y:,} tokens<extra>" + name + "</extra>",
        }
        for key, name, series in (
            ("write_5m", "5m cache writes", write_5m),
            ("write_1h", "1h cache writes", write_1h),
        )
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "cache hit %",
            "x": _pick(turns, hit_idx),
            "y": [percent[i] for i in hit_idx],
            "line": {"color": COLORS["hit"], "width": 2},
            "connectgaps": False,
            "hovertemplate": "%{y:.1f} %<extra>cache hit</extra>",
        }
    )
    # Two stacked panes on one turn axis: the hit ratio above, the writes below, so a rewrite
    # spike and the hit-ratio drop it caused line up without drawing over each other.
    layout = chart_layout("Cache health", height=380)
    layout["yaxis"] = {
        **layout["yaxis"],
        "title": {"text": "cache hit %"},
        "range": [0, 102],
        "rangemode": "normal",
        "domain": [0.42, 1],
    }
    # the turn axis (ticks and title) sits under the lower pane
    layout["xaxis"] = {**layout["xaxis"], "anchor": "y2"}
    layout["yaxis2"] = {
        "title": {"text": "writes (tokens)"},
        "domain": [0, 0.32],
        "anchor": "x",
        "gridcolor": "#eceff1",
        "rangemode": "tozero",
        "tickformat": ".3~s",
        "automargin": True,
    }
    # no (or hardly any) writes: whole tokens on the axis, never "500m"
    layout["yaxis2"] |= whole_ticks(max(writes, default=0), below=10)
    return {"data": data, "layout": _whole_turns(layout, turns)}


def cost_figure(
    *,
    turns: Sequence[int],
    buckets: Mapping[str, Sequence[float | None]],
    max_points: int = COST_POINTS,
) -> Figure:
    """Cost per turn in dollars, stacked by bucket (`COST_BUCKETS` order).

    All buckets are drawn at the same turns, chosen by downsampling the turn's total, so every
    bar is one real turn and the most expensive turn is always there. An unpriced turn (unknown
    model) has no bar, never a zero one.
    """
    columns = [buckets[key] for key, _ in COST_BUCKETS]
    totals: list[float | None] = []
    for parts in zip(*columns, strict=True):
        if None in parts:
            known = [p for p in parts if p is not None]
            totals.append(sum(known) if known else None)
        else:
            totals.append(sum(parts))
    indices = downsample(totals, max_points)
    data = [
        {
            "type": "bar",
            "name": label,
            "x": _pick(turns, indices),
            "y": [rounded(buckets[key][i]) for i in indices],
            "marker": {"color": COLORS[key]},
            "hovertemplate": "$%{y:.4f}<extra>" + label + "</extra>",
        }
        for key, label in COST_BUCKETS
    ]
    layout = chart_layout("Cost per turn", barmode="stack", bargap=0.1)
    layout["yaxis"] = {**layout["yaxis"], "title": {"text": "USD"}, "tickprefix": "$"}
    return {"data": data, "layout": _whole_turns(layout, turns)}


def _whole_turns(layout: dict[str, Any], turns: Sequence[int]) -> dict[str, Any]:
    """Turns are whole numbers: a short session gets one tick per turn, never 0.5."""
    if turns and max(turns) - min(turns) <= 12:
        layout["xaxis"] = {**layout["xaxis"], "tick0": 0, "dtick": 1}
    return layout


def session_figures(
    *,
    series: Any,
    markers: Sequence[Marker],
    projected: int | None,
    window: int | None,
    reserved: int,
    prune_threshold: float,
    summarize_threshold: float,
) -> dict[str, Figure]:
    """The session page's three charts on one turn axis (the same range on each, so stacked
    charts line up). `series` is a `console.selectors.session.SessionSeries`."""
    figures = {
        "pressure": pressure_figure(
            turns=series.turns,
            context_tokens=series.context,
            projected=projected,
            window=window,
            reserved=reserved,
            prune_threshold=prune_threshold,
            summarize_threshold=summarize_threshold,
            markers=markers,
        ),
        "cache": cache_figure(
            turns=series.turns,
            hit_ratio=series.hit,
            write_5m=series.write_5m,
            write_1h=series.write_1h,
        ),
        "cost": cost_figure(turns=series.turns, buckets=series.costs),
    }
    if series.turns:
        # the pressure chart also draws the projected next turn: every chart spans it
        span = [series.turns[0] - 0.5, series.turns[-1] + (1.5 if projected is not None else 0.5)]
        for figure in figures.values():
            layout = figure["layout"]
            layout["xaxis"] = {**layout["xaxis"], "range": span, "autorange": False}
    return figures
