"""The cost rule (`IntegerPricer`, which ingest runs and `call_cost` answers through) against
the rule as written in the price list: each pass at the tier `ModelPrice.in_long_context` picks
for its size, every bucket's tokens × the rate `Rates.billed` names for it, per million tokens.

The oracle below is that sentence in plain Decimal arithmetic. The strategies draw the
boundaries on purpose (a request exactly at the threshold, one token either side, zero and
maximal counts, rates with up to twelve decimals); the hand-computed examples hold each of them
to a figure written down, so a changed comparison or a swapped rate fails here by name."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Context, Decimal
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.pricing import (
    BILLED_FIGURES,
    SEED_CATALOGUE,
    CostBreakdown,
    IntegerPricer,
    ModelPrice,
    Rates,
    _long_context_from,
    billed_cost,
    billed_no_cache_cost,
    cache_savings,
    call_cost,
    find_price,
    no_cache_cost,
)
from telemetry.usage import BUCKETS, INPUT_BUCKETS, MAX_TOKENS, NormalizedUsage

D = Decimal
_EXACT = Context(prec=100)

# --- the oracle -------------------------------------------------------------------------------


def _spec(price: ModelPrice, passes: Sequence[NormalizedUsage]) -> dict[str, Any]:
    """Each figure of `BILLED_FIGURES` by the price list's own words, in exact Decimals."""
    figures: dict[str, Any] = {name: D(0) for name in BILLED_FIGURES}
    figures["long_context"] = False
    for usage in passes:
        size = sum(getattr(usage, bucket) for bucket in INPUT_BUCKETS)
        rates = price.base
        if price.long_context is not None and price.in_long_context(size):
            rates = price.long_context
            figures["long_context"] = True
        for bucket in BUCKETS:
            cost = _EXACT.divide(
                _EXACT.multiply(getattr(usage, bucket), rates.billed(bucket)), 10**6
            )
            figures[f"cost_{bucket}"] = _EXACT.add(figures[f"cost_{bucket}"], cost)
            figures["cost_usd"] = _EXACT.add(figures["cost_usd"], cost)
        no_cache = _EXACT.add(
            _EXACT.multiply(size, rates.input), _EXACT.multiply(usage.output, rates.output)
        )
        no_cache = _EXACT.divide(no_cache, 10**6)
        figures["no_cache_cost_usd"] = _EXACT.add(figures["no_cache_cost_usd"], no_cache)
    return figures


def _figures(price: ModelPrice, passes: Sequence[NormalizedUsage]) -> dict[str, Any]:
    return dict(zip(BILLED_FIGURES, IntegerPricer(price).values(passes), strict=True))


# --- strategies that draw the boundaries --------------------------------------------------------

_EDGES = [0, 1, 2**40, MAX_TOKENS - 1, MAX_TOKENS]
tokens = st.one_of(st.sampled_from(_EDGES), st.integers(0, 2_000_000), st.integers(0, MAX_TOKENS))
# Rates as an admin may type them, and finer: up to twelve decimal places, up to $100k/MTok.
rates = st.one_of(
    st.decimals(min_value=0, max_value=100_000, places=6, allow_nan=False),
    st.decimals(min_value=0, max_value=1, places=12, allow_nan=False),
    st.sampled_from([D("0"), D("0.000000001"), D("0.123456789012"), D("99999.999999999")]),
).map(lambda d: D(str(d)))
write_rates = st.one_of(st.none(), rates)


def _usage(**counts: int) -> NormalizedUsage:
    values: dict[str, Any] = {bucket: counts.get(bucket, 0) for bucket in BUCKETS}
    return NormalizedUsage(
        provider="anthropic", reasoning_output=None, reported_cache=True, **values
    )


@st.composite
def usages(draw: Any, size: int | None = None) -> NormalizedUsage:
    """Any usage; given `size`, one whose input buckets sum to exactly `size`."""
    counts = {bucket: draw(tokens) for bucket in BUCKETS}
    if size is not None:
        # split `size` over the input buckets at three drawn cuts
        cuts = sorted(draw(st.integers(0, size)) for _ in range(len(INPUT_BUCKETS) - 1))
        bounds = [0, *cuts, size]
        for bucket, low, high in zip(INPUT_BUCKETS, bounds, bounds[1:], strict=False):
            counts[bucket] = high - low
    return _usage(**counts)


