"""Model catalogue and per-call cost, in exact decimal dollars.

Standard library only. The seed catalogue below is the starting content of the admin-editable
price table; `call_cost` works on any `ModelPrice`, seeded or edited.

Unknown model ⇒ no price ⇒ the caller reports cost as None ("unknown"), never 0: `find_price`
returns None and `call_cost` needs a real `ModelPrice`, so a zero cannot sneak in by default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any, Final, Literal, NamedTuple

from context_core.economics import MONEY
from telemetry.usage import BUCKETS, INPUT_BUCKETS, MAX_TOKENS, NormalizedUsage, context_size

Vendor = Literal["anthropic", "openai"]

# Money is computed in `MONEY` (the core's): tokens (≤ 2**53, 16 digits) × a rate with a few
# digits never needs more than ~25 significant digits, so its 50 never round, whatever the
# thread's default context.


@dataclass(frozen=True, slots=True)
class Rates:
    """Dollars per million tokens for each billed bucket.

    A write rate of None means the provider has no cache-write surcharge (OpenAI): tokens
    written to the cache are billed as ordinary uncached input.
    """

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write_5m: Decimal | None
    cache_write_1h: Decimal | None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h"):
            value = getattr(self, name)
            if value is None and name.startswith("cache_write"):
                continue
            # Floats would carry binary rounding into every cost; rates are typed in as text.
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ValueError(f"{name} must be a finite, non-negative Decimal, got {value!r}")

    def billed(self, bucket: str) -> Decimal:
        """The rate a bucket of `BUCKETS` is billed at: its own, but a cache write without a
        rate of its own is billed as uncached input."""
        rate: Decimal | None = getattr(self, _RATE_OF[bucket])
        return self.input if rate is None else rate


# The `Rates` field each bucket of `BUCKETS` is billed at.
_RATE_OF: Final = {
    "uncached_input": "input",
    "cache_read": "cache_read",
    "cache_write_5m": "cache_write_5m",
    "cache_write_1h": "cache_write_1h",
    "output": "output",
}


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One catalogue row: a model's window and list prices in $/MTok.

    `provider` is the vendor whose list price this is ("anthropic" or "openai"), not the usage
    format (`NormalizedUsage.provider`): Claude on Bedrock or Vertex is priced here as Anthropic.

    `model` is the id rows are looked up by (see `resolve_model`); `family` is the undated id the
    model belongs to, equal to `model` except for a dated snapshot priced on its own row
    (`gpt-4o-2024-05-13` → `gpt-4o`). `window_tokens` is the standard context window every account
    gets; `max_window_tokens` is an opt-in maximum (a 1M beta), shown for reference and never
    assumed: a call runs in it only when its record or its profile says so (`telemetry.windows`).

    Long-context tier: when a request's input (`context_tokens`, cache included) exceeds
    `long_context_threshold`, the whole request, output included, is billed at `long_context`.
    Both are set or both are None.
    """

    model: str
    provider: Vendor
    family: str
    window_tokens: int
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write_5m: Decimal | None
    cache_write_1h: Decimal | None
    long_context_threshold: int | None = None
    long_context: Rates | None = None
    max_window_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.model or not self.family:
            raise ValueError("model and family must be non-empty")
        if self.provider not in ("anthropic", "openai"):
            raise ValueError(f"provider must be 'anthropic' or 'openai', got {self.provider!r}")
        if type(self.window_tokens) is not int or self.window_tokens <= 0:
            raise ValueError(f"window_tokens must be a positive int, got {self.window_tokens!r}")
        if self.max_window_tokens is not None and (
            type(self.max_window_tokens) is not int or self.max_window_tokens < self.window_tokens
        ):
            raise ValueError("max_window_tokens must be an int at least window_tokens")
        _ = self.base  # building the Rates validates them
        if (self.long_context_threshold is None) != (self.long_context is None):
            raise ValueError(
                "long_context_threshold and long_context are set together or not at all"
            )
        if self.long_context_threshold is not None and (
            type(self.long_context_threshold) is not int or self.long_context_threshold <= 0
        ):
            raise ValueError("long_context_threshold must be a positive int")

    @property
    def base(self) -> Rates:
        """The standard rates, below any long-context threshold."""
        return Rates(
            input=self.input,
            output=self.output,
            cache_read=self.cache_read,
            cache_write_5m=self.cache_write_5m,
            cache_write_1h=self.cache_write_1h,
        )

    def in_long_context(self, context_tokens: int) -> bool:
        """Whether a request of `context_tokens` input tokens is billed at the premium tier."""
        threshold = self.long_context_threshold
        return threshold is not None and context_tokens > threshold

    def rates_for(self, context_tokens: int) -> Rates:
        """The rates a request of `context_tokens` input tokens is billed at."""
        if self.long_context is not None and self.in_long_context(context_tokens):
            return self.long_context
        return self.base


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """One call's cost per bucket in dollars, exact (round only for display).

    One field per bucket of `BUCKETS`, by its name. `long_context` says the premium tier applied
    to the whole call. `total` is the bucket sum.
    """

    uncached_input: Decimal
    cache_read: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    output: Decimal
    long_context: bool

    @property
    def total(self) -> Decimal:
        with localcontext(MONEY):
            return (
                self.uncached_input
                + self.cache_read
                + self.cache_write_5m
                + self.cache_write_1h
                + self.output
            )


