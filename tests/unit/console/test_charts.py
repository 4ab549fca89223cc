"""Properties of the console's chart downsampling and figure builders (pure, no Django)."""

from __future__ import annotations

import json

from hypothesis import assume, given
from hypothesis import strategies as st

from console.charts import (
    Marker,
    cache_figure,
    cost_figure,
    downsample,
    marker_indices,
    pressure_figure,
    spike_indices,
    spike_threshold,
)
from console.gauge_chart import gauge_figure

values = st.lists(st.integers(min_value=0, max_value=2_000_000), min_size=0, max_size=600)
maybe_values = st.lists(
    st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False)),
    min_size=0,
    max_size=600,
)
budgets = st.integers(min_value=4, max_value=120)


@given(values, budgets)
def test_downsample_never_exceeds_the_budget(ys, budget):
    assert len(downsample(ys, budget)) <= budget


@given(values, budgets)
def test_downsample_keeps_first_last_and_global_extremes(ys, budget):
    kept = set(downsample(ys, budget))
    if not ys:
        assert kept == set()
        return
    assert {0, len(ys) - 1} <= kept
    assert max(ys) in {ys[i] for i in kept}
    assert min(ys) in {ys[i] for i in kept}


@given(values, budgets)
def test_downsample_returns_sorted_unique_valid_indices(ys, budget):
    kept = downsample(ys, budget)
    assert kept == sorted(set(kept))
    assert all(0 <= i < len(ys) for i in kept)


@given(values, budgets, st.data())
def test_downsample_keeps_every_index_it_is_told_to_keep(ys, budget, data):
    assume(ys)
    keep = data.draw(
        st.lists(st.integers(min_value=0, max_value=len(ys) - 1), max_size=max(0, budget - 4))
    )
    kept = downsample(ys, budget, keep=keep)
    assert set(keep) <= set(kept)
    assert len(kept) <= budget


@given(maybe_values, budgets)
def test_downsample_with_unknown_values_keeps_the_budget_and_the_known_peak(ys, budget):
    kept = downsample(ys, budget)
    assert len(kept) <= budget
    known = [y for y in ys if y is not None]
    if known:
        assert max(known) in {ys[i] for i in kept}


def test_downsample_keeps_everything_when_it_fits():
    assert downsample([3, 1, 2], 10) == [0, 1, 2]


def test_a_single_peak_in_a_long_flat_series_survives():
    ys = [10] * 10_000
    ys[6_543] = 99_999
    assert 6_543 in downsample(ys, 100)


@given(st.lists(st.integers(min_value=0, max_value=10**7), max_size=400), st.integers(0, 50))
def test_every_spike_above_the_threshold_is_kept_when_within_the_limit(writes, limit):
    threshold = spike_threshold(writes)
    spikes = spike_indices(writes, limit=limit)
    assert len(spikes) <= limit
    above = [i for i, w in enumerate(writes) if threshold is not None and w > threshold]
    assert set(spikes) <= set(above)
    if len(above) <= limit:
        assert spikes == above
    else:
        # the largest are the ones kept
        smallest_kept = min(writes[i] for i in spikes) if spikes else None
        dropped = set(above) - set(spikes)
        assert smallest_kept is None or all(writes[i] <= smallest_kept for i in dropped)


@given(
    st.lists(st.integers(min_value=0, max_value=10**7), min_size=50, max_size=3000),
    st.integers(min_value=40, max_value=400),
)
def test_the_cache_chart_never_drops_a_write_spike(writes, budget):
    turns = list(range(len(writes)))
    figure = cache_figure(
        turns=turns,
        hit_ratio=[0.5] * len(writes),
        write_5m=writes,
        write_1h=[0] * len(writes),
        max_points=budget,
    )
    drawn = set(figure["data"][0]["x"])
    for i in spike_indices(writes, limit=budget // 4):
        assert turns[i] in drawn
    for trace in figure["data"]:
        assert len(trace["x"]) <= budget


@given(
    st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=3000),
    st.data(),
)
def test_the_pressure_chart_keeps_every_compaction_marker(context, data):
    turns = list(range(0, 2 * len(context), 2))  # gaps between turn numbers
    markers = data.draw(
        st.lists(
            st.builds(Marker, turn=st.integers(0, 2 * len(context)), label=st.just("prune")),
            max_size=30,
        )
    )
    figure = pressure_figure(
        turns=turns,
        context_tokens=context,
        projected=context[-1] + 100,
        window=200_000,
        reserved=16_000,
        prune_threshold=0.6,
        summarize_threshold=0.8,
        markers=markers,
        max_points=200,
    )
    line = figure["data"][0]
    assert len(line["x"]) <= 200
    drawn = set(line["x"])
    for i in marker_indices(turns, markers):
        assert turns[i] in drawn
    marked = [s["x0"] for s in figure["layout"]["shapes"] if s["xref"] == "x"]
    assert marked == [m.turn for m in markers]


def test_marker_indices_name_the_turn_and_the_one_before():
    assert marker_indices([0, 2, 4, 6], [Marker(4, "x")]) == [1, 2]
    assert marker_indices([0, 2, 4, 6], [Marker(3, "x")]) == [1, 2]
    assert marker_indices([0, 2], [Marker(99, "x")]) == [1]
    assert marker_indices([], [Marker(1, "x")]) == []


def test_without_a_window_the_pressure_chart_draws_no_threshold_lines():
    figure = pressure_figure(
        turns=[0, 1],
        context_tokens=[10, 20],
        projected=None,
        window=None,
        reserved=16_000,
        prune_threshold=0.6,
        summarize_threshold=0.8,
    )
    assert figure["layout"]["shapes"] == []
    assert "window unknown" in figure["layout"]["annotations"][0]["text"]
    assert len(figure["data"]) == 1