@st.composite
def price_rates(draw: Any) -> Rates:
    return Rates(
        input=draw(rates),
        output=draw(rates),
        cache_read=draw(rates),
        cache_write_5m=draw(write_rates),
        cache_write_1h=draw(write_rates),
    )


@st.composite
def prices(draw: Any, long_context: bool | None = None) -> ModelPrice:
    if long_context is None and draw(st.booleans()):
        seeded: ModelPrice = draw(st.sampled_from(SEED_CATALOGUE))
        return seeded
    premium = None
    threshold = None
    if long_context or (long_context is None and draw(st.booleans())):
        threshold = draw(st.one_of(st.integers(1, 1_000_000), st.integers(1, MAX_TOKENS)))
        premium = draw(price_rates())
    base = draw(price_rates())
    return ModelPrice(
        model="edited",
        provider="anthropic",
        family="edited",
        window_tokens=200_000,
        input=base.input,
        output=base.output,
        cache_read=base.cache_read,
        cache_write_5m=base.cache_write_5m,
        cache_write_1h=base.cache_write_1h,
        long_context_threshold=threshold,
        long_context=premium,
    )


@st.composite
def passes_about_the_threshold(draw: Any) -> tuple[ModelPrice, list[NormalizedUsage]]:
    """A tiered price and passes whose sizes are its threshold, one below or one above."""
    price = draw(prices(long_context=True))
    threshold = price.long_context_threshold
    assert threshold is not None
    sizes = st.sampled_from([threshold - 1, threshold, threshold + 1])
    passes = draw(st.lists(sizes.flatmap(lambda size: usages(size)), min_size=1, max_size=3))
    return price, passes


# --- the rule, any price and any passes ---------------------------------------------------------


@given(price=prices(), passes=st.lists(usages(), min_size=0, max_size=4))
def test_the_cost_rule_is_the_price_list_to_the_last_digit(price, passes):
    assert _figures(price, passes) == _spec(price, passes)


@given(case=passes_about_the_threshold())
def test_at_and_beside_the_threshold_each_pass_is_billed_at_its_own_tier(case):
    price, passes = case
    assert _figures(price, passes) == _spec(price, passes)


@given(price=prices(), passes=st.lists(usages(), max_size=3))
def test_the_decimal_answers_are_the_rules_figures(price, passes):
    figures = _figures(price, passes)
    cost = billed_cost(passes, price)
    assert {f"cost_{bucket}": getattr(cost, bucket) for bucket in BUCKETS} == {
        f"cost_{bucket}": figures[f"cost_{bucket}"] for bucket in BUCKETS
    }
    assert (cost.total, cost.long_context) == (figures["cost_usd"], figures["long_context"])
    assert billed_no_cache_cost(passes, price) == figures["no_cache_cost_usd"]
    for usage in passes:
        one = _figures(price, [usage])
        assert call_cost(usage, price).total == one["cost_usd"]
        assert no_cache_cost(usage, price) == one["no_cache_cost_usd"]
        assert cache_savings(usage, price) == _EXACT.subtract(
            one["no_cache_cost_usd"], one["cost_usd"]
        )


def test_every_figure_has_the_pricers_one_exponent():
    """A stored numeric's text comes from the Decimal's exponent: the most decimal places of
    any rate (five: the 5m write's $0.15625), plus six for the million."""
    price = _tiered(input="0.125", premium_input="0.5")
    values = IntegerPricer(price).values([])
    assert [str(v) for v in values[:-1]] == ["0E-11"] * 7
    assert values[-1] is False


# --- hand-computed boundaries ----------------------------------------------------------------


