"""`IntegerPricer.values`, the flat figures a call's row stores, against the loop it replaced
(the oracle below: `billed` as it was, a function call per Decimal): the same Decimals digit
for digit and exponent for exponent (a stored numeric's text comes from them), any price and
any passes; and `billed` is the same figures as a `CostBreakdown`."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Context, Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.pricing import CostBreakdown, IntegerPricer, ModelPrice
from telemetry.usage import NormalizedUsage

from .test_integer_pricing import prices, usages

_MONEY = Context(prec=50)


def _oracle(pricer: IntegerPricer, passes: Sequence[NormalizedUsage]) -> tuple[object, ...]:
    uncached = read = write_5m = write_1h = output = no_cache = 0
    long_context = False
    for usage in passes:
        rates = pricer._base
        context = usage.context_tokens
        threshold = pricer._threshold
        if pricer._long is not None and threshold is not None and context > threshold:
            rates = pricer._long
            long_context = True
        uncached += usage.uncached_input * rates[0]
        read += usage.cache_read * rates[1]
        write_5m += usage.cache_write_5m * rates[2]
        write_1h += usage.cache_write_1h * rates[3]
        output += usage.output * rates[4]
        no_cache += context * rates[0] + usage.output * rates[4]

    def scaled(units: int) -> Decimal:
        return Decimal(units).scaleb(pricer._exponent, _MONEY)

    return (
        scaled(uncached),
        scaled(read),
        scaled(write_5m),
        scaled(write_1h),
        scaled(output),
        scaled(uncached + read + write_5m + write_1h + output),
        scaled(no_cache),
        long_context,
    )


def _exact(values: Sequence[object]) -> list[object]:
    """Each Decimal as its sign, digits and exponent (`==` would take 0E-8 for 0)."""
    return [v.as_tuple() if isinstance(v, Decimal) else v for v in values]


@settings(max_examples=400)
@given(price=prices(), passes=st.lists(usages(), min_size=1, max_size=4))
def test_values_are_the_loop_they_replaced_digit_for_digit(price: ModelPrice, passes):
    pricer = IntegerPricer(price)
    assert _exact(pricer.values(passes)) == _exact(_oracle(pricer, passes))


@given(price=prices(), passes=st.lists(usages(), min_size=1, max_size=4))
def test_billed_is_values_as_a_cost_breakdown(price: ModelPrice, passes):
    pricer = IntegerPricer(price)
    cost, total, no_cache = pricer.billed(passes)
    values = pricer.values(passes)
    assert isinstance(cost, CostBreakdown)
    assert _exact(
        (
            cost.uncached_input,
            cost.cache_read,
            cost.cache_write_5m,
            cost.cache_write_1h,
            cost.output,
            total,
            no_cache,
            cost.long_context,
        )
    ) == _exact(values)


def test_values_of_no_pass_are_zero_at_the_pricers_exponent():
    pricer = IntegerPricer(
        ModelPrice(
            model="m",
            provider="openai",
            family="m",
            window_tokens=1000,
            input=Decimal("0.125"),
            output=Decimal("1"),
            cache_read=Decimal("0.0125"),
            cache_write_5m=None,
            cache_write_1h=None,
        )
    )
    assert _exact(pricer.values([])) == _exact(_oracle(pricer, []))
    assert str(pricer.values([])[0]) == "0E-10"