def call_cost(usage: NormalizedUsage, price: ModelPrice) -> CostBreakdown:
    """What one call cost at `price`, per bucket: `billed_cost` of its one pass.

    The tier is chosen by the request's size (`usage.context_tokens`, cache included), and then
    applies to every bucket, output too. Reasoning is inside `usage.output` and billed as output.
    """
    return billed_cost([usage], price)


def billed_cost(passes: Iterable[NormalizedUsage], price: ModelPrice) -> CostBreakdown:
    """What a call billed as several sampling passes cost (Anthropic `usage.iterations`): each
    pass at the tier its own input selects, summed per bucket (`IntegerPricer`, the one rule)."""
    return IntegerPricer(price).billed(passes)[0]


def billed_no_cache_cost(passes: Iterable[NormalizedUsage], price: ModelPrice) -> Decimal:
    """`no_cache_cost` summed over a call's sampling passes."""
    return IntegerPricer(price).billed(passes)[2]


def no_cache_cost(usage: NormalizedUsage, price: ModelPrice) -> Decimal:
    """What the same call would have cost with every input token billed as uncached input.

    Same request size, so the same tier as `call_cost`.
    """
    return billed_no_cache_cost([usage], price)


def cache_savings(usage: NormalizedUsage, price: ModelPrice) -> Decimal:
    """What the cache saved on this call: `no_cache_cost − call_cost`.

    Negative when writes cost more than later reads recovered (a prefix written and never read).
    """
    cost, total, no_cache = IntegerPricer(price).billed([usage])
    with localcontext(MONEY):
        return no_cache - total


def find_price(model_id: str, catalogue: Iterable[ModelPrice]) -> ModelPrice | None:
    """The catalogue row for `model_id` as `resolve_model` resolves it; None when unknown."""
    rows = {row.model: row for row in catalogue}
    resolved = resolve_model(model_id, rows)
    return None if resolved is None else rows[resolved]


# --- model id resolution -----------------------------------------------------------------------

# Bedrock: optional cross-region inference prefix (us., eu., apac., global., us-gov., …), vendor
# prefix, version suffix ("-v1:0", "-v2:0:200k").
_BEDROCK: Final = re.compile(
    r"(?:[a-z]+(?:-[a-z]+)?\.)?(?:anthropic|openai)\.(?P<id>.+?)(?:-v\d+(?::\w+)*)?"
)
# Snapshot dates: Anthropic "-20250929", OpenAI "-2024-08-06"; and floating "-latest" aliases.
_DATED: Final = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
_DOTTED_VERSION: Final = re.compile(r"(?<=\d)\.(?=\d)")