def _tiered(
    *, input: str = "3", premium_input: str = "6", threshold: int = 1_000, **rates: str
) -> ModelPrice:
    """A price with every bucket at its own rate in both tiers (so a swapped rate shows), over
    `threshold` input tokens billed at the premium."""

    def tier(base: str, **own: str) -> Rates:
        input_ = D(base)
        return Rates(
            input=input_,
            cache_read=D(own.get("cache_read", str(input_ / 10))),
            cache_write_5m=D(own.get("cache_write_5m", str(input_ * D("1.25")))),
            cache_write_1h=D(own.get("cache_write_1h", str(input_ * 2))),
            output=D(own.get("output", str(input_ * 5))),
        )

    base, premium = tier(input, **rates), tier(premium_input)
    return ModelPrice(
        model="tiered",
        provider="anthropic",
        family="tiered",
        window_tokens=200_000,
        input=base.input,
        output=base.output,
        cache_read=base.cache_read,
        cache_write_5m=base.cache_write_5m,
        cache_write_1h=base.cache_write_1h,
        long_context_threshold=threshold,
        long_context=premium,
    )


# Base rates $3 input, $0.3 read, $3.75 5m write, $6 1h write, $15 output; premium $6, $0.6,
# $7.5, $12, $30: per bucket, the cost of a request of 999, 1,000 and 1,001 tokens in that
# bucket alone, with 1,000 output tokens.
_AT_THE_THRESHOLD = [
    ("uncached_input", 999, "0.002997", "0.015", False),
    ("uncached_input", 1_000, "0.003", "0.015", False),
    ("uncached_input", 1_001, "0.006006", "0.030", True),
    ("cache_read", 999, "0.0002997", "0.015", False),
    ("cache_read", 1_000, "0.0003", "0.015", False),
    ("cache_read", 1_001, "0.0006006", "0.030", True),
    ("cache_write_5m", 999, "0.00374625", "0.015", False),
    ("cache_write_5m", 1_000, "0.00375", "0.015", False),
    ("cache_write_5m", 1_001, "0.0075075", "0.030", True),
    ("cache_write_1h", 999, "0.005994", "0.015", False),
    ("cache_write_1h", 1_000, "0.006", "0.015", False),
    ("cache_write_1h", 1_001, "0.012012", "0.030", True),
]


@pytest.mark.parametrize(
    ("bucket", "size", "bucket_cost", "output_cost", "long"), _AT_THE_THRESHOLD
)
def test_a_request_at_the_threshold_is_billed_at_base_rates_and_one_token_above_at_premium(
    bucket, size, bucket_cost, output_cost, long
):
    figures = _figures(_tiered(), [_usage(**{bucket: size, "output": 1_000})])
    expected = {name: D(0) for name in BILLED_FIGURES}
    expected[f"cost_{bucket}"] = D(bucket_cost)
    expected["cost_output"] = D(output_cost)
    expected["cost_usd"] = D(bucket_cost) + D(output_cost)
    input_rate = D(6) if long else D(3)
    expected["no_cache_cost_usd"] = size * input_rate / 10**6 + D(output_cost)
    expected["long_context"] = long
    assert figures == expected


def test_the_threshold_is_the_sum_of_all_input_buckets():
    # 250 + 250 + 250 + 250 = 1,000: at the threshold; one more token in any bucket is over it
    at = {"uncached_input": 250, "cache_read": 250, "cache_write_5m": 250, "cache_write_1h": 250}
    assert _figures(_tiered(), [_usage(**at)])["long_context"] is False
    for bucket in INPUT_BUCKETS:
        over = {**at, bucket: 251}
        assert _figures(_tiered(), [_usage(**over)])["long_context"] is True, bucket
    assert _figures(_tiered(), [_usage(**at, output=10**9)])["long_context"] is False


def test_each_pass_is_billed_at_its_own_tier():
    # one pass at the threshold (base), one a token over it (premium): $0.003 + $0.006006
    figures = _figures(_tiered(), [_usage(uncached_input=1_000), _usage(uncached_input=1_001)])
    assert figures["cost_uncached_input"] == D("0.009006")
    assert figures["no_cache_cost_usd"] == D("0.009006")
    assert figures["long_context"] is True


