"""The session page's context gauge as plain data: the projected next context against the
usable window, with the prune and summarize thresholds as coloured bands. Standard library only,
as `console.charts` (whose colours it shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from console.charts import COLORS, Figure


@dataclass(frozen=True, slots=True)
class GaugeBand:
    """One coloured step of the gauge: its band name, its range in words, and its colours."""

    name: str
    label: str
    color: str
    border: str


GAUGE_HEIGHT: Final = 280
GAUGE_LEGEND_SHARE: Final = 0.3  # of the figure's height, under the dial
GAUGE_LEGEND_TEXT: Final = "#263238"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.4g}"


def gauge_bands(prune_threshold: float, summarize_threshold: float) -> list[GaugeBand]:
    """The gauge's four steps, low to high, each named with the range of pressure it covers
    (pressure: the projected request over the usable window, window − reserved output)."""
    prune, summarize = _percent(prune_threshold), _percent(summarize_threshold)
    return [
        GaugeBand("ok", f"below {prune} %", "#e8f5e9", "#a5d6a7"),
        GaugeBand("prune", f"{prune}–{summarize} %", "#fff3e0", "#ffcc80"),
        GaugeBand("compact", f"{summarize}–100 %", "#ffe0b2", "#ffb74d"),
        GaugeBand("over", "above 100 %", "#ffcdd2", "#e57373"),
    ]


def gauge_figure(
    *,
    projected: int,
    window: int,
    reserved: int,
    prune_threshold: float,
    summarize_threshold: float,
) -> Figure:
    """The projected next request against the window, with the threshold steps of the policy.

    Steps: below prune (ok), prune to summarize, summarize to the usable window (window −
    reserved output, the 100 % of pressure), and the reserved output up to the window. The
    figure carries its own legend: a chip per step, in the step's colour, naming its band and
    range (`gauge_bands`). Requires `window > reserved`.
    """
    if window <= reserved:
        raise ValueError(f"window ({window}) must exceed reserved ({reserved})")
    usable = window - reserved
    top = max(window, projected)
    bands = gauge_bands(prune_threshold, summarize_threshold)
    bounds = [0, prune_threshold * usable, summarize_threshold * usable, usable, top]
    steps = [
        {"range": [bounds[n], bounds[n + 1]], "color": band.color} for n, band in enumerate(bands)
    ]
    pressure = projected / usable
    bar = (
        COLORS["over"]
        if pressure > 1
        else COLORS["compact"]
        if pressure >= summarize_threshold
        else COLORS["prune"]
        if pressure >= prune_threshold
        else COLORS["ok"]
    )
    data = [
        {
            "type": "indicator",
            "mode": "gauge+number",
            "value": projected,
            "number": {"valueformat": ",d", "suffix": " tokens", "font": {"size": 22}},
            "domain": {"x": [0, 1], "y": [GAUGE_LEGEND_SHARE, 1]},
            "gauge": {
                "shape": "angular",
                "axis": {"range": [0, top], "tickformat": ".3~s"},
                "bar": {"color": bar, "thickness": 0.35},
                "steps": steps,
                "threshold": {
                    "line": {"color": COLORS["over"], "width": 3},
                    "thickness": 0.9,
                    "value": usable,
                },
            },
        }
    ]
    # The legend is part of the figure (an indicator trace has no legend entries): one chip per
    # band in the band's own colour, two to a row (the second flush right, for the widest gap
    # between them), so it reads the same at 390 px and 1440 px
    # (the gauge's column is ~360 px wide on both). Dark text on the light band colours keeps
    # well above WCAG AA.
    legend = [
        {
            "name": f"gauge-band-{band.name}",
            "xref": "paper",
            "yref": "paper",
            "x": 0.0 if n % 2 == 0 else 1.0,
            "xanchor": "left" if n % 2 == 0 else "right",
            "y": 0.13 if n < 2 else 0.0,
            "yanchor": "bottom",
            "text": f"<b>{band.name}</b> {band.label}",
            "showarrow": False,
            "align": "left",
            "bgcolor": band.color,
            "bordercolor": band.border,
            "borderwidth": 1,
            "borderpad": 3,
            "font": {"size": 11, "color": GAUGE_LEGEND_TEXT},
        }
        for n, band in enumerate(bands)
    ]
    layout = {
        "height": GAUGE_HEIGHT,
        "margin": {"l": 40, "r": 48, "t": 24, "b": 8},
        "paper_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        "annotations": legend,
    }
    return {"data": data, "layout": layout}