def resolve_model(model_id: str, known: Iterable[str]) -> str | None:
    """The id in `known` that prices `model_id`, or None.

    Tried in order, most specific first, so a snapshot with its own row keeps it:
    the id itself; its last path segment (ARNs, Vertex resource paths, "anthropic/…" gateway
    ids); with a Bedrock region/vendor prefix and version suffix removed; a Vertex "@date" as
    the dated id; Claude's "4.5" spelled "4-5"; and finally without the snapshot date or
    "-latest". Case-insensitive; returns the spelling in `known`. Never guesses by prefix:
    `gpt-4o-audio-preview` is not `gpt-4o`, and mispricing would be worse than "unknown".
    """
    by_lower = {k.lower(): k for k in known}
    for candidate in _candidates(model_id):
        if candidate in by_lower:
            return by_lower[candidate]
    return None


def _candidates(model_id: str) -> Iterator[str]:
    name = model_id.strip().lower()
    if not name:
        return
    yield name
    name = name.rpartition("/")[2]
    yield name
    bedrock = _BEDROCK.fullmatch(name)
    if bedrock:
        name = bedrock["id"]
        yield name
    if "@" in name:
        # Vertex: "claude-sonnet-4-5@20250929" is the snapshot "claude-sonnet-4-5-20250929".
        base, _, version = name.partition("@")
        name = f"{base}-{version}" if version.isdigit() else base
        yield name
    if name.startswith("claude"):
        name = _DOTTED_VERSION.sub("-", name)
        yield name
    undated = _DATED.sub("", name)
    if undated != name:
        yield undated


# --- seed catalogue ----------------------------------------------------------------------------


# The seed rows' builders run once, at import, before mutmut can switch a mutant on: their
# figures are held by tests/unit/telemetry/test_pricing.py, not by mutation (docs/mutation.md).
# pragma: no mutate start
def _anthropic(
    model: str,
    *,
    input: str,
    output: str,
    window: int = 200_000,
    max_window: int | None = None,
    cache_read: str | None = None,
    long_context: tuple[str, str] | None = None,
    long_context_threshold: int = 200_000,
    long_context_cache_read: str | None = None,
) -> ModelPrice:
    """A Claude row with Anthropic's cache multipliers: 5m write 1.25×, 1h write 2×, read 0.1×
    (or the model's own `cache_read` price: newer models read cheaper)."""
    base = _anthropic_rates(Decimal(input), Decimal(output), cache_read)
    premium = (
        None
        if long_context is None
        else _anthropic_rates(
            Decimal(long_context[0]), Decimal(long_context[1]), long_context_cache_read
        )
    )
    return ModelPrice(
        model=model,
        provider="anthropic",
        family=model,
        window_tokens=window,
        max_window_tokens=max_window,
        input=base.input,
        output=base.output,
        cache_read=base.cache_read,
        cache_write_5m=base.cache_write_5m,
        cache_write_1h=base.cache_write_1h,
        # A request whose input (cache included) exceeds the threshold is billed entirely at the
        # premium rates: >200k on the Sonnet 4/4.5 1M beta, >100k prompts on Haiku 5.5.
        long_context_threshold=None if premium is None else long_context_threshold,
        long_context=premium,
    )


def _anthropic_rates(input: Decimal, output: Decimal, cache_read: str | None = None) -> Rates:
    return Rates(
        input=input,
        output=output,
        cache_read=input * Decimal("0.1") if cache_read is None else Decimal(cache_read),
        cache_write_5m=input * Decimal("1.25"),
        cache_write_1h=input * 2,
    )


