"""The 5m-vs-1h TTL counterfactual, with hand-computed dollars and gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.cache_tiers import CachedCall, compare_ttl_tiers, nearest_rank

D = Decimal
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SONNET = D("3")


def at(minutes: float, prefix: int, price: Decimal = SONNET) -> CachedCall:
    return CachedCall(
        at=T0 + timedelta(minutes=minutes), cached_prefix_tokens=prefix, input_price=price
    )


def test_mixed_gaps_priced_per_pair_and_per_opening():
    session = [at(0, 10_000), at(2, 12_000), at(30, 14_000), at(150, 16_000)]

    got = compare_ttl_tiers([session])

    # Opening write of 10k at $3: 1.25× = 0.0375, 2× = 0.06.
    assert (got.opening_cost_5m, got.opening_cost_1h) == (D("0.0375"), D("0.06"))
    # Gap 2 min, 12k: both read (0.0036). Gap 28 min, 14k: 5m rewrites (0.0525), 1h reads
    # (0.0042). Gap 120 min, 16k: both rewrite, 5m at 1.25× (0.06), 1h at 2× (0.096).
    assert got.pairs == 3
    assert got.pairs_cost_5m == D("0.0036") + D("0.0525") + D("0.06")
    assert got.pairs_cost_1h == D("0.0036") + D("0.0042") + D("0.096")
    assert (got.cost_5m, got.cost_1h) == (D("0.1536"), D("0.1638"))
    assert got.cheaper == "5m"


def test_gaps_between_5_and_60_minutes_make_the_1h_tier_cheaper():
    session = [at(0, 100_000), at(10, 100_000), at(30, 100_000), at(70, 100_000)]

    got = compare_ttl_tiers([session])

    # 5m: 0.375 opening + 3 × 0.375 rewrites; 1h: 0.6 opening + 3 × 0.03 reads.
    assert (got.cost_5m, got.cost_1h) == (D("1.5"), D("0.69"))
    assert got.cheaper == "1h"


def test_fast_traffic_ties_on_the_pairs_but_the_opening_write_favours_5m():
    session = [at(m, 50_000) for m in range(6)]

    got = compare_ttl_tiers([session])

    assert got.pairs_cost_5m == got.pairs_cost_1h == 5 * D("0.015")
    assert got.cheaper == "5m"


def test_a_gap_of_exactly_the_ttl_still_hits():
    exactly = compare_ttl_tiers([[at(0, 1_000_000), at(5, 1_000_000), at(65, 1_000_000)]])
    just_over = compare_ttl_tiers(
        [[at(0, 1_000_000), at(5 + 1 / 60_000, 1_000_000), at(65 + 2 / 60_000, 1_000_000)]]
    )

    # At 5 min the 5m entry hits (0.30), at 60 min the 1h entry hits (0.30 + 0.30).
    assert exactly.pairs_cost_5m == D("0.3") + D("3.75")
    assert exactly.pairs_cost_1h == D("0.3") + D("0.3")
    # One millisecond later: 5m rewrites both (2 × 3.75); 1h rewrites the second (0.3 + 6).
    assert just_over.pairs_cost_5m == D("7.5")
    assert just_over.pairs_cost_1h == D("6.3")


def test_each_pair_is_priced_at_the_later_calls_model():
    session = [at(0, 1_000_000, D("3")), at(30, 1_000_000, D("5"))]

    got = compare_ttl_tiers([session])

    assert (got.pairs_cost_5m, got.pairs_cost_1h) == (D("6.25"), D("0.5"))


def test_pairs_never_span_two_sessions():
    got = compare_ttl_tiers([[at(0, 1000)], [at(1, 1000)], []])

    assert (got.sessions, got.pairs) == (2, 0)
    assert got.pairs_cost_5m == got.pairs_cost_1h == 0
    assert (got.gap_p50, got.gap_p90, got.gap_p99) == (None, None, None)


def test_no_traffic_has_no_cheaper_tier():
    got = compare_ttl_tiers([])

    assert got.cheaper is None
    assert got.cost_5m == got.cost_1h == 0


def test_gap_percentiles_are_nearest_rank_over_all_pairs():
    # Two sessions with gaps 1..6 and 7..10 minutes.
    first = [at(sum(range(1, k + 1)), 0) for k in range(7)]
    second = [at(1000 + sum(range(7, k + 1)), 0) for k in range(6, 11)]

    got = compare_ttl_tiers([first, second])

    assert got.pairs == 10
    # n = 10: p50 is rank 5, p90 rank 9, p99 rank ceil(9.9) = 10.
    assert (got.gap_p50, got.gap_p90, got.gap_p99) == (
        timedelta(minutes=5),
        timedelta(minutes=9),
        timedelta(minutes=10),
    )


@pytest.mark.parametrize(
    ("values", "percentile", "expected"),
    [
        ([3, 1, 2], 50, 2),
        ([3, 1, 2], 90, 3),
        ([3, 1, 2], 33, 1),
        ([3, 1, 2], 34, 2),
        ([7], 1, 7),
        ([7], 100, 7),
        ([], 50, None),
    ],
)
def test_nearest_rank_picks_an_observed_value(values, percentile, expected):
    got = nearest_rank([timedelta(minutes=v) for v in values], percentile)

    assert got == (None if expected is None else timedelta(minutes=expected))


@pytest.mark.parametrize("percentile", [0, 101, -5])
def test_nearest_rank_refuses_percentiles_outside_0_100(percentile):
    with pytest.raises(ValueError):
        nearest_rank([timedelta(1)], percentile)


def test_calls_are_ordered_by_time_so_a_skewed_clock_gives_no_negative_gap():
    ordered = [at(0, 1000), at(3, 2000), at(40, 3000)]
    shuffled = [ordered[2], ordered[0], ordered[1]]

    assert compare_ttl_tiers([shuffled]) == compare_ttl_tiers([ordered])
    assert compare_ttl_tiers([shuffled]).gap_p50 == timedelta(minutes=3)


def test_gaps_across_time_zones_are_real_elapsed_time():
    paris = timezone(timedelta(hours=1))
    a = CachedCall(at=T0, cached_prefix_tokens=1_000_000, input_price=SONNET)
    b = CachedCall(
        at=datetime(2026, 11, 30, 10, 4, tzinfo=paris),
        cached_prefix_tokens=1_000_000,
        input_price=SONNET,
    )

    got = compare_ttl_tiers([[a, b]])

    assert got.gap_p50 == timedelta(minutes=4)
    assert got.pairs_cost_5m == D("0.3")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"at": datetime(2026, 11, 30, 9, 0), "cached_prefix_tokens": 1, "input_price": SONNET},  # noqa: DTZ001 - the naive time under test
        {"at": T0, "cached_prefix_tokens": -1, "input_price": SONNET},
        {"at": T0, "cached_prefix_tokens": 1.0, "input_price": SONNET},
        {"at": T0, "cached_prefix_tokens": 1, "input_price": 3.0},
        {"at": T0, "cached_prefix_tokens": 1, "input_price": D("-3")},
        {"at": "2026-11-30T09:00:00Z", "cached_prefix_tokens": 1, "input_price": SONNET},
    ],
)
def test_cached_call_refuses_naive_times_and_bad_numbers(kwargs):
    with pytest.raises(ValueError):
        CachedCall(**kwargs)


gap_minutes = st.integers(min_value=0, max_value=600)
prefixes = st.integers(min_value=0, max_value=10**7)


@given(st.lists(st.tuples(gap_minutes, prefixes), min_size=1, max_size=30))
def test_the_tiers_bound_each_other_as_the_gaps_dictate(steps):
    minutes, session = 0, []
    for gap, prefix in steps:
        minutes += gap
        session.append(at(minutes, prefix))

    got = compare_ttl_tiers([session])

    assert got.cost_5m >= 0 and got.cost_1h >= 0
    assert got.pairs == len(steps) - 1
    gaps = [later.at - earlier.at for earlier, later in zip(session, session[1:], strict=False)]
    if all(g <= timedelta(minutes=5) for g in gaps):
        assert got.pairs_cost_5m == got.pairs_cost_1h
        assert got.cost_5m <= got.cost_1h
    if all(g > timedelta(hours=1) for g in gaps):
        assert got.pairs_cost_1h == got.pairs_cost_5m * D("1.6")
