"""Turn and session figures from call rows. Pure: no Django.

A turn's figures are derived from all of its calls (so a late or replayed call can never leave a
turn half-counted); a session's from its turns. Both are recomputed, never incremented, which
keeps them equal to a from-scratch recomputation by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from telemetry.pressure import hit_ratio

BUCKETS = ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output")


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
    cost_buckets: tuple[Decimal, Decimal, Decimal, Decimal, Decimal] | None
    no_cache_cost: Decimal | None

    @property
    def context_tokens(self) -> int:
        return self.uncached_input + self.cache_read + self.cache_write_5m + self.cache_write_1h


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
    cost_buckets: tuple[Decimal, Decimal, Decimal, Decimal, Decimal] | None
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
    ordered = sorted(calls, key=lambda c: c.call)
    last = ordered[-1]
    reporting = [c for c in ordered if c.reported_cache]
    priced = [c for c in ordered if c.cost_buckets is not None]
    cost_buckets: tuple[Decimal, Decimal, Decimal, Decimal, Decimal] | None = None
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