def _openai(
    model: str, *, window: int, input: str, cached: str, output: str, family: str | None = None
) -> ModelPrice:
    """An OpenAI row: cached input priced per model, no cache-write surcharge."""
    return ModelPrice(
        model=model,
        provider="openai",
        family=family or model,
        window_tokens=window,
        input=Decimal(input),
        output=Decimal(output),
        cache_read=Decimal(cached),
        cache_write_5m=None,
        cache_write_1h=None,
    )


# pragma: no mutate end


# List prices in $/MTok (standard tier, no batch or priority discounts) as known on 2026-11-30
# (Claude rows checked against the model pages of platform.claude.com that day; OpenAI's GPT-5.6
# tiers were in limited preview with cache-write billing and are left for admins to add).
# Recheck against providers' pages (platform.claude.com/docs/en/about-claude/pricing,
# openai.com/api/pricing) before relying on an exact figure; admins edit the live table.
SEED_CATALOGUE: Final[tuple[ModelPrice, ...]] = (
    # Claude 5 family: 1M windows at flat rates (no long-context premium). Opus 5.5 and
    # Sonnet 5.5 read the cache at 0.05× (Sonnet 5.5's read price was cut to $0.10 on 2026-10-07).
    _anthropic("claude-fable-5-1", input="10", output="50", window=1_000_000, cache_read="0.25"),
    _anthropic("claude-fable-5", input="10", output="50", window=1_000_000, cache_read="1"),
    _anthropic("claude-mythos-5-1", input="10", output="50", window=1_000_000, cache_read="0.25"),
    _anthropic("claude-mythos-5", input="10", output="50", window=1_000_000, cache_read="1"),
    _anthropic("claude-opus-5-5", input="4", output="20", window=1_000_000, cache_read="0.20"),
    _anthropic("claude-opus-5", input="5", output="25", window=1_000_000),
    _anthropic("claude-sonnet-5-5", input="2", output="10", window=1_000_000, cache_read="0.10"),
    _anthropic("claude-sonnet-5", input="2", output="10", window=1_000_000),
    # Haiku 5.5 prices by prompt length: over 100k tokens the whole request is billed higher.
    _anthropic(
        "claude-haiku-5-5",
        input="0.10",
        output="0.50",
        window=1_000_000,
        long_context=("0.50", "2.50"),
        long_context_threshold=100_000,
    ),
    # Opus 4.6+ and Sonnet 4.6: 200k standard, 1M opt-in at flat rates. A real claude-opus-4-6
    # session ran (and its agent compacted) in 200k: 1M is what the model can take, not what an
    # agent runs with unless it opts in (telemetry.windows; migration 0007 moved these rows).
    _anthropic("claude-opus-4-8", input="5", output="25", max_window=1_000_000),
    _anthropic("claude-opus-4-7", input="5", output="25", max_window=1_000_000),
    _anthropic("claude-opus-4-6", input="5", output="25", max_window=1_000_000),
    _anthropic("claude-sonnet-4-6", input="3", output="15", max_window=1_000_000),
    _anthropic("claude-opus-4-5", input="5", output="25"),
    _anthropic("claude-opus-4-1", input="15", output="75"),
    _anthropic("claude-opus-4", input="15", output="75"),
    # Sonnet 4/4.5: 200k standard; the 1M beta bills requests over 200k at $6/$22.50.
    _anthropic(
        "claude-sonnet-4-5",
        input="3",
        output="15",
        max_window=1_000_000,
        long_context=("6", "22.50"),
    ),
    _anthropic(
        "claude-sonnet-4", input="3", output="15", max_window=1_000_000, long_context=("6", "22.50")
    ),
    _anthropic("claude-3-7-sonnet", input="3", output="15"),
    _anthropic("claude-haiku-4-5", input="1", output="5"),
    _anthropic("claude-3-5-haiku", input="0.80", output="4"),
    _anthropic("claude-3-haiku", input="0.25", output="1.25"),
    _openai("gpt-5.5", window=1_050_000, input="5", cached="0.50", output="30"),
    _openai("gpt-5.4", window=1_050_000, input="2.50", cached="0.25", output="15"),
    _openai("gpt-5.2", window=400_000, input="1.75", cached="0.175", output="14"),
    # Codex models (what Codex CLI rollouts name), as of 2026-12-03: gpt-5-codex and
    # codex-mini-latest from their model pages (developers.openai.com/api/docs/models/<id>), the
    # rest from OpenAI's pricing page (developers.openai.com/api/docs/pricing) and its Codex rate
    # card (25 credits = $1). Cached input is a discount; OpenAI bills no cache write.
    _openai("gpt-5.3-codex", window=400_000, input="1.75", cached="0.175", output="14"),
    _openai("gpt-5.2-codex", window=400_000, input="1.75", cached="0.175", output="14"),
    _openai("gpt-5.1-codex-max", window=400_000, input="1.25", cached="0.125", output="10"),
    _openai("gpt-5.1-codex", window=400_000, input="1.25", cached="0.125", output="10"),
    _openai("gpt-5.1-codex-mini", window=400_000, input="0.25", cached="0.025", output="2"),
    _openai("gpt-5-codex", window=400_000, input="1.25", cached="0.125", output="10"),
    _openai("codex-mini-latest", window=200_000, input="1.50", cached="0.375", output="6"),
    _openai("gpt-5.1", window=400_000, input="1.25", cached="0.125", output="10"),
    _openai("gpt-5", window=400_000, input="1.25", cached="0.125", output="10"),
    _openai("gpt-5-mini", window=400_000, input="0.25", cached="0.025", output="2"),
    _openai("gpt-5-nano", window=400_000, input="0.05", cached="0.005", output="0.40"),
    _openai("gpt-4.1", window=1_047_576, input="2", cached="0.50", output="8"),
    _openai("gpt-4.1-mini", window=1_047_576, input="0.40", cached="0.10", output="1.60"),
    _openai("gpt-4.1-nano", window=1_047_576, input="0.10", cached="0.025", output="0.40"),
    _openai("gpt-4o", window=128_000, input="2.50", cached="1.25", output="10"),
    # The first gpt-4o snapshot kept its launch price and never had prompt caching.
    _openai(
        "gpt-4o-2024-05-13", window=128_000, input="5", cached="5", output="15", family="gpt-4o"
    ),
    _openai("gpt-4o-mini", window=128_000, input="0.15", cached="0.075", output="0.60"),
    _openai("o3", window=200_000, input="2", cached="0.50", output="8"),
    _openai("o4-mini", window=200_000, input="1.10", cached="0.275", output="4.40"),
    _openai("o3-mini", window=200_000, input="1.10", cached="0.55", output="4.40"),
    _openai("o1", window=200_000, input="15", cached="7.50", output="60"),
)


