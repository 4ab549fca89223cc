"""A session's totals brought forward by one ingest's turn changes equal its totals from scratch
(`telemetry.session_totals`), for turns that grow by calls, new turns, priced and unpriced."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from telemetry.session_totals import Totals, TurnSums, advance, change_of, of_turns

START = datetime(2026, 12, 1, tzinfo=UTC)

# A call: (context tokens, cache read, reported its cache, cost in micro-dollars or None, at)
calls = st.tuples(
    st.integers(0, 2_000_000),
    st.integers(0, 1_000_000),
    st.booleans(),
    st.none() | st.integers(0, 10**9),
    st.integers(0, 10**6),
)


def _sums(turn_calls: list[tuple[int, int, bool, int | None, int]]) -> TurnSums:
    """A turn's figures over its calls, as `derive_turns` sums them."""
    priced = [Decimal(c[3]) / 10**6 for c in turn_calls if c[3] is not None]
    reported = [c for c in turn_calls if c[2]]
    return TurnSums(
        calls=len(turn_calls),
        context_tokens=max(c[0] for c in turn_calls),
        cache_read_reported=sum(c[1] for c in reported),
        cache_denominator=sum(c[0] for c in reported),
        cache_reported_calls=len(reported),
        cost_usd=sum(priced, Decimal(0)) if priced else None,
        no_cache_cost_usd=sum(priced, Decimal(0)) * 3 if priced else None,
        unpriced_calls=len(turn_calls) - len(priced),
        last_at=START + timedelta(seconds=max(c[4] for c in turn_calls)),
    )


@given(
    turns=st.lists(st.lists(calls, min_size=1, max_size=6), min_size=1, max_size=12),
    split=st.data(),
)
def test_advancing_the_stored_totals_equals_the_totals_from_scratch(turns, split):
    # Each turn had a prefix of its calls before the ingest (none: the turn is new); the ingest
    # added the rest. Turns the ingest did not touch keep all their calls before and after.
    before: list[TurnSums] = []
    touched: list[tuple[TurnSums | None, TurnSums]] = []
    for turn_calls in turns:
        kept = split.draw(st.integers(0, len(turn_calls)))
        after = _sums(turn_calls)
        if kept == len(turn_calls):
            before.append(after)  # untouched
            continue
        old = _sums(turn_calls[:kept]) if kept else None
        if old is not None:
            before.append(old)
        touched.append((old, after))
    stored = of_turns(before)
    expected = of_turns([_sums(t) for t in turns])
    if not touched:
        assert stored == expected
        return
    assert advance(stored, change_of(touched)) == expected


def test_a_session_without_turns_takes_the_first_turns_figures_whole():
    first = TurnSums(3, 900, 0, 0, 0, None, None, 3, START)
    assert advance(Totals(), change_of([(None, first)])) == of_turns([first])
    assert of_turns([first]).cost is None  # no priced call: no cost, not zero


@given(
    turns=st.lists(st.lists(calls, min_size=1, max_size=6), min_size=0, max_size=12),
    split=st.data(),
)
def test_the_totals_of_removed_and_kept_turns_joined_are_the_totals_of_all(turns, split):
    """Retention removes some of a session's turns and keeps their totals
    (`AgentSession.retired_totals`, stored as JSON); joined with the kept turns' totals they
    are the totals of every turn, whichever turns went."""
    from telemetry.session_totals import joined, totals_as_json, totals_from_json

    sums = [_sums(c) for c in turns]
    removed = split.draw(st.sets(st.integers(0, max(len(sums) - 1, 0)))) if sums else set()
    gone = [s for i, s in enumerate(sums) if i in removed]
    kept = [s for i, s in enumerate(sums) if i not in removed]
    stored = totals_from_json(totals_as_json(of_turns(gone)))
    assert stored == of_turns(gone)
    assert joined(stored, of_turns(kept)) == of_turns(sums)
    assert joined(of_turns(kept), stored) == of_turns(sums)


def test_no_retired_totals_join_as_nothing():
    from telemetry.session_totals import joined, totals_from_json

    assert totals_from_json(None) == Totals()
    some = of_turns([_sums([(5, 1, True, None, 3)])])
    assert joined(totals_from_json(None), some) == some


def test_stored_retired_totals_are_read_strictly_naming_the_key():
    import pytest

    from telemetry.session_totals import totals_as_json, totals_from_json

    edge = Totals(
        turns=0,
        calls=2**31 - 1,
        max_rounds=0,
        peak=2**63 - 1,
        cost=Decimal("0E-9"),
        last_seen=START,
    )
    assert totals_from_json(totals_as_json(edge)) == edge
    assert totals_from_json({}) == Totals()
    for bad, key in (
        ({"calls": True}, "calls"),
        ({"calls": 1.5}, "calls"),
        ({"peak": -1}, "peak"),
        ({"calls": 2**31}, "calls"),
        ({"read": 2**63}, "read"),
        ({"no_cache": "1e400000000000"}, "no_cache"),
        ({"no_cache": "Infinity"}, "no_cache"),
        ({"last_seen": 5}, "last_seen"),
        ({"other": 0}, "other"),
    ):
        with pytest.raises(ValueError, match=key):
            totals_from_json(bad)
