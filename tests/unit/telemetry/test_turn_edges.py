"""A turn's figures at their edges: a turn needs a call, its cache-hit ratio is unknown without a
reporting call and 0 without input, and its peak and last call are taken by call number."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from telemetry.accounting import CallFigures, calls_before, summarize_turn

D = Decimal
T0 = datetime(2026, 12, 1, tzinfo=UTC)
CALL = CallFigures(
    call=0,
    at=T0,
    model="m",
    uncached_input=100,
    cache_read=300,
    cache_write_5m=0,
    cache_write_1h=0,
    output=7,
    reasoning_output=None,
    reported_cache=True,
    appended_chars=None,
    window_tokens=None,
    surface_version=None,
    cost_buckets=None,
    no_cache_cost=None,
)


def test_a_turn_has_at_least_one_call():
    with pytest.raises(ValueError, match="^a turn has at least one call$"):
        summarize_turn([])


def test_the_cache_hit_ratio_is_read_over_input_of_the_reporting_calls():
    silent = replace(CALL, call=1, cache_read=0, uncached_input=600, reported_cache=False)
    turn = summarize_turn([CALL, silent])
    assert (turn.cache_read_reported, turn.cache_denominator, turn.cache_reported_calls) == (
        300,
        400,
        1,
    )
    assert turn.cache_hit_ratio == 0.75
    assert summarize_turn([silent]).cache_hit_ratio is None
    empty = replace(CALL, uncached_input=0, cache_read=0)
    assert summarize_turn([empty]).cache_hit_ratio == 0.0


def test_the_peak_is_the_largest_call_and_the_last_is_the_highest_number():
    big = replace(CALL, call=0, uncached_input=5_000, output=1, at=T0 + timedelta(seconds=9))
    last = replace(CALL, call=2, model="n", output=3, reasoning_output=2, appended_chars=40)
    turn = summarize_turn([last, big, replace(CALL, call=1)])
    assert (turn.context_tokens, turn.model, turn.last_call, turn.last_call_output) == (
        5_300,
        "n",
        2,
        3,
    )
    assert (turn.last_call_context_tokens, turn.last_call_appended_chars) == (400, 40)
    assert (turn.first_at, turn.last_at) == (T0, T0 + timedelta(seconds=9))
    assert (turn.reasoning_output, turn.output, turn.calls) == (2, 1 + 3 + 7, 3)


def test_costs_sum_per_bucket_and_unpriced_calls_are_counted():
    priced = replace(
        CALL,
        cost_buckets=(D("0.1"), D("0.2"), D("0.3"), D("0.4"), D("0.000000001")),
        no_cache_cost=D("2"),
    )
    turn = summarize_turn([priced, replace(priced, call=1), replace(CALL, call=2)])
    assert turn.cost_buckets == (D("0.2"), D("0.4"), D("0.6"), D("0.8"), D("0.000000002"))
    assert turn.cost_usd == D("2.000000002")
    assert (turn.no_cache_cost_usd, turn.unpriced_calls) == (D("4"), 1)
    unpriced = summarize_turn([CALL])
    assert (unpriced.cost_buckets, unpriced.cost_usd, unpriced.no_cache_cost_usd) == (
        None,
        None,
        None,
    )


def test_calls_before_on_hand_written_sessions():
    known = (replace(CALL, call=0), replace(CALL, call=1))
    assert calls_before(None, None, 0, 0) == ()
    assert calls_before(3, None, 4, 0) == ()
    assert calls_before(3, known, 2, 5) is None
    assert calls_before(3, None, 3, 5) is None
    assert calls_before(3, known, 3, 1) is None
    assert calls_before(3, known, 3, 2) == known
    assert calls_before(3, [], 3, 0) == ()