class IntegerPricer:
    """The cost rule: what a call's sampling passes cost at one `ModelPrice`, per bucket.

    Each pass is billed at the tier `ModelPrice.in_long_context` picks for its size
    (`usage.context_tokens`), every bucket of `BUCKETS` at the rate `Rates.billed` names for
    it, in $/MTok; a call's no-cache cost bills its whole input as uncached input instead.

    The arithmetic is integer: every rate of both tiers is scaled to an integer count of one
    common unit (10**-k $/MTok, k the most decimal places any rate has), so each bucket is an
    integer sum of tokens × rate, made a Decimal once, exact whatever the counts and rates.
    Ingest builds one per price and submission (`telemetry.catalogue.OnceCatalogue`); the
    Decimal functions above answer through it, so there is no second form of the rule.
    """

    __slots__ = ("_base", "_exponent", "_long", "_long_from")

    def __init__(self, price: ModelPrice) -> None:
        tiers = [price.base] + ([price.long_context] if price.long_context is not None else [])
        rows = [{bucket: tier.billed(bucket) for bucket in BUCKETS} for tier in tiers]
        places = max(0, *(-int(rate.as_tuple().exponent) for row in rows for rate in row.values()))
        unit = Decimal(10) ** places
        with localcontext(MONEY):
            scaled = [_Scaled(**{b: int(rate * unit) for b, rate in row.items()}) for row in rows]
        self._base, self._long = scaled[0], scaled[-1]  # the premium, if any
        self._long_from = _long_context_from(price)  # None: no premium tier
        self._exponent = -places - 6  # the unit of a token × scaled rate, in dollars

    def billed(self, passes: Iterable[NormalizedUsage]) -> tuple[CostBreakdown, Decimal, Decimal]:
        """(the call's cost per bucket, its `total`, its no-cache cost) over its passes."""
        figures: dict[str, Any] = dict(zip(BILLED_FIGURES, self.values(passes), strict=True))
        cost = CostBreakdown(
            **{bucket: figures[f"cost_{bucket}"] for bucket in BUCKETS},
            long_context=figures["long_context"],
        )
        return cost, figures["cost_usd"], figures["no_cache_cost_usd"]

    def values(self, passes: Iterable[NormalizedUsage]) -> BilledValues:
        """The call's figures as one flat tuple, named by `BILLED_FIGURES`: its cost per bucket
        of `BUCKETS`, their total, the no-cache cost and whether the long-context tier applied,
        each a column of the call's row (`telemetry.costing.call_values`).

        No `CostBreakdown` is built and the Decimals are made inline: this runs once per
        stored call."""
        uncached = read = write_5m = write_1h = output = no_cache = 0
        long_context = False
        base, premium, long_from, size = self._base, self._long, self._long_from, context_size
        for usage in passes:
            rates = base
            context = size(usage)
            if long_from is not None and context >= long_from:
                rates = premium
                long_context = True
            # `_Scaled`'s fields, in its order
            input_rate, read_rate, write_5m_rate, write_1h_rate, output_rate = rates
            o = usage.output
            uncached += usage.uncached_input * input_rate
            read += usage.cache_read * read_rate
            write_5m += usage.cache_write_5m * write_5m_rate
            write_1h += usage.cache_write_1h * write_1h_rate
            output += o * output_rate
            no_cache += context * input_rate + o * output_rate
        # each sum scaled to dollars, exact: 50 digits never round here
        exponent, scale = self._exponent, _SCALE
        return (
            scale(uncached, exponent),
            scale(read, exponent),
            scale(write_5m, exponent),
            scale(write_1h, exponent),
            scale(output, exponent),
            scale(uncached + read + write_5m + write_1h + output, exponent),
            scale(no_cache, exponent),
            long_context,
        )


