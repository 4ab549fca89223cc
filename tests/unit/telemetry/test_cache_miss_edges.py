"""The cache-miss rule at its edges: what a call expects to read, a premium's exact dollars, the
sums by cause in any thread context, D2's pair counts, the gap's text and the TTL advice word for
word."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal, localcontext
from typing import Any

import pytest

from telemetry.cache_misses import (
    CAUSES,
    CallObs,
    Miss,
    SystemChurn,
    expected_read,
    format_gap,
    prefix_tier,
    premium,
    premium_at,
    premiums_by_cause,
    ttl_advice,
)
from telemetry.pricing import ModelPrice, Rates

D = Decimal
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def obs(**kw: Any) -> CallObs:
    values: dict[str, Any] = {
        "turn": 0,
        "call": 0,
        "at": T0,
        "model": "m",
        "uncached_input": 0,
        "cache_read": 0,
    }
    return CallObs(**(values | kw))


def miss(cause: Any, premium_usd: Decimal | None) -> Miss:
    return Miss(
        turn=1,
        call=0,
        at=T0,
        model="m",
        expected_tokens=2_000,
        read_tokens=0,
        missed_tokens=2_000,
        premium_usd=premium_usd,
        cause=cause,
        evidence="",
    )


# --- what a call expects, and the automatic cache's floor ----------------------------------------


@pytest.mark.parametrize(("size", "expected"), [(3_000, 3_000), (5_000, 5_000), (8_000, 5_000)])
def test_a_call_expects_the_previous_prefix_up_to_its_own_size(size, expected):
    previous = obs(cache_read=4_000, cache_write_5m=600, cache_write_1h=400)
    assert previous.cacheable == 5_000
    assert expected_read(previous, obs(uncached_input=size)) == expected


@pytest.mark.parametrize(("prompt", "cacheable"), [(1_023, 0), (1_024, 1_024), (1_025, 1_025)])
def test_the_automatic_cache_keeps_prompts_of_1024_tokens_or_more(prompt, cacheable):
    call = obs(uncached_input=prompt - 24, cache_read=24, cache_write_5m=7, automatic=True)
    assert call.cacheable == cacheable


# --- a premium's dollars ---------------------------------------------------------------------------

# 9-decimal rates: every product below is exact only in a context wider than the default's.
WRITE_5M, WRITE_1H = D("3.904320986"), D("6.246913578")
RATES = Rates(
    input=D("3.123456789"),
    output=D("15"),
    cache_read=D("0.312345678"),
    cache_write_5m=WRITE_5M,
    cache_write_1h=WRITE_1H,
)


def test_missed_tokens_are_paid_from_1h_writes_then_5m_writes_then_input():
    current = obs(uncached_input=10_000, cache_write_5m=300, cache_write_1h=200)
    got = premium_at(current, 1_000, RATES)
    expected = (
        200 * (WRITE_1H - RATES.cache_read)
        + 300 * (WRITE_5M - RATES.cache_read)
        + 500 * (RATES.input - RATES.cache_read)
    ) / D(1_000_000)
    assert got == expected == D("0.0036700617279")


def test_fewer_missed_tokens_than_written_come_from_the_1h_writes_first():
    current = obs(uncached_input=10_000, cache_write_5m=300, cache_write_1h=200)
    assert premium_at(current, 150, RATES) == 150 * (WRITE_1H - RATES.cache_read) / D(1_000_000)
    assert premium_at(current, 450, RATES) == (
        200 * (WRITE_1H - RATES.cache_read) + 250 * (WRITE_5M - RATES.cache_read)
    ) / D(1_000_000)


def test_without_write_rates_written_tokens_are_paid_at_input():
    bare = Rates(D("2"), D("8"), D("0.5"), None, None)
    current = obs(uncached_input=10_000, cache_write_5m=300, cache_write_1h=200)
    assert premium_at(current, 1_000, bare) == D("0.0015")


def test_a_premium_is_exact_in_a_narrow_thread_context_and_never_negative():
    current = obs(uncached_input=10**15, cache_write_5m=10**15, cache_write_1h=10**15)
    with localcontext(Context(prec=6)):
        got = premium_at(current, 3 * 10**15 - 1, RATES)
    exact = (
        10**15 * (WRITE_1H - RATES.cache_read)
        + 10**15 * (WRITE_5M - RATES.cache_read)
        + (10**15 - 1) * (RATES.input - RATES.cache_read)
    ) / D(1_000_000)
    assert got == exact
    reads_dearer = Rates(D("1"), D("1"), D("2"), D("1.5"), None)
    assert premium_at(obs(uncached_input=5_000, cache_write_5m=1_000), 3_000, reads_dearer) == 0
    assert premium_at(current, 1_000, None) is None


def _price(**kw: Any) -> ModelPrice:
    fields: dict[str, Any] = {
        "model": "m",
        "provider": "anthropic",
        "family": "m",
        "window_tokens": 1_000_000,
        "input": D("1"),
        "output": D("5"),
        "cache_read": D("0.1"),
        "cache_write_5m": D("1.25"),
        "cache_write_1h": D("2"),
    }
    return ModelPrice(**(fields | kw))


@pytest.mark.parametrize(("size", "per_token"), [(1_000, D("0.9")), (1_001, D("1.8"))])
def test_a_premium_is_priced_at_the_tier_of_the_current_requests_size(size, per_token):
    price = _price(
        long_context_threshold=1_000,
        long_context=Rates(D("2"), D("10"), D("0.2"), D("2.5"), D("4")),
    )
    current = obs(uncached_input=size)
    assert premium(current, 1_000, price) == 1_000 * per_token / D(1_000_000)
    assert premium(current, 1_000, None) is None


# --- premiums by cause -------------------------------------------------------------------------


def test_premiums_by_cause_sum_every_priced_miss_exactly_and_name_every_cause():
    misses = [
        miss("expiry", D("0.000000001")),
        miss("expiry", D("12345.678901234")),
        miss("expiry", None),
        miss("prefix_break", D("0.5")),
    ]
    with localcontext(Context(prec=5)):
        totals = premiums_by_cause(misses)
    assert totals == {cause: D(0) for cause in CAUSES} | {
        "expiry": D("12345.678901235"),
        "prefix_break": D("0.5"),
    }
    assert list(totals) == list(CAUSES)


# --- D2 ----------------------------------------------------------------------------------------


def test_churn_adds_pairs_and_changes():
    assert SystemChurn(3, 1) + SystemChurn(4, 2) == SystemChurn(7, 3)


@pytest.mark.parametrize(
    ("pairs", "changed", "share", "violates"),
    [
        (0, 0, None, False),
        (2, 2, 1.0, False),  # too few pairs to judge
        (3, 1, 1 / 3, False),
        (3, 2, 2 / 3, True),
        (4, 2, 0.5, False),  # half is not "more than half"
        (4, 3, 0.75, True),
    ],
)
def test_d2_needs_three_pairs_and_more_than_half_of_them_changed(pairs, changed, share, violates):
    churn = SystemChurn(pairs, changed)
    assert churn.share == share
    assert churn.violates_d2 is violates


# --- the tier and the gap's text ---------------------------------------------------------------


def test_the_tier_is_that_of_the_latest_call_that_wrote():
    assert prefix_tier([]) == "5m"
    assert prefix_tier([obs()]) == "5m"
    assert prefix_tier([obs(automatic=True)]) == "auto"
    assert prefix_tier([obs(cache_write_1h=1), obs(automatic=True)]) == "1h"
    assert prefix_tier([obs(cache_write_1h=1), obs(cache_write_5m=1)]) == "5m"
    assert prefix_tier([obs(cache_write_5m=1, cache_write_1h=1)]) == "1h"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0m 00s"),
        (0, "0m 00s"),
        (59.9, "0m 59s"),
        (61, "1m 01s"),
        (3_599, "59m 59s"),
        (3_600, "1h 00m"),
        (3_661, "1h 01m"),
        (90_061, "25h 01m"),
    ],
)
def test_a_gap_reads_in_minutes_and_seconds_or_hours_and_minutes(seconds, text):
    assert format_gap(timedelta(seconds=seconds)) == text


# --- the TTL advice ----------------------------------------------------------------------------

KEPT = (
    "the 1h tier would have kept those prefixes, at 2× instead of 1.25× the input price per write"
)


def test_no_expiry_miss_gives_no_advice():
    assert ttl_advice("5m", []) is None
    assert ttl_advice("1h", []) is None


def test_on_the_5m_tier_a_gap_of_exactly_an_hour_is_one_the_1h_tier_would_have_kept():
    assert ttl_advice("5m", [(3_600, D("0.1"))]) == (
        f"1 of 1 expiry misses followed gaps under an hour ($0.1000 in premiums): {KEPT}"
    )


def test_unpriced_misses_add_nothing_to_the_premiums_quoted():
    assert ttl_advice("5m", [(600, None), (700, D("0.00005"))]) == (
        f"2 of 2 expiry misses followed gaps under an hour ($0.0000 in premiums): {KEPT}"
    )


def test_gaps_over_an_hour_are_counted_apart():
    assert ttl_advice("5m", [(600, D("1.5")), (3_601, D("2")), (9_000, None)]) == (
        f"1 of 3 expiry misses followed gaps under an hour ($1.5000 in premiums): {KEPT}; "
        "2 followed gaps over an hour, which expire on either tier"
    )


@pytest.mark.parametrize("tier", ["5m", "1h"])
def test_only_gaps_over_an_hour_say_no_tier_keeps_them(tier):
    assert ttl_advice(tier, [(3_601, None)]) == (
        "1 expiry miss followed gaps over an hour: no tier keeps a cache that long"
    )
    assert ttl_advice(tier, [(3_601, None), (7_200, D(1))]) == (
        "2 expiry misses followed gaps over an hour: no tier keeps a cache that long"
    )


def test_on_the_1h_tier_shorter_gaps_are_counted_not_advised():
    assert ttl_advice("1h", [(600, D(1))]) == "1 expiry misses on the 1h tier"
    assert ttl_advice("1h", [(600, D(1)), (7_200, None)]) == "2 expiry misses on the 1h tier"
