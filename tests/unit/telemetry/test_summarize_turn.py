"""A turn's figures from its calls: the one-pass `summarize_turn` answers as its plain form did
(the oracle below, the first implementation kept verbatim), every Decimal to its exponent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from telemetry.accounting import CallFigures, TurnFigures, summarize_turn


def _oracle(calls: list[CallFigures]) -> TurnFigures:
    ordered = sorted(calls, key=lambda c: c.call)
    last = ordered[-1]
    reporting = [c for c in ordered if c.reported_cache]
    priced = [c for c in ordered if c.cost_buckets is not None]
    cost_buckets = None
    if priced:
        sums = [Decimal(0)] * 5
        for c in priced:
            assert c.cost_buckets is not None
            sums = [a + b for a, b in zip(sums, c.cost_buckets, strict=True)]
        cost_buckets = (sums[0], sums[1], sums[2], sums[3], sums[4])
    no_cache = [c.no_cache_cost for c in ordered if c.no_cache_cost is not None]
    reasoning = [c.reasoning_output for c in ordered if c.reasoning_output is not None]
    return TurnFigures(
        calls=len(ordered),
        context_tokens=max(c.context_tokens for c in ordered),
        uncached_input=sum(c.uncached_input for c in ordered),
        cache_read=sum(c.cache_read for c in ordered),
        cache_write_5m=sum(c.cache_write_5m for c in ordered),
        cache_write_1h=sum(c.cache_write_1h for c in ordered),
        output=sum(c.output for c in ordered),
        reasoning_output=sum(reasoning) if reasoning else None,
        cache_reported_calls=len(reporting),
        cache_read_reported=sum(c.cache_read for c in reporting),
        cache_denominator=sum(c.context_tokens for c in reporting),
        cost_buckets=cost_buckets,
        cost_usd=sum(cost_buckets, Decimal(0)) if cost_buckets is not None else None,
        no_cache_cost_usd=sum(no_cache, Decimal(0)) if no_cache else None,
        unpriced_calls=len(ordered) - len(priced),
        first_at=min(c.at for c in ordered),
        last_at=max(c.at for c in ordered),
        model=last.model,
        last_call=last.call,
        last_call_context_tokens=last.context_tokens,
        last_call_output=last.output,
        last_call_reasoning_output=last.reasoning_output,
        last_call_appended_chars=last.appended_chars,
        last_call_window_tokens=last.window_tokens,
        surface_version=last.surface_version,
    )


_BASE = datetime(2025, 6, 1, tzinfo=UTC)
_tokens = st.integers(min_value=0, max_value=2_000_000)
_optional = st.none() | _tokens
# Micro-dollar costs and a few exponents a catalogue's Decimal can carry (1E+2 + 0 is 100).
_money = st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=0, max_value=10**6)
_odd_money = st.sampled_from([Decimal("1E+2"), Decimal("0E-9"), Decimal("2.50"), Decimal("0")])
_cost = _money | _odd_money
# Equal instants in different zones: which one min/max picks must not change.
_at = st.builds(
    lambda seconds, hours: (_BASE + timedelta(seconds=seconds)).astimezone(
        timezone(timedelta(hours=hours))
    ),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=-5, max_value=5),
)
_call = st.builds(
    CallFigures,
    call=st.integers(min_value=0, max_value=6),
    at=_at,
    model=st.sampled_from(["a", "b", "c"]),
    uncached_input=_tokens,
    cache_read=_tokens,
    cache_write_5m=_tokens,
    cache_write_1h=_tokens,
    output=_tokens,
    reasoning_output=_optional,
    reported_cache=st.booleans(),
    appended_chars=_optional,
    window_tokens=_optional,
    surface_version=_optional,
    cost_buckets=st.none() | st.tuples(_cost, _cost, _cost, _cost, _cost),
    no_cache_cost=st.none() | _cost,
)


def _exact(figures: TurnFigures) -> tuple[object, ...]:
    # Decimal("100") == Decimal("1E+2"); their text differs, and the stored numeric keeps it
    return tuple(
        (type(v), str(v), v.tzinfo if isinstance(v, datetime) else None)
        for v in (getattr(figures, name) for name in TurnFigures.__slots__)
    )


@given(st.lists(_call, min_size=1, max_size=8))
def test_one_pass_summary_is_the_plain_one(calls):
    assert _exact(summarize_turn(calls)) == _exact(_oracle(calls))
    assert summarize_turn(calls) == _oracle(calls)