def test_every_bucket_at_its_own_rate_below_and_above():
    counts = {"uncached_input": 1, "cache_read": 10, "cache_write_5m": 100, "cache_write_1h": 1000}
    below = _figures(_tiered(threshold=10_000), [_usage(**counts, output=7)])
    above = _figures(_tiered(threshold=1_110), [_usage(**counts, output=7)])
    # 1 × 3 + 10 × 0.3 + 100 × 3.75 + 1000 × 6 + 7 × 15, per million
    assert [below[f"cost_{b}"] for b in BUCKETS] == [
        D("0.000003"),
        D("0.000003"),
        D("0.000375"),
        D("0.006"),
        D("0.000105"),
    ]
    assert below["cost_usd"] == D("0.006486")
    assert below["no_cache_cost_usd"] == D("0.003333") + D("0.000105")  # 1,111 × 3 + 7 × 15
    # twice every rate
    assert [above[f"cost_{b}"] for b in BUCKETS] == [
        D("0.000006"),
        D("0.000006"),
        D("0.00075"),
        D("0.012"),
        D("0.00021"),
    ]
    assert above["cost_usd"] == D("0.012972")
    assert above["long_context"] is True


def test_no_tokens_cost_nothing():
    figures = _figures(_tiered(), [_usage()])
    assert figures == {**{name: D(0) for name in BILLED_FIGURES}, "long_context": False}


def test_prices_with_nine_and_twelve_decimals_are_exact():
    price = _tiered(input="0.000000001", cache_read="0.123456789012", output="0.999999999")
    figures = _figures(price, [_usage(cache_read=999, output=2**40)])
    assert figures["cost_cache_read"] == D("0.000123333332222988")  # 999 × 0.123456789012 / 10**6
    assert figures["cost_output"] == D("1099511.626676488372224")  # 2**40 × 0.999999999 / 10**6
    assert figures["long_context"] is False  # 999 input tokens, under 1,000


def test_maximal_counts_in_every_bucket_are_exact():
    top = dict.fromkeys(BUCKETS, MAX_TOKENS)
    figures = _figures(_tiered(), [_usage(**top)])
    # (2**53 - 1) tokens at the premium rates: 6, 0.6, 7.5, 12 and 30 $/MTok
    m = D(MAX_TOKENS)
    assert figures["cost_uncached_input"] == m * 6 / 10**6 == D("54043195528.445946")
    assert figures["cost_cache_read"] == m * D("0.6") / 10**6
    assert figures["cost_cache_write_5m"] == m * D("7.5") / 10**6
    assert figures["cost_cache_write_1h"] == m * 12 / 10**6
    assert figures["cost_output"] == m * 30 / 10**6
    assert figures["cost_usd"] == m * D("56.1") / 10**6
    assert figures["no_cache_cost_usd"] == (4 * m * 6 + m * 30) / 10**6
    assert figures["long_context"] is True


def test_fifteen_digit_rates_on_maximal_counts_never_round():
    # 2**53 - 1 tokens × a rate of fifteen significant digits: 31 digits, past a default
    # Decimal context's 28, in every bucket and in both sums
    rate = "0.123456789012345"
    price = _tiered(
        input=rate,
        cache_read=rate,
        cache_write_5m=rate,
        cache_write_1h=rate,
        output=rate,
        threshold=4 * MAX_TOKENS,
    )
    figures = _figures(price, [_usage(**dict.fromkeys(BUCKETS, MAX_TOKENS))])
    one = _EXACT.divide(_EXACT.multiply(MAX_TOKENS, D(rate)), 10**6)
    assert one == D("1111999897.984709650337676533895")
    for bucket in BUCKETS:
        assert figures[f"cost_{bucket}"] == one, bucket
    assert figures["cost_usd"] == _EXACT.multiply(one, 5)
    assert figures["no_cache_cost_usd"] == _EXACT.multiply(one, 5)


def test_a_rate_of_thirty_digits_is_scaled_exactly():
    rate = D("12345678901234567890.1234567890")  # 30 significant digits
    price = _tiered(input=str(rate), threshold=10**9)
    figures = _figures(price, [_usage(uncached_input=1)])
    assert figures["cost_uncached_input"] == _EXACT.divide(rate, 10**6)


