"""D8 advisor: how many rounds a profile's turns take, and what the round limits would do.

Standard library only. Input is a histogram {rounds in a turn: number of turns}. A turn of r
rounds is *nudged* when r reaches the soft limit (`telemetry.pressure.round_signal` answers
"nudge" from the soft limit on) and *stopped* when r reaches the hard cap; a stopped turn was
nudged first, so `stopped ≤ nudged` whenever soft ≤ hard. Real coding-agent turns of 130+
calls exist: a cap chosen on data stops the runaway tail, not the long but useful turns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

# Histogram buckets (inclusive bounds) shown on the policy page.
BUCKETS: Final[tuple[tuple[int, int | None], ...]] = (
    (1, 1),
    (2, 5),
    (6, 10),
    (11, 20),
    (21, 50),
    (51, 100),
    (101, 200),
    (201, None),
)

# Fewer turns than this say too little about a profile's tail to propose limits.
MIN_TURNS_FOR_ADVICE: Final = 20


@dataclass(frozen=True, slots=True)
class Bucket:
    label: str
    turns: int
    share: float


@dataclass(frozen=True, slots=True)
class RoundsDistribution:
    turns: int
    p50: int | None
    p90: int | None
    p99: int | None
    max: int | None
    buckets: tuple[Bucket, ...]

    @property
    def occupied(self) -> tuple[Bucket, ...]:
        """The buckets that hold at least one turn."""
        return tuple(b for b in self.buckets if b.turns)


@dataclass(frozen=True, slots=True)
class LimitImpact:
    """What a soft limit and a hard cap would have done to the turns (None: switched off)."""

    soft_limit: int | None
    hard_cap: int | None
    nudged: int
    stopped: int
    turns: int

    @property
    def nudged_share(self) -> float | None:
        return self.nudged / self.turns if self.turns else None

    @property
    def stopped_share(self) -> float | None:
        return self.stopped / self.turns if self.turns else None


def rounds_distribution(histogram: Mapping[int, int]) -> RoundsDistribution:
    """Percentiles (nearest rank) and bucket counts of rounds per turn. Turns with fewer than
    one round or a non-positive count are ignored (a turn always has at least one call)."""
    clean = {r: n for r, n in histogram.items() if r >= 1 and n > 0}
    total = sum(clean.values())
    buckets = []
    for low, high in BUCKETS:
        count = sum(n for r, n in clean.items() if r >= low and (high is None or r <= high))
        label = f"{low}" if low == high else f"{low}+" if high is None else f"{low}–{high}"
        buckets.append(Bucket(label, count, count / total if total else 0.0))
    return RoundsDistribution(
        turns=total,
        p50=percentile(clean, 0.50),
        p90=percentile(clean, 0.90),
        p99=percentile(clean, 0.99),
        max=max(clean, default=None),
        buckets=tuple(buckets),
    )


def percentile(histogram: Mapping[int, int], q: float) -> int | None:
    """The nearest-rank `q` percentile of a {value: count} histogram; None when empty."""
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    return max(histogram)  # unreachable: the loop reaches `total`


def limit_impact(
    histogram: Mapping[int, int], *, soft_limit: int | None, hard_cap: int | None
) -> LimitImpact:
    """How many turns reached `soft_limit` (nudged) and `hard_cap` (stopped)."""
    for name, limit in (("soft_limit", soft_limit), ("hard_cap", hard_cap)):
        if limit is not None and (type(limit) is not int or limit <= 0):
            raise ValueError(f"{name} must be a positive int or None, got {limit!r}")
    nudged = sum(n for r, n in histogram.items() if soft_limit is not None and r >= soft_limit)
    stopped = sum(n for r, n in histogram.items() if hard_cap is not None and r >= hard_cap)
    turns = sum(n for n in histogram.values() if n > 0)
    return LimitImpact(soft_limit, hard_cap, nudged, stopped, turns)


def suggest_limits(histogram: Mapping[int, int]) -> tuple[int, int] | None:
    """A soft limit at the 90th percentile (one turn in ten gets a re-grounding nudge) and a
    hard cap at 1.5 × the 99th percentile, above the soft limit (only the runaway tail stops).
    None with fewer than MIN_TURNS_FOR_ADVICE turns."""
    if sum(histogram.values()) < MIN_TURNS_FOR_ADVICE:
        return None
    p90 = percentile(histogram, 0.90)
    p99 = percentile(histogram, 0.99)
    assert p90 is not None and p99 is not None
    soft = max(p90, 2)
    return soft, max(math.ceil(1.5 * p99), soft + 1)
