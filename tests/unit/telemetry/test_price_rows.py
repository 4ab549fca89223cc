"""A catalogue row's own checks (`ModelPrice`, `Rates`): each refusal with its exact message, and
each limit accepted exactly at its edge and refused one step past it."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from telemetry.pricing import ModelPrice, Rates

D = Decimal
PREMIUM = Rates(D("2"), D("4"), D("1"), None, None)


def _row(**overrides: Any) -> ModelPrice:
    fields: dict[str, Any] = {
        "model": "m",
        "provider": "openai",
        "family": "m",
        "window_tokens": 1000,
        "input": D("1"),
        "output": D("2"),
        "cache_read": D("0.5"),
        "cache_write_5m": None,
        "cache_write_1h": None,
    }
    return ModelPrice(**{**fields, **overrides})


def _refused(message: str, **overrides: Any) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _row(**overrides)


# --- ModelPrice --------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{"model": ""}, {"family": ""}, {"model": "", "family": ""}])
def test_a_row_needs_a_model_and_a_family(overrides):
    _refused("model and family must be non-empty", **overrides)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_both_vendors_are_accepted(provider):
    assert _row(provider=provider).provider == provider


@pytest.mark.parametrize("provider", ["google", "Anthropic", ""])
def test_any_other_vendor_is_refused_by_name(provider):
    _refused(f"provider must be 'anthropic' or 'openai', got {provider!r}", provider=provider)


@pytest.mark.parametrize("window", [1, 2, 1_000_000])
def test_a_window_of_one_token_or_more_is_accepted(window):
    assert _row(window_tokens=window).window_tokens == window


@pytest.mark.parametrize("window", [0, -1, True, 1000.0, "1000"])
def test_a_window_that_is_not_a_positive_int_is_refused(window):
    _refused(f"window_tokens must be a positive int, got {window!r}", window_tokens=window)


@pytest.mark.parametrize("maximum", [None, 1000, 1001, 1_000_000])
def test_a_maximum_window_at_or_above_the_standard_one_is_accepted(maximum):
    assert _row(max_window_tokens=maximum).max_window_tokens == maximum


@pytest.mark.parametrize(
    ("window", "maximum"), [(1000, 999), (1000, 0), (1000, 1000.0), (1000, 2000.0), (1, True)]
)
def test_a_maximum_window_below_the_standard_one_or_not_an_int_is_refused(window, maximum):
    _refused(
        "max_window_tokens must be an int at least window_tokens",
        window_tokens=window,
        max_window_tokens=maximum,
    )


def test_the_rows_rates_are_checked_by_rates():
    _refused("output must be a finite, non-negative Decimal, got Decimal('-1')", output=D("-1"))
    _refused("cache_write_5m must be a finite, non-negative Decimal, got 1.0", cache_write_5m=1.0)


@pytest.mark.parametrize("overrides", [{"long_context_threshold": 500}, {"long_context": PREMIUM}])
def test_the_threshold_and_the_premium_come_together(overrides):
    _refused("long_context_threshold and long_context are set together or not at all", **overrides)


@pytest.mark.parametrize("threshold", [1, 2, 500])
def test_a_positive_threshold_is_accepted(threshold):
    row = _row(long_context_threshold=threshold, long_context=PREMIUM)
    assert (row.long_context_threshold, row.long_context) == (threshold, PREMIUM)


@pytest.mark.parametrize("threshold", [0, -1, True, 500.0])
def test_a_threshold_that_is_not_a_positive_int_is_refused(threshold):
    _refused(
        "long_context_threshold must be a positive int",
        long_context_threshold=threshold,
        long_context=PREMIUM,
    )


def test_a_row_without_a_premium_is_never_long_context():
    row = _row()
    assert not row.in_long_context(10**15)
    assert row.rates_for(10**15) == row.base


@pytest.mark.parametrize(("size", "long"), [(0, False), (499, False), (500, False), (501, True)])
def test_the_premium_starts_one_token_over_the_threshold(size, long):
    row = _row(long_context_threshold=500, long_context=PREMIUM)
    assert row.in_long_context(size) is long
    assert row.rates_for(size) == (PREMIUM if long else row.base)


def test_the_base_rates_are_the_rows_own():
    row = _row(cache_write_5m=D("1.25"), cache_write_1h=D("2"))
    assert row.base == Rates(D("1"), D("2"), D("0.5"), D("1.25"), D("2"))


# --- Rates -------------------------------------------------------------------------------------

RATE_NAMES = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")


def _rates(**overrides: Any) -> Rates:
    fields: dict[str, Any] = dict.fromkeys(RATE_NAMES, D("1"))
    return Rates(**{**fields, **overrides})


@pytest.mark.parametrize("name", RATE_NAMES)
@pytest.mark.parametrize(
    "value", [D("-1"), D("-0.000000001"), D("NaN"), D("Infinity"), D("-Infinity"), 1.0, 1, "1"]
)
def test_a_rate_that_is_not_a_finite_non_negative_decimal_is_refused_by_name(name, value):
    message = f"{name} must be a finite, non-negative Decimal, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _rates(**{name: value})


@pytest.mark.parametrize("name", RATE_NAMES)
@pytest.mark.parametrize("value", [D("0"), D("0.000000001"), D("1E+3")])
def test_zero_and_tiny_rates_are_accepted(name, value):
    assert getattr(_rates(**{name: value}), name) == value


@pytest.mark.parametrize("name", ["cache_write_5m", "cache_write_1h"])
def test_a_write_rate_may_be_absent(name):
    assert getattr(_rates(**{name: None}), name) is None


@pytest.mark.parametrize("name", ["input", "output", "cache_read"])
def test_the_other_rates_may_not_be_absent(name):
    message = f"{name} must be a finite, non-negative Decimal, got None"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _rates(**{name: None})


def test_each_bucket_is_billed_at_its_own_rate_and_an_absent_write_rate_at_input():
    rates = Rates(D("1"), D("5"), D("0.1"), D("1.25"), D("2"))
    assert [rates.billed(b) for b in ("uncached_input", "cache_read", "output")] == [
        D("1"),
        D("0.1"),
        D("5"),
    ]
    assert (rates.billed("cache_write_5m"), rates.billed("cache_write_1h")) == (D("1.25"), D("2"))
    bare = Rates(D("3"), D("5"), D("0.1"), None, None)
    assert (bare.billed("cache_write_5m"), bare.billed("cache_write_1h")) == (D("3"), D("3"))


def test_an_absent_5m_write_rate_does_not_end_the_checks():
    message = "cache_write_1h must be a finite, non-negative Decimal, got Decimal('-1')"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _rates(cache_write_5m=None, cache_write_1h=D("-1"))