def test_whole_dollar_rates_give_figures_in_millionths():
    # no rate has a decimal place (or has a positive exponent): the unit is a millionth of a $
    whole = ModelPrice(
        model="whole",
        provider="openai",
        family="whole",
        window_tokens=1000,
        input=D(3),
        output=D(15),
        cache_read=D(1),
        cache_write_5m=None,
        cache_write_1h=None,
    )
    assert [v.as_tuple().exponent for v in IntegerPricer(whole).values([])[:-1]] == [-6] * 7
    ten = Rates(D("1E+1"), D("1E+1"), D("1E+1"), None, None)
    flat = ModelPrice(
        model="flat",
        provider="openai",
        family="flat",
        window_tokens=1000,
        input=ten.input,
        output=ten.output,
        cache_read=ten.cache_read,
        cache_write_5m=None,
        cache_write_1h=None,
    )
    assert [v.as_tuple().exponent for v in IntegerPricer(flat).values([])[:-1]] == [-6] * 7


def test_a_write_without_its_own_rate_is_billed_as_uncached_input():
    price = find_price("gpt-4.1", SEED_CATALOGUE)
    assert price is not None
    figures = _figures(price, [_usage(cache_write_5m=1_000_000, cache_write_1h=2_000_000)])
    assert figures["cost_cache_write_5m"] == D("2")
    assert figures["cost_cache_write_1h"] == D("4")


def test_the_seeded_tiers_start_one_token_over_their_thresholds():
    tiered = [p for p in SEED_CATALOGUE if p.long_context_threshold is not None]
    assert {p.model for p in tiered} == {"claude-haiku-5-5", "claude-sonnet-4-5", "claude-sonnet-4"}
    for price in tiered:
        threshold = price.long_context_threshold
        assert threshold is not None
        assert _long_context_from(price) == threshold + 1
        at = _figures(price, [_usage(uncached_input=threshold)])
        over = _figures(price, [_usage(uncached_input=threshold + 1)])
        assert (at["long_context"], over["long_context"]) == (False, True)


@given(threshold=st.integers(1, 4 * MAX_TOKENS + 1))
@example(threshold=4 * MAX_TOKENS - 1)
@example(threshold=4 * MAX_TOKENS)
def test_the_pricer_takes_its_tier_from_in_long_context(threshold):
    price = _tiered(threshold=threshold)
    long_from = _long_context_from(price)
    for size in (threshold - 1, threshold, threshold + 1, 4 * MAX_TOKENS):
        if size < 0 or size > 4 * MAX_TOKENS:
            continue
        assert (long_from is not None and size >= long_from) is price.in_long_context(size)


def test_the_decimal_answers_on_a_sonnet_call():
    sonnet = find_price("claude-sonnet-4-5-20250929", SEED_CATALOGUE)
    assert sonnet is not None
    call = _usage(uncached_input=1200, cache_read=45_000, cache_write_5m=3000, output=800)
    cost, total, no_cache = IntegerPricer(sonnet).billed([call])
    # 1200 × $3 + 45000 × $0.30 + 3000 × $3.75 + 800 × $15, per million.
    assert cost == CostBreakdown(D("0.0036"), D("0.0135"), D("0.01125"), D(0), D("0.012"), False)
    assert total == D("0.04035")
    assert no_cache == D("49200") * 3 / 10**6 + D("0.012")


def test_every_bucket_has_a_rate_and_a_cost_field():
    rates = Rates(D(1), D(2), D(3), D(4), D(5))
    assert [rates.billed(bucket) for bucket in BUCKETS] == [D(1), D(3), D(4), D(5), D(2)]
    assert CostBreakdown.__slots__ == (*BUCKETS, "long_context")


def test_the_pricer_follows_the_tier_rule_changed_at_its_one_definition(monkeypatch):
    # `>=` for `>` in `ModelPrice.in_long_context` alone: a request exactly at the threshold is
    # then billed at the premium by the pricer too, and one below still at the base rates
    def at_or_above(price: ModelPrice, context_tokens: int) -> bool:
        threshold = price.long_context_threshold
        return threshold is not None and context_tokens >= threshold

    monkeypatch.setattr(ModelPrice, "in_long_context", at_or_above)
    price = _tiered(threshold=1_000)
    assert _long_context_from(price) == 1_000
    at = _figures(price, [_usage(uncached_input=1_000)])
    below = _figures(price, [_usage(uncached_input=999)])
    assert (at["long_context"], at["cost_uncached_input"]) == (True, D("0.006"))
    assert (below["long_context"], below["cost_uncached_input"]) == (False, D("0.002997"))
    assert at == _spec(price, [_usage(uncached_input=1_000)])
