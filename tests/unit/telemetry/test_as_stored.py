"""`telemetry.accounting.as_stored` and `calls_before`: a call's figures as PostgreSQL hands them back (costs at
the column's 9 places, rounded half away from zero; the time in UTC), which is what
`telemetry.ingest.known_sessions` derives a turn from. The database side of the claim is
tests/db/test_known_sessions.py (odd rates stored and summed alike)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from telemetry.accounting import CallFigures, as_stored, calls_before, summarize_turn

_AT = datetime(2025, 6, 1, 10, tzinfo=timezone(timedelta(hours=2)))


def _call(costs: tuple[Decimal, ...] | None, no_cache: Decimal | None, at: datetime) -> CallFigures:
    return CallFigures(
        call=0,
        at=at,
        model="m",
        uncached_input=1,
        cache_read=2,
        cache_write_5m=3,
        cache_write_1h=4,
        output=5,
        reasoning_output=None,
        reported_cache=True,
        appended_chars=None,
        window_tokens=None,
        surface_version=None,
        cost_buckets=costs,
        no_cache_cost=no_cache,
    )


# A cost as `IntegerPricer` makes one: an integer count of 10**-12 dollars
costs = st.integers(0, 10**15).map(lambda n: Decimal(n).scaleb(-12))


@given(st.tuples(costs, costs, costs, costs, costs), costs)
def test_costs_come_back_at_nine_places_within_half_a_unit(
    buckets: tuple[Decimal, ...], no_cache: Decimal
) -> None:
    stored = as_stored(_call(buckets, no_cache, _AT))
    assert stored is not None and stored.cost_buckets is not None
    for before, after in [
        *zip(buckets, stored.cost_buckets, strict=True),
        (no_cache, stored.no_cache_cost),
    ]:
        assert after is not None
        assert after.as_tuple().exponent == -9
        assert abs(after - before) <= Decimal("0.0000000005")
    assert summarize_turn([stored]).cost_usd == sum(stored.cost_buckets, Decimal(0))


def test_halves_round_away_from_zero_as_numeric_does() -> None:
    half = Decimal("0.0000000005")  # numeric(20, 9) stores 0.000000001
    stored = as_stored(_call((half,) * 5, Decimal("0.0000000015"), _AT))
    assert stored is not None and stored.cost_buckets == (Decimal("0.000000001"),) * 5
    assert stored.no_cache_cost == Decimal("0.000000002")


def test_the_time_is_the_same_instant_in_utc_and_unpriced_stays_unpriced() -> None:
    stored = as_stored(_call(None, None, _AT))
    assert stored is not None and stored.at == _AT and stored.at.tzinfo is UTC
    assert stored.cost_buckets is None and stored.no_cache_cost is None


def test_a_time_without_a_utc_form_in_python_is_left_to_the_database() -> None:
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert as_stored(_call(None, None, early)) is None


@given(
    st.none() | st.integers(0, 50),
    st.none() | st.lists(st.integers(0, 20), unique=True, max_size=6),
    st.integers(0, 60),
    st.integers(0, 20),
)
def test_calls_before_are_known_only_where_the_turn_is_new_or_its_calls_are_all_known(
    last_turn: int | None, numbers: list[int] | None, turn: int, call: int
) -> None:
    """`calls_before` answers only what the known state settles: a turn past the last holds
    nothing; the last turn holds the calls known of it, unless the call is among them; an
    earlier turn, or the last with its calls unknown, is left to the stored keys (None)."""
    known = None if numbers is None else [replace(_call(None, None, _AT), call=n) for n in numbers]
    found = calls_before(last_turn, known, turn, call)
    if last_turn is None or turn > last_turn:
        assert found == ()
    elif turn < last_turn or numbers is None or call in numbers:
        assert found is None
    else:
        assert found is not None and [c.call for c in found] == numbers
