"""The cache-TTL counterfactual: what the 5-minute and 1-hour tiers would have cost on real traffic.

Standard library only. Anthropic's cache entry lives 5 minutes (writes 1.25× input) or 1 hour
(writes 2× input); a hit within the TTL costs 0.1× and refreshes it. So the 1-hour tier only pays
when gaps between requests fall between 5 and 60 minutes: faster traffic keeps the 5-minute
entry warm, slower traffic lets both expire. The admin page shows these figures beside each
profile's TTL tier (issue 6, item 5).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, localcontext
from typing import Final, Literal

from context_core.economics import MONEY, PER_MILLION

FIVE_MINUTES: Final = timedelta(minutes=5)
ONE_HOUR: Final = timedelta(hours=1)

READ: Final = Decimal("0.1")
WRITE_5M: Final = Decimal("1.25")
WRITE_1H: Final = Decimal("2")

PERCENTILES: Final = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class CachedCall:
    """One call as the counterfactual sees it.

    `at` is timezone-aware. `cached_prefix_tokens` is the call's cache read + cache write (the
    prefix a cache would hold, P). `input_price` is the base input $/MTok of the call's model.
    """

    at: datetime
    cached_prefix_tokens: int
    input_price: Decimal

    def __post_init__(self) -> None:
        if not isinstance(self.at, datetime) or self.at.utcoffset() is None:
            # DTZ: a naive time compared with an aware one is a wrong gap, not an error later.
            raise ValueError(f"at must be a timezone-aware datetime, got {self.at!r}")
        if type(self.cached_prefix_tokens) is not int or self.cached_prefix_tokens < 0:
            raise ValueError(
                f"cached_prefix_tokens must be a non-negative int, got {self.cached_prefix_tokens!r}"
            )
        if (
            not isinstance(self.input_price, Decimal)
            or not self.input_price.is_finite()
            or self.input_price < 0
        ):
            raise ValueError(
                f"input_price must be a finite, non-negative Decimal, got {self.input_price!r}"
            )


@dataclass(frozen=True, slots=True)
class TierComparison:
    """Both tiers' cost on the same traffic, in exact dollars, and the observed gaps.

    `pairs_cost_*` is issue 6's formula over consecutive pairs within a session (gap g, P of the
    later call): 5m tier 0.1×P if g ≤ 5 min else 1.25×P; 1h tier 0.1×P if g ≤ 60 min else 2×P.
    `opening_cost_*` is each session's first call, which finds no entry and writes its P cold
    (1.25× or 2×); without it the tiers would tie on fast traffic, where 5m is in fact cheaper.
    `cost_*` is both together and decides `cheaper`. Gap percentiles are nearest-rank over
    every pair's gap, None when there are no pairs.
    """

    sessions: int
    pairs: int
    pairs_cost_5m: Decimal
    pairs_cost_1h: Decimal
    opening_cost_5m: Decimal
    opening_cost_1h: Decimal
    gap_p50: timedelta | None
    gap_p90: timedelta | None
    gap_p99: timedelta | None

    @property
    def cost_5m(self) -> Decimal:
        with localcontext(MONEY):
            return self.opening_cost_5m + self.pairs_cost_5m

    @property
    def cost_1h(self) -> Decimal:
        with localcontext(MONEY):
            return self.opening_cost_1h + self.pairs_cost_1h

    @property
    def cheaper(self) -> Literal["5m", "1h", "equal"] | None:
        """The cheaper tier on this traffic; None when there was no call at all."""
        if self.sessions == 0:
            return None
        if self.cost_5m == self.cost_1h:
            return "equal"
        return "5m" if self.cost_5m < self.cost_1h else "1h"


def compare_ttl_tiers(sessions: Iterable[Sequence[CachedCall]]) -> TierComparison:
    """Price the same traffic under both TTL tiers.

    `sessions` holds each session's calls; pairs never span two sessions (each has its own
    cache prefix). Within a session, calls are ordered by `at` (stably, so equal times keep the
    caller's (turn, call) order) — a skewed agent clock must not produce a negative gap.
    Empty sessions are skipped. Pure: same input ⇒ equal output.
    """
    count = pairs = 0
    pairs_5m = pairs_1h = opening_5m = opening_1h = Decimal(0)
    gaps: list[timedelta] = []
    with localcontext(MONEY):
        for session in sessions:
            calls = sorted(session, key=lambda c: c.at)
            if not calls:
                continue
            count += 1
            first = calls[0]
            opening_5m += _dollars(first, WRITE_5M)
            opening_1h += _dollars(first, WRITE_1H)
            for earlier, later in zip(calls, calls[1:], strict=False):
                gap = later.at - earlier.at
                gaps.append(gap)
                pairs += 1
                pairs_5m += _dollars(later, READ if gap <= FIVE_MINUTES else WRITE_5M)
                pairs_1h += _dollars(later, READ if gap <= ONE_HOUR else WRITE_1H)

    p50, p90, p99 = (nearest_rank(gaps, p) for p in PERCENTILES)
    return TierComparison(
        sessions=count,
        pairs=pairs,
        pairs_cost_5m=pairs_5m,
        pairs_cost_1h=pairs_1h,
        opening_cost_5m=opening_5m,
        opening_cost_1h=opening_1h,
        gap_p50=p50,
        gap_p90=p90,
        gap_p99=p99,
    )


def nearest_rank(values: Sequence[timedelta], percentile: int) -> timedelta | None:
    """The nearest-rank percentile: the smallest value with at least `percentile` % of the
    values at or below it, i.e. sorted(values)[ceil(percentile/100 × n) − 1].

    Always an observed value (no interpolation between gaps). None for no values.
    """
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    if not values:
        return None
    ordered = sorted(values)
    rank = -(-percentile * len(ordered) // 100)  # ceil without floats
    return ordered[rank - 1]


def _dollars(call: CachedCall, multiplier: Decimal) -> Decimal:
    return Decimal(call.cached_prefix_tokens) * call.input_price * multiplier / PER_MILLION
