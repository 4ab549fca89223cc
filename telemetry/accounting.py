"""Turn and session figures from call rows. Pure: no Django.

A turn's figures are derived from all of its calls (so a late or replayed call can never leave a
turn half-counted); a session's from its turns. Both are recomputed, never incremented, which
keeps them equal to a from-scratch recomputation by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from operator import attrgetter

from telemetry.pressure import hit_ratio
from telemetry.usage import context_size

# A call's or a turn's cost per bucket, in `telemetry.usage.BUCKETS` order.
CostBuckets = tuple[Decimal, ...]


@dataclass(frozen=True, slots=True)
class CallFigures:
    """What one stored call contributes to its turn."""

    call: int
    at: datetime
    model: str
    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int
    reasoning_output: int | None
    reported_cache: bool
    appended_chars: int | None
    window_tokens: int | None
    surface_version: int | None
    cost_buckets: CostBuckets | None
    no_cache_cost: Decimal | None

    @property
    def context_tokens(self) -> int:
        """The size of this request's input (`context_size`)."""
        return context_size(self)


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """One turn: rounds (= calls), peak request size, bucket sums, cache and cost figures.

    Costs are None when no call of the turn could be priced (unknown model), never 0.
    """

    calls: int
    context_tokens: int
    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int
    reasoning_output: int | None
    cache_reported_calls: int
    cache_read_reported: int
    cache_denominator: int
    cost_buckets: CostBuckets | None
    cost_usd: Decimal | None
    no_cache_cost_usd: Decimal | None
    unpriced_calls: int
    first_at: datetime
    last_at: datetime
    model: str
    last_call: int
    last_call_context_tokens: int
    last_call_output: int
    last_call_reasoning_output: int | None
    last_call_appended_chars: int | None
    last_call_window_tokens: int | None
    surface_version: int | None

    @property
    def cache_hit_ratio(self) -> float | None:
        """Σread / Σ(uncached + read + writes) over the calls that reported cache; None if none did."""
        return hit_ratio(
            self.cache_read_reported, self.cache_denominator, self.cache_reported_calls
        )


def summarize_turn(calls: Sequence[CallFigures]) -> TurnFigures:
    """The figures of one turn from all of its calls (in any order). Requires at least one call.

    The turn's context is its peak call (pressure is per request, never a sum); "last call" is
    the highest call number, whose reply and appended size feed the projection (D6).
    """
    if not calls:
        raise ValueError("a turn has at least one call")
    # One pass over the calls, not a dozen generators: this runs for every turn of a batch
    # (make bench P1, docs/performance.md). The sums are taken in the same order from the same
    # starting values as the plain form, so every Decimal is the same down to its exponent
    # (tests/unit/telemetry/test_summarize_turn.py holds it to that form).
    ordered = sorted(calls, key=_CALL_NUMBER)
    last = ordered[-1]
    context_peak = last.context_tokens  # any call's: the loop keeps the largest
    uncached = read = write_5m = write_1h = output = 0
    reporting = read_reported = denominator = priced = 0
    reasoning: int | None = None
    sums: list[Decimal] | None = None
    no_cache: Decimal | None = None
    first_at = last_at = ordered[0].at
    for c in ordered:
        context = c.context_tokens
        if context > context_peak:
            context_peak = context
        uncached += c.uncached_input
        read += c.cache_read
        write_5m += c.cache_write_5m
        write_1h += c.cache_write_1h
        output += c.output
        if c.reasoning_output is not None:
            reasoning = c.reasoning_output if reasoning is None else reasoning + c.reasoning_output
        if c.reported_cache:
            reporting += 1
            read_reported += c.cache_read
            denominator += context
        if c.cost_buckets is not None:
            priced += 1
            if sums is None:
                sums = [_ZERO + b for b in c.cost_buckets]
            else:
                sums = [a + b for a, b in zip(sums, c.cost_buckets, strict=True)]
        if c.no_cache_cost is not None:
            no_cache = (_ZERO if no_cache is None else no_cache) + c.no_cache_cost
        if c.at < first_at:
            first_at = c.at
        if c.at > last_at:
            last_at = c.at
    cost_buckets = None if sums is None else tuple(sums)
    return TurnFigures(
        calls=len(ordered),
        context_tokens=context_peak,
        uncached_input=uncached,
        cache_read=read,
        cache_write_5m=write_5m,
        cache_write_1h=write_1h,
        output=output,
        reasoning_output=reasoning,
        cache_reported_calls=reporting,
        cache_read_reported=read_reported,
        cache_denominator=denominator,
        cost_buckets=cost_buckets,
        cost_usd=sum(cost_buckets, _ZERO) if cost_buckets is not None else None,
        no_cache_cost_usd=no_cache,
        unpriced_calls=len(ordered) - priced,
        first_at=first_at,
        last_at=last_at,
        model=last.model,
        last_call=last.call,
        last_call_context_tokens=last.context_tokens,
        last_call_output=last.output,
        last_call_reasoning_output=last.reasoning_output,
        last_call_appended_chars=last.appended_chars,
        last_call_window_tokens=last.window_tokens,
        surface_version=last.surface_version,
    )


_ZERO = Decimal(0)
_CALL_NUMBER = attrgetter("call")


# The scale of a call's stored costs (the calls table's numeric(20, 9) columns).
STORED_COST_PLACES = 9
_STORED_COST = Decimal(1).scaleb(-STORED_COST_PLACES)


def as_stored(call: CallFigures) -> CallFigures | None:
    """`call` as PostgreSQL hands it back once stored: costs rounded to the column's scale
    (numeric rounds half away from zero; costs are never negative) and its time in UTC. None
    when the time has no UTC form in Python (a year-1 time east of Greenwich): the caller then
    lets the database derive the turn. What a turn's figures computed here from stored-equal
    calls give is what the database's derivation gives from the stored rows
    (`telemetry.ingest.known_sessions`)."""
    try:
        at = call.at.astimezone(UTC)
    except OverflowError:
        return None
    buckets = call.cost_buckets
    return replace(
        call,
        at=at,
        cost_buckets=None if buckets is None else _rounded_buckets(buckets),
        no_cache_cost=None if call.no_cache_cost is None else _rounded(call.no_cache_cost),
    )


def _rounded(value: Decimal) -> Decimal:
    return value.quantize(_STORED_COST, rounding=ROUND_HALF_UP)


def _rounded_buckets(buckets: CostBuckets) -> CostBuckets:
    return tuple(_rounded(b) for b in buckets)


def calls_before(
    last_turn: int | None,
    last_turn_calls: Sequence[CallFigures] | None,
    turn: int,
    call: int,
) -> tuple[CallFigures, ...] | None:
    """The calls stored in `turn` before a new call `call` joins it, from what is known of a
    session: its last turn's number and, when known, all that turn's calls. Empty for a turn
    past the last (it holds no call); None when it cannot be known here: an earlier turn, the
    last turn with its calls unknown, or a call number it already holds (a retry or a
    conflict, which only the stored keys can tell apart)."""
    if last_turn is None or turn > last_turn:
        return ()
    if turn < last_turn or last_turn_calls is None:
        return None
    if any(c.call == call for c in last_turn_calls):
        return None
    return tuple(last_turn_calls)
