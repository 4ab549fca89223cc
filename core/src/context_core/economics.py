"""What a compaction pass costs in prompt-cache money, and when it pays back (D1, D4).

Standard library only. A pass that changes the surface at some message makes the next call
re-write everything from there (`rewrite_tokens`) instead of reading it: that costs
`rewrite_tokens × (write − read)` more than reading (the *re-write premium*). Every later call
then reads `freed_tokens` fewer tokens: it saves `freed_tokens × read`. The pass breaks even
after `ceil(premium / saving)` later calls; it is worth doing when that many calls are likely to
follow (`remaining_calls`) and it frees at least the policy minimum.

Rates are dollars per million tokens of the session's model: `write` is the rate of the tier the
re-written prefix goes to (Anthropic 1.25× input for 5 minutes, 2× for 1 hour), or the input
rate when the provider has no write surcharge (OpenAI).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal, localcontext
from typing import Final

# Money arithmetic: 50 digits, exact whatever the thread's decimal context (the console prices
# with these too); prices are per million tokens.
MONEY: Final = Context(prec=50)
PER_MILLION: Final = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class CacheRates:
    """$ per million tokens: base input, cache read, and the write rate the re-write pays."""

    input: Decimal
    read: Decimal
    write: Decimal

    def __post_init__(self) -> None:
        for name in ("input", "read", "write"):
            value = getattr(self, name)
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ValueError(f"{name} must be a finite, non-negative Decimal, got {value!r}")

    @classmethod
    def relative(cls, *, read: str = "0.1", write: str = "1.25") -> CacheRates:
        """Rates as multiples of an input price of 1 (Anthropic's 5-minute tier by default)."""
        return cls(input=Decimal(1), read=Decimal(read), write=Decimal(write))


@dataclass(frozen=True, slots=True)
class PassEconomics:
    """The money of one pass (or of a whole plan), exact.

    `break_even_calls` is the number of later calls whose savings cover the re-write premium
    (0 when there is no premium; None when the pass saves nothing per call, so never).
    `worth_it`: frees at least `min_free_tokens` and breaks even within `remaining_calls`.
    """

    freed_tokens: int
    rewrite_tokens: int
    rewrite_cost_usd: Decimal
    rewrite_premium_usd: Decimal
    saving_per_call_usd: Decimal
    break_even_calls: int | None
    remaining_calls: int
    min_free_tokens: int
    worth_it: bool

    @property
    def why(self) -> str:
        """One line an operator can read: the figures the decision used."""
        frees = f"frees ~{self.freed_tokens:,} tokens"
        if self.freed_tokens < self.min_free_tokens:
            return f"{frees}, under the policy minimum of {self.min_free_tokens:,}"
        if self.break_even_calls is None:
            return f"{frees}, which saves nothing per call: the re-write never pays back"
        verdict = "within" if self.worth_it else "beyond"
        return (
            f"{frees}; re-writes ~{self.rewrite_tokens:,} (${self.rewrite_premium_usd:.4f} over "
            f"reading them), saves ${self.saving_per_call_usd:.4f} per later call: breaks even "
            f"after {self.break_even_calls} calls, {verdict} the ~{self.remaining_calls} "
            f"expected to follow"
        )


def pass_economics(
    *,
    freed_tokens: int,
    rewrite_tokens: int,
    rates: CacheRates,
    remaining_calls: int,
    min_free_tokens: int = 0,
) -> PassEconomics:
    """Price a pass that frees `freed_tokens` and makes the next call re-write `rewrite_tokens`.

    premium = rewrite × (write − read) (never below 0); saving per later call = freed × read;
    break-even = ceil(premium / saving). Pure and exact (Decimal).
    """
    freed = max(freed_tokens, 0)
    rewrite = max(rewrite_tokens, 0)
    remaining = max(remaining_calls, 0)
    with localcontext(MONEY):
        cost = Decimal(rewrite) * rates.write / PER_MILLION
        premium = max(Decimal(rewrite) * (rates.write - rates.read) / PER_MILLION, Decimal(0))
        saving = Decimal(freed) * rates.read / PER_MILLION
        if premium == 0:
            calls: int | None = 0
        elif saving == 0:
            calls = None
        else:
            calls = int((premium / saving).to_integral_value(rounding=ROUND_CEILING))
    worth = freed >= min_free_tokens and calls is not None and calls <= remaining
    return PassEconomics(
        freed_tokens=freed,
        rewrite_tokens=rewrite,
        rewrite_cost_usd=cost,
        rewrite_premium_usd=premium,
        saving_per_call_usd=saving,
        break_even_calls=calls,
        remaining_calls=remaining,
        min_free_tokens=min_free_tokens,
        worth_it=worth,
    )


def net_saving(
    *,
    freed_tokens: int,
    rewrite_tokens: int,
    rates: CacheRates,
    later_calls: int,
) -> Decimal:
    """The measured outcome so far: `later_calls` × saving per call − the re-write premium
    (`rewrite_tokens` is what the next call actually wrote)."""
    figures = pass_economics(
        freed_tokens=freed_tokens, rewrite_tokens=rewrite_tokens, rates=rates, remaining_calls=0
    )
    with localcontext(MONEY):
        return figures.saving_per_call_usd * max(later_calls, 0) - figures.rewrite_premium_usd
