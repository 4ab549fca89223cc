"""Miss charts as plain data: one trace per cause present, premiums stacked by day."""

from __future__ import annotations

from decimal import Decimal

from console.cache_charts import MissPoint, misses_figure, premiums_figure


def test_misses_figure_draws_one_trace_per_cause_in_cause_order():
    points = [
        MissPoint(3, 50_000, Decimal("0.18"), "expiry", "cache expired", "23m gap"),
        MissPoint(1, 20_000, None, "model_switch", "model switched", "a → b"),
        MissPoint(5, 10_000, Decimal("0.01"), "expiry", "cache expired", "9m gap"),
    ]
    figure = misses_figure(points, last_turn=6)
    assert [t["name"] for t in figure["data"]] == ["model switched", "cache expired"]
    assert figure["data"][1]["x"] == [3, 5] and figure["data"][1]["y"] == [50_000, 10_000]
    assert figure["data"][0]["text"] == ["unpriced — a → b"]
    assert figure["layout"]["xaxis"]["range"] == [-0.5, 6.5]


def test_premiums_figure_stacks_causes_with_a_premium():
    by_day = {
        "2026-11-30": {"expiry": Decimal("0.5"), "unexplained": Decimal(0)},
        "2026-11-29": {"expiry": Decimal("0.25")},
    }
    figure = premiums_figure(by_day, {"expiry": "cache expired"}, "t")
    (trace,) = figure["data"]
    assert trace["x"] == ["2026-11-29", "2026-11-30"] and trace["y"] == [0.25, 0.5]
    assert figure["layout"]["barmode"] == "stack"


def test_miss_markers_sit_on_the_hit_pane_one_trace_per_cause():
    from console.cache_charts import miss_markers

    points = [
        MissPoint(3, 50_000, Decimal("0.18"), "expiry", "cache expired", "gap"),
        MissPoint(7, 9_000, None, "prefix_break", "prefix changed", "system"),
    ]
    traces = miss_markers(points)
    assert [t["name"] for t in traces] == ["miss: cache expired", "miss: prefix changed"]
    assert traces[0]["x"] == [3] and traces[0]["y"] == [101] and "yaxis" not in traces[0]
    assert traces[1]["text"] == ["9,000 tokens, unpriced"]
