"""The integer pricer of ingest against the Decimal pricing it replaces there (the oracle):
equal to the last digit for any price of the catalogue, any edited price and any passes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.pricing import (
    SEED_CATALOGUE,
    IntegerPricer,
    ModelPrice,
    Rates,
    billed_cost,
    billed_no_cache_cost,
    find_price,
)
from telemetry.usage import MAX_TOKENS, NormalizedUsage

tokens = st.one_of(st.integers(0, 2_000_000), st.integers(0, MAX_TOKENS))
# Rates as an operator types them in the admin: up to six decimal places, up to $100k/MTok.
rates = st.decimals(min_value=0, max_value=100_000, places=6, allow_nan=False).map(
    lambda d: Decimal(str(d))
)
write_rates = st.one_of(st.none(), rates)


@st.composite
def usages(draw: Any) -> NormalizedUsage:
    output = draw(tokens)
    return NormalizedUsage(
        provider="anthropic",
        uncached_input=draw(tokens),
        cache_read=draw(tokens),
        cache_write_5m=draw(tokens),
        cache_write_1h=draw(tokens),
        output=output,
        reasoning_output=None,
        reported_cache=True,
    )


@st.composite
def prices(draw: Any) -> ModelPrice:
    if draw(st.booleans()):
        seeded: ModelPrice = draw(st.sampled_from(SEED_CATALOGUE))
        return seeded
    long_context = None
    threshold = None
    if draw(st.booleans()):
        threshold = draw(st.integers(1, 1_000_000))
        long_context = Rates(
            input=draw(rates),
            output=draw(rates),
            cache_read=draw(rates),
            cache_write_5m=draw(write_rates),
            cache_write_1h=draw(write_rates),
        )
    return ModelPrice(
        model="edited",
        provider="anthropic",
        family="edited",
        window_tokens=200_000,
        input=draw(rates),
        output=draw(rates),
        cache_read=draw(rates),
        cache_write_5m=draw(write_rates),
        cache_write_1h=draw(write_rates),
        long_context_threshold=threshold,
        long_context=long_context,
    )


@settings(max_examples=400)
@given(price=prices(), passes=st.lists(usages(), min_size=1, max_size=4))
def test_integer_pricer_equals_the_decimal_pricing_to_the_last_digit(price, passes):
    cost, total, no_cache = IntegerPricer(price).billed(passes)
    expected = billed_cost(passes, price)
    assert cost == expected  # every bucket, and the long-context flag
    assert total == expected.total
    assert no_cache == billed_no_cache_cost(passes, price)


def test_integer_pricer_on_the_hand_computed_sonnet_call():
    sonnet = find_price("claude-sonnet-4-5-20250929", SEED_CATALOGUE)
    assert sonnet is not None
    call = NormalizedUsage(
        provider="anthropic",
        uncached_input=1200,
        cache_read=45_000,
        cache_write_5m=3000,
        cache_write_1h=0,
        output=800,
        reasoning_output=None,
        reported_cache=True,
    )
    cost, total, no_cache = IntegerPricer(sonnet).billed([call])
    # 1200 × $3 + 45000 × $0.30 + 3000 × $3.75 + 800 × $15, per million.
    assert total == Decimal("0.0036") + Decimal("0.0135") + Decimal("0.01125") + Decimal("0.012")
    assert no_cache == Decimal("49200") * 3 / 10**6 + Decimal("0.012")
    assert not cost.long_context