def test_threshold_lines_sit_at_shares_of_the_usable_window():
    figure = pressure_figure(
        turns=[0],
        context_tokens=[1],
        projected=5,
        window=116_000,
        reserved=16_000,
        prune_threshold=0.6,
        summarize_threshold=0.8,
    )
    ys = sorted(s["y0"] for s in figure["layout"]["shapes"])
    assert ys == [60_000, 80_000, 100_000]


def test_the_cost_chart_stacks_five_buckets_on_the_same_turns_and_skips_unpriced_turns():
    turns = list(range(5000))
    buckets = {
        key: [None if t == 7 else 0.001 * (t % 13) for t in turns]
        for key in ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output")
    }
    buckets["output"][4321] = 9.0
    figure = cost_figure(turns=turns, buckets=buckets, max_points=300)
    xs = [trace["x"] for trace in figure["data"]]
    assert len(xs) == 5
    assert all(x == xs[0] for x in xs)
    assert len(xs[0]) <= 300
    assert 4321 in xs[0]
    assert figure["layout"]["barmode"] == "stack"


def test_a_ten_thousand_turn_session_makes_small_figures():
    n = 10_000
    turns = list(range(n))
    context = [50_000 + (t * 7919) % 120_000 for t in turns]
    figures = [
        pressure_figure(
            turns=turns,
            context_tokens=context,
            projected=170_000,
            window=200_000,
            reserved=16_000,
            prune_threshold=0.6,
            summarize_threshold=0.8,
            markers=[Marker(t, "prune") for t in range(500, n, 500)],
        ),
        cache_figure(
            turns=turns,
            hit_ratio=[(t % 100) / 100 for t in turns],
            write_5m=[(t * 31) % 4000 for t in turns],
            write_1h=[0] * n,
        ),
        cost_figure(
            turns=turns,
            buckets={
                key: [0.000123456789 * ((t * k) % 97) for t in turns]
                for k, key in enumerate(
                    ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output"),
                    start=1,
                )
            },
        ),
    ]
    for figure in figures:
        for trace in figure["data"]:
            assert len(trace["x"]) <= 2000
    assert len(json.dumps(figures)) <= 300_000


def test_the_gauge_steps_follow_the_thresholds():
    figure = gauge_figure(
        projected=90_000,
        window=116_000,
        reserved=16_000,
        prune_threshold=0.6,
        summarize_threshold=0.8,
    )
    gauge = figure["data"][0]["gauge"]
    assert [s["range"] for s in gauge["steps"]] == [
        [0, 60_000],
        [60_000, 80_000],
        [80_000, 100_000],
        [100_000, 116_000],
    ]
    assert gauge["threshold"]["value"] == 100_000
    assert figure["data"][0]["value"] == 90_000


def _luminance(color: str) -> float:
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_the_gauge_names_each_colour_band_and_its_range_inside_the_figure():
    figure = gauge_figure(
        projected=90_000,
        window=116_000,
        reserved=16_000,
        prune_threshold=0.55,
        summarize_threshold=0.825,
    )
    steps = figure["data"][0]["gauge"]["steps"]
    legend = figure["layout"]["annotations"]
    assert [a["text"] for a in legend] == [
        "<b>ok</b> below 55 %",
        "<b>prune</b> 55–82.5 %",
        "<b>compact</b> 82.5–100 %",
        "<b>over</b> above 100 %",
    ]
    # each chip wears its step's colour, and its text stays readable on it (WCAG AA)
    assert [a["bgcolor"] for a in legend] == [s["color"] for s in steps]
    for chip in legend:
        text, ground = _luminance(chip["font"]["color"]), _luminance(chip["bgcolor"])
        assert (max(text, ground) + 0.05) / (min(text, ground) + 0.05) >= 4.5
    # the chips sit under the dial, not over it
    dial_bottom = figure["data"][0]["domain"]["y"][0]
    assert all(a["y"] < dial_bottom and a["yanchor"] == "bottom" for a in legend)


def test_the_figures_are_plain_json():
    figure = cache_figure(turns=[1, 2], hit_ratio=[None, 0.5], write_5m=[1, 2], write_1h=[0, 0])
    assert json.loads(json.dumps(figure)) == figure


def test_short_sessions_get_one_tick_per_whole_turn_and_long_ones_keep_auto_ticks():
    from console.charts import COST_BUCKETS, cost_figure

    short = cost_figure(turns=[0, 1, 2], buckets={key: [0.1, 0.2, 0.3] for key, _ in COST_BUCKETS})
    assert short["layout"]["xaxis"]["dtick"] == 1
    long = cost_figure(
        turns=list(range(500)), buckets={key: [0.1] * 500 for key, _ in COST_BUCKETS}
    )
    assert "dtick" not in long["layout"]["xaxis"]


def _extremes_by_loop(ys, start, stop):
    """The plain loop `_extremes` replaced with C-speed min/max: first minimum, first maximum."""
    known = [i for i in range(start, stop) if ys[i] is not None]
    if not known:
        return {start} if start < stop else set()
    return {min(known, key=lambda i: ys[i]), max(known, key=lambda i: ys[i])}


@given(st.one_of(values, maybe_values), budgets)
def test_the_fast_bucket_extremes_pick_the_same_indices_as_the_plain_loop(ys, budget):
    from console.charts import _extremes

    n = len(ys)
    for b in range(max(1, budget // 2)):
        start, stop = b * n // max(1, budget // 2), (b + 1) * n // max(1, budget // 2)
        assert _extremes(ys, start, stop) == _extremes_by_loop(ys, start, stop)
