"""Projection, pressure, cache-hit ratio, bands and round signals."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from telemetry.pressure import (
    CHARS_PER_TOKEN,
    cache_hit_ratio,
    estimate_tokens,
    pressure,
    pressure_band,
    projected_next_request,
    round_signal,
    turn_context_tokens,
)
from telemetry.usage import NormalizedUsage, normalize_usage

counts = st.integers(min_value=0, max_value=10**9)


def call(uncached=0, read=0, w5=0, w1=0, reported=True) -> NormalizedUsage:
    return NormalizedUsage(
        provider="anthropic",
        uncached_input=uncached,
        cache_read=read,
        cache_write_5m=w5,
        cache_write_1h=w1,
        output=0,
        reasoning_output=None,
        reported_cache=reported,
    )


calls = st.builds(call, counts, counts, counts, counts, st.booleans())


# --- estimation and projection -----------------------------------------------------------------


def test_chars_per_token_is_the_d6_four():
    assert CHARS_PER_TOKEN == 4
    assert [estimate_tokens(n) for n in (0, 3, 4, 7, 8, 4003)] == [0, 0, 1, 1, 2, 1000]


def test_projection_adds_the_reply_and_the_appended_tokens():
    # 49,200 context + 800 reply + 4003 // 4 appended.
    assert (
        projected_next_request(
            context_tokens=49_200,
            output=800,
            reasoning_output=None,
            appended_tokens=estimate_tokens(4003),
        )
        == 51_000
    )


def test_projection_leaves_out_reasoning_because_it_is_not_resent():
    assert (
        projected_next_request(
            context_tokens=49_200, output=800, reasoning_output=300, appended_tokens=1_000
        )
        == 50_700
    )


@given(context=counts, output=counts, reasoning=st.none() | counts, appended=counts)
def test_projection_is_never_below_the_context_and_adds_exactly_the_parts(
    context, output, reasoning, appended
):
    assume(reasoning is None or reasoning <= output)

    projected = projected_next_request(
        context_tokens=context, output=output, reasoning_output=reasoning, appended_tokens=appended
    )

    assert projected >= context
    assert projected - context - (output - (reasoning or 0)) == appended


@pytest.mark.parametrize(
    "kwargs",
    [
        {"context_tokens": -1, "output": 0, "reasoning_output": None, "appended_tokens": 0},
        {"context_tokens": 0, "output": 1, "reasoning_output": 2, "appended_tokens": 0},
        {"context_tokens": 0, "output": 0, "reasoning_output": None, "appended_tokens": -4},
        {"context_tokens": True, "output": 0, "reasoning_output": None, "appended_tokens": 0},
    ],
)
def test_projection_refuses_impossible_inputs(kwargs):
    with pytest.raises(ValueError):
        projected_next_request(**kwargs)


# --- pressure ----------------------------------------------------------------------------------


def test_pressure_divides_by_the_window_less_the_reserved_output():
    assert pressure(51_000, 200_000, 32_000) == 51_000 / 168_000


def test_the_same_tokens_press_differently_on_different_windows():
    # agentistics PR #124: 212,959 tokens is 106 % of 200k but 21 % of 1M.
    assert pressure(212_959, 200_000, 0) == pytest.approx(1.064795)
    assert pressure(212_959, 1_000_000, 0) == pytest.approx(0.212959)


def test_pressure_is_unknown_when_the_window_is_unknown():
    assert pressure(51_000, None, 32_000) is None


@pytest.mark.parametrize(("window", "reserved"), [(32_000, 32_000), (8_000, 32_000)])
def test_pressure_refuses_a_window_no_request_fits_in(window, reserved):
    with pytest.raises(ValueError, match="must exceed"):
        pressure(1, window, reserved)


@given(a=counts, b=counts, window=st.integers(1, 10**7), reserved=st.integers(0, 10**6))
def test_pressure_grows_with_the_projection(a, b, window, reserved):
    assume(window > reserved)
    low, high = sorted((a, b))

    p_low, p_high = pressure(low, window, reserved), pressure(high, window, reserved)

    assert p_low is not None and p_high is not None
    assert 0 <= p_low <= p_high


# --- cache-hit ratio ---------------------------------------------------------------------------


def test_cache_hit_of_the_issue_example_is_45000_of_49200():
    issue = normalize_usage(
        {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        }
    )

    assert cache_hit_ratio([issue]) == 45000 / 49200


def test_cache_hit_is_sum_over_sum_not_an_average_of_ratios():
    small_hot = call(uncached=10, read=90)  # 90 %
    big_cold = call(uncached=900)  # 0 %

    assert cache_hit_ratio([small_hot, big_cold]) == 90 / 1000
    assert cache_hit_ratio([small_hot, big_cold]) != (0.9 + 0.0) / 2


def test_calls_that_did_not_report_cache_are_left_out():
    assert (
        cache_hit_ratio([call(uncached=10, read=90), call(uncached=10_000, reported=False)]) == 0.9
    )


def test_cache_hit_is_unknown_when_no_call_reported_cache_and_zero_when_they_missed():
    assert cache_hit_ratio([]) is None
    assert cache_hit_ratio([call(uncached=500, reported=False)]) is None
    assert cache_hit_ratio([call(uncached=500)]) == 0.0


def test_cache_hit_counts_writes_in_the_denominator():
    assert cache_hit_ratio([call(uncached=100, read=300, w5=400, w1=200)]) == 0.3


@given(st.lists(calls, max_size=20))
def test_cache_hit_is_a_ratio_in_zero_one_or_none(batch):
    ratio = cache_hit_ratio(batch)

    reported = [c for c in batch if c.reported_cache]
    if sum(c.context_tokens for c in reported) == 0:
        assert ratio is None
    else:
        assert ratio is not None
        assert 0.0 <= ratio <= 1.0
        assert ratio == sum(c.cache_read for c in reported) / sum(
            c.context_tokens for c in reported
        )


# --- turns, bands, rounds ----------------------------------------------------------------------


def test_a_turn_is_as_big_as_its_peak_call_not_the_sum():
    assert turn_context_tokens([40_000, 52_000, 51_000]) == 52_000
    assert turn_context_tokens([]) is None


@pytest.mark.parametrize(
    ("value", "band"),
    [
        (None, "unknown"),
        (0.0, "ok"),
        (0.69, "ok"),
        (0.70, "prune"),
        (0.84, "prune"),
        (0.85, "compact"),
        (1.0, "compact"),
        (1.0001, "over"),
    ],
)
def test_pressure_band_against_prune_at_70_and_compact_at_85(value, band):
    assert pressure_band(value, 0.70, 0.85) == band


@pytest.mark.parametrize(("prune", "summarize"), [(0.9, 0.8), (0, 0.8), (0.5, 1.5)])
def test_pressure_band_refuses_thresholds_out_of_order(prune, summarize):
    with pytest.raises(ValueError):
        pressure_band(0.5, prune, summarize)


@given(
    value=st.floats(0, 3, allow_nan=False),
    prune=st.floats(0.01, 1),
    summarize=st.floats(0.01, 1),
)
def test_a_higher_pressure_never_lands_in_a_milder_band(value, prune, summarize):
    prune, summarize = sorted((prune, summarize))
    order = ["ok", "prune", "compact", "over"]

    here = order.index(pressure_band(value, prune, summarize))
    higher = order.index(pressure_band(value + 0.01, prune, summarize))

    assert higher >= here


@pytest.mark.parametrize(
    ("rounds", "soft", "hard", "signal"),
    [
        (0, 20, 40, "none"),
        (19, 20, 40, "none"),
        (20, 20, 40, "nudge"),
        (39, 20, 40, "nudge"),
        (40, 20, 40, "stop"),
        (100, 20, 40, "stop"),
        (100, None, None, "none"),
        (25, 20, None, "nudge"),
        (25, None, 20, "stop"),
        (25, 30, 20, "stop"),
    ],
)
def test_round_signal_nudges_at_the_soft_limit_and_stops_at_the_cap(rounds, soft, hard, signal):
    assert round_signal(rounds, soft, hard) == signal


@pytest.mark.parametrize(("rounds", "soft", "hard"), [(-1, 2, 3), (1, 0, 3), (1, 2, -3)])
def test_round_signal_refuses_negative_rounds_and_non_positive_limits(rounds, soft, hard):
    with pytest.raises(ValueError):
        round_signal(rounds, soft, hard)