# `Decimal(n).scaleb(exponent, MONEY)` for an int `n` (exact: the context converts an int
# without rounding), in one call of a method bound once: seven per stored call.
_SCALE: Final = MONEY.scaleb


# `IntegerPricer.values`' figures by name: each its column in a call's row.
BILLED_FIGURES: Final = (
    *(f"cost_{bucket}" for bucket in BUCKETS),
    "cost_usd",
    "no_cache_cost_usd",
    "long_context",
)
BilledValues = tuple[Decimal, Decimal, Decimal, Decimal, Decimal, Decimal, Decimal, bool]


class _Scaled(NamedTuple):
    """One tier's rate for each bucket of `BUCKETS`, in the pricer's integer unit."""

    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int


def _long_context_from(price: ModelPrice) -> int | None:
    """The smallest request size `price.in_long_context` bills at the premium tier (None: no
    size up to the largest a request can have), found by bisection: the tier rule is monotone
    (a bigger request is never billed at a lower tier), and stays defined once, in
    `ModelPrice.in_long_context`, which the pricer compares by this one number."""
    low, high = 0, len(INPUT_BUCKETS) * MAX_TOKENS
    if not price.in_long_context(high):
        return None
    while low < high:  # the answer is in [low, high]
        middle = (low + high) // 2
        if price.in_long_context(middle):
            high = middle
        else:
            low = middle + 1
    return low
