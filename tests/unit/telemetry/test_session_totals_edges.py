"""A session's totals on hand-written turns: every field of `of_turns`, `change_of` and `advance`
with a distinct figure, so a field read for another or a sum taken the wrong way shows; money
stays None until a turn is priced, and 0 once one is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from telemetry.session_totals import Change, Totals, TurnSums, advance, change_of, of_turns

D = Decimal
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def turn(
    calls: int = 1,
    context: int = 100,
    read: int = 0,
    denominator: int = 0,
    reported: int = 0,
    cost: Decimal | None = None,
    no_cache: Decimal | None = None,
    unpriced: int = 0,
    seconds: int = 0,
) -> TurnSums:
    return TurnSums(
        calls, context, read, denominator, reported, cost, no_cache, unpriced,
        T0 + timedelta(seconds=seconds),
    )  # fmt: skip


A = turn(3, 5_000, 40, 4_000, 2, D("0.001"), D("0.002"), 1, seconds=30)
B = turn(5, 2_000, 70, 1_900, 1, None, None, 5, seconds=90)
C = turn(2, 9_000, 11, 8_000, 2, D("1.25"), D("3.5"), 0, seconds=60)


def test_no_turns_is_the_empty_totals():
    assert of_turns([]) == Totals()
    assert Totals() == Totals(0, 0, None, None, 0, 0, 0, None, None, 0, None)


def test_every_total_from_scratch():
    assert of_turns([A, B, C]) == Totals(
        turns=3,
        calls=10,
        max_rounds=5,
        peak=9_000,
        read=121,
        denominator=13_900,
        reported=5,
        cost=D("1.251"),
        no_cache=D("3.502"),
        unpriced=6,
        last_seen=T0 + timedelta(seconds=90),
    )


def test_money_is_none_until_a_turn_is_priced_and_zero_once_one_is():
    assert (of_turns([B]).cost, of_turns([B]).no_cache) == (None, None)
    free = turn(cost=D(0), no_cache=D(0))
    assert (of_turns([B, free]).cost, of_turns([B, free]).no_cache) == (D(0), D(0))


def test_the_change_of_a_new_turn_and_a_grown_one():
    grown = turn(4, 6_000, 55, 5_500, 3, D("0.011"), D("0.012"), 1, seconds=45)
    change = change_of([(None, B), (A, grown)])
    assert change == Change(
        new_turns=1,
        calls=5 + 1,
        max_rounds=5,
        peak=6_000,
        read=70 + 15,
        denominator=1_900 + 1_500,
        reported=1 + 1,
        cost=D("0.010"),
        priced=True,
        no_cache=D("0.010"),
        no_cache_priced=True,
        unpriced=5 + 0,
        last_seen=T0 + timedelta(seconds=90),
    )


def test_a_change_of_unpriced_turns_costs_zero_and_says_so():
    change = change_of([(None, B), (B, turn(6, 2_000, 70, 1_900, 1, None, None, 6, seconds=95))])
    assert (change.cost, change.priced, change.no_cache, change.no_cache_priced) == (
        D(0),
        False,
        D(0),
        False,
    )
    assert change.new_turns == 1 and change.unpriced == 6
    only_no_cache = change_of([(None, turn(no_cache=D("0.5")))])
    assert (only_no_cache.priced, only_no_cache.no_cache_priced) == (False, True)
    assert (only_no_cache.cost, only_no_cache.no_cache) == (D(0), D("0.5"))


def test_a_change_touches_at_least_one_turn():
    with pytest.raises(AssertionError, match="^a change touches at least one turn$"):
        change_of([])


def test_advance_moves_each_sum_and_keeps_each_maximum():
    stored = of_turns([A, C])
    change = Change(
        new_turns=2,
        calls=7,
        max_rounds=4,
        peak=12_000,
        read=13,
        denominator=17,
        reported=19,
        cost=D("0.000000001"),
        priced=True,
        no_cache=D("0.5"),
        no_cache_priced=True,
        unpriced=23,
        last_seen=T0 + timedelta(seconds=10),
    )
    assert advance(stored, change) == Totals(
        turns=4,
        calls=12,
        max_rounds=4,
        peak=12_000,
        read=51 + 13,
        denominator=12_000 + 17,
        reported=4 + 19,
        cost=D("1.251000001"),
        no_cache=D("4.002"),
        unpriced=1 + 23,
        last_seen=T0 + timedelta(seconds=60),
    )


@pytest.mark.parametrize(
    ("stored", "delta", "priced", "expected"),
    [
        (None, D(0), False, None),
        (None, D(0), True, D(0)),
        (None, D("0.25"), True, D("0.25")),
        (D("1.5"), D(0), False, D("1.5")),
        (D("1.5"), D("0.25"), True, D("1.75")),
    ],
)
def test_money_moves_from_none_only_when_a_touched_turn_is_priced(stored, delta, priced, expected):
    totals = advance(
        Totals(cost=stored, no_cache=stored),
        Change(0, 0, 0, 0, 0, 0, 0, delta, priced, delta, priced, 0, T0),
    )
    assert (totals.cost, totals.no_cache) == (expected, expected)


@pytest.mark.parametrize(
    ("stored", "value", "expected"), [(None, 5, 5), (4, 5, 5), (5, 5, 5), (6, 5, 6)]
)
def test_a_maximum_takes_the_larger(stored, value, expected):
    at = T0 + timedelta(seconds=value)
    totals = advance(
        Totals(
            max_rounds=stored,
            peak=stored,
            last_seen=None if stored is None else T0 + timedelta(seconds=stored),
        ),
        Change(0, 0, value, value, 0, 0, 0, D(0), False, D(0), False, 0, at),
    )
    assert (totals.max_rounds, totals.peak, totals.last_seen) == (
        expected,
        expected,
        T0 + timedelta(seconds=expected),
    )
