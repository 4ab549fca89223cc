"""D8 advisor: rounds per turn and what limits would do (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.pressure import round_signal
from telemetry.round_advice import (
    limit_impact,
    percentile,
    rounds_distribution,
    suggest_limits,
)

# 100 turns: most are short, a long tail, one runaway of 140 rounds.
WEEK = {1: 30, 3: 25, 6: 20, 12: 12, 25: 8, 45: 3, 90: 1, 140: 1}


def test_golden_distribution_of_a_week_of_turns():
    d = rounds_distribution(WEEK)
    assert (d.turns, d.p50, d.p90, d.p99, d.max) == (100, 3, 25, 90, 140)
    counts = {b.label: b.turns for b in d.buckets}
    assert counts == {
        "1": 30,
        "2–5": 25,
        "6–10": 20,
        "11–20": 12,
        "21–50": 11,
        "51–100": 1,
        "101–200": 1,
        "201+": 0,
    }


def test_golden_current_and_proposed_limits():
    current = limit_impact(WEEK, soft_limit=20, hard_cap=50)
    # nudged: 25 (8) + 45 (3) + 90 + 140 = 13; stopped: 90 + 140 = 2
    assert (current.nudged, current.stopped) == (13, 2)
    assert current.nudged_share == pytest.approx(0.13)
    assert limit_impact(WEEK, soft_limit=None, hard_cap=None).nudged == 0
    # suggested: soft at p90 = 25, hard at ceil(1.5 × p99 = 90) = 135
    assert suggest_limits(WEEK) == (25, 135)
    proposed = limit_impact(WEEK, soft_limit=25, hard_cap=135)
    assert (proposed.nudged, proposed.stopped) == (13, 1)


def test_too_few_turns_get_no_suggestion_and_empty_is_empty():
    assert suggest_limits({5: 19}) is None
    empty = rounds_distribution({})
    assert (empty.turns, empty.p50, empty.max) == (0, None, None)
    assert limit_impact({}, soft_limit=5, hard_cap=10).nudged_share is None


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="soft_limit"):
        limit_impact(WEEK, soft_limit=0, hard_cap=None)
    with pytest.raises(ValueError):
        percentile(WEEK, 0)


histograms = st.dictionaries(st.integers(1, 300), st.integers(1, 50), max_size=30)
limits = st.none() | st.integers(1, 300)


@given(histograms, limits, limits)
def test_impact_agrees_with_the_live_round_signal(histogram, soft, hard):
    impact = limit_impact(histogram, soft_limit=soft, hard_cap=hard)
    signals = {r: round_signal(r, soft, hard) for r in histogram}
    assert impact.stopped == sum(n for r, n in histogram.items() if signals[r] == "stop")
    # nudged counts every turn that reached the soft limit, the stopped ones included
    assert impact.nudged == sum(n for r, n in histogram.items() if soft is not None and r >= soft)
    if soft is not None and hard is not None and soft <= hard:
        assert impact.stopped <= impact.nudged


@given(histograms)
def test_suggestions_are_ordered_and_stop_at_most_one_percent(histogram):
    suggested = suggest_limits(histogram)
    if suggested is None:
        assert sum(histogram.values()) < 20
        return
    soft, hard = suggested
    assert 2 <= soft < hard
    impact = limit_impact(histogram, soft_limit=soft, hard_cap=hard)
    assert impact.stopped <= 0.01 * impact.turns + 1e-9
    d = rounds_distribution(histogram)
    assert sum(b.turns for b in d.buckets) == d.turns
