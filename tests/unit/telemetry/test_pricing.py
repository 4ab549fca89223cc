"""Catalogue, model-id resolution and cost arithmetic, with hand-computed dollars."""

from __future__ import annotations

from decimal import Decimal, localcontext
from typing import Any

import pytest

from telemetry.pricing import (
    SEED_CATALOGUE,
    CostBreakdown,
    ModelPrice,
    Rates,
    cache_savings,
    call_cost,
    find_price,
    no_cache_cost,
    resolve_model,
)
from telemetry.usage import NormalizedUsage, normalize_usage

D = Decimal
SEED_IDS = [row.model for row in SEED_CATALOGUE]


def price(model: str) -> ModelPrice:
    found = find_price(model, SEED_CATALOGUE)
    assert found is not None, model
    return found


def usage(provider: Any = "anthropic", **buckets: int) -> NormalizedUsage:
    fields = {
        "uncached_input": 0,
        "cache_read": 0,
        "cache_write_5m": 0,
        "cache_write_1h": 0,
        "output": 0,
    }
    counts: dict[str, int] = {**fields, **buckets}
    return NormalizedUsage(
        provider=provider,
        uncached_input=counts["uncached_input"],
        cache_read=counts["cache_read"],
        cache_write_5m=counts["cache_write_5m"],
        cache_write_1h=counts["cache_write_1h"],
        output=counts["output"],
        reasoning_output=None,
        reported_cache=True,
    )


# --- cost arithmetic ---------------------------------------------------------------------------


def test_anthropic_issue_example_costs_on_sonnet_4_5():
    # 1200 × $3 + 45000 × $0.30 + 3000 × $3.75 + 800 × $15, per million.
    call = normalize_usage(
        {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        }
    )

    cost = call_cost(call, price("claude-sonnet-4-5-20250929"))

    assert cost == CostBreakdown(
        uncached_input=D("0.0036"),
        cache_read=D("0.0135"),
        cache_write_5m=D("0.01125"),
        cache_write_1h=D("0"),
        output=D("0.012"),
        long_context=False,
    )
    assert cost.total == D("0.04035")
    # Without the cache: 49200 × $3 + 800 × $15.
    assert no_cache_cost(call, price("claude-sonnet-4-5")) == D("0.1596")
    assert cache_savings(call, price("claude-sonnet-4-5")) == D("0.11925")


def test_a_one_hour_write_never_read_makes_the_cache_cost_money():
    # Opus 4.5: 100 × $5 + 10000 × $10 (2× input) + 2000 × $25.
    call = usage(uncached_input=100, cache_write_1h=10_000, output=2000)

    cost = call_cost(call, price("claude-opus-4-5"))

    assert cost.cache_write_1h == D("0.1")
    assert cost.total == D("0.1505")
    assert no_cache_cost(call, price("claude-opus-4-5")) == D("0.1005")
    assert cache_savings(call, price("claude-opus-4-5")) == D("-0.05")


def test_above_200k_input_the_whole_request_bills_at_the_premium_rates():
    # 200,001 input tokens on Sonnet 4.5: $6 input, $0.60 read, $22.50 output.
    call = usage(uncached_input=10_000, cache_read=190_001, output=1000)

    cost = call_cost(call, price("claude-sonnet-4-5"))

    assert cost.long_context is True
    assert cost.uncached_input == D("0.06")
    assert cost.cache_read == D("0.1140006")
    assert cost.output == D("0.0225")
    assert cost.total == D("0.1965006")
    assert no_cache_cost(call, price("claude-sonnet-4-5")) == D("1.200006") + D("0.0225")


def test_exactly_200k_input_stays_at_the_base_rates():
    call = usage(uncached_input=10_000, cache_read=190_000, output=1000)

    cost = call_cost(call, price("claude-sonnet-4-5"))

    assert cost.long_context is False
    assert cost.total == D("0.03") + D("0.057") + D("0.015")


def test_long_context_writes_bill_at_the_premium_write_rates():
    # Sonnet 4.5 on the 1M beta above 200k: $6 input, $7.50 5m write, $12 1h write, $22.50 output.
    call = usage(uncached_input=1000, cache_write_5m=150_000, cache_write_1h=60_000, output=4000)

    cost = call_cost(call, price("claude-sonnet-4-5"))

    assert (cost.uncached_input, cost.cache_write_5m, cost.cache_write_1h, cost.output) == (
        D("0.006"),
        D("1.125"),
        D("0.72"),
        D("0.09"),
    )
    assert cost.total == D("1.941")


def test_haiku_5_5_bills_a_prompt_over_100k_entirely_at_the_higher_band():
    small = call_cost(usage(uncached_input=100_000, output=1_000), price("claude-haiku-5-5"))
    large = call_cost(usage(uncached_input=100_001, output=1_000), price("claude-haiku-5-5"))
    assert (small.long_context, small.total) == (False, D("0.0105"))
    assert large.long_context is True
    assert large.total == D("100001") * D("0.50") / 10**6 + D("1000") * D("2.50") / 10**6


def test_flat_rate_1m_models_pay_no_premium_above_200k():
    cost = call_cost(usage(uncached_input=800_000, output=1_000), price("claude-opus-4-6"))
    assert cost.long_context is False
    assert cost.total == D("4") + D("0.025")


def test_a_model_without_a_long_context_tier_never_pays_a_premium():
    call = usage(uncached_input=300_000, output=1_000_000)

    cost = call_cost(call, price("gpt-4.1"))

    assert cost.long_context is False
    assert cost.total == D("0.6") + D("8")


def test_openai_chat_costs_on_gpt_5_with_reasoning_billed_as_output():
    call = normalize_usage(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1920},
            "completion_tokens_details": {"reasoning_tokens": 128},
        }
    )

    cost = call_cost(call, price("gpt-5-2025-08-07"))

    # 86 × $1.25 + 1920 × $0.125 + 300 × $10.
    assert (cost.uncached_input, cost.cache_read, cost.output) == (
        D("0.0001075"),
        D("0.00024"),
        D("0.003"),
    )
    assert cost.total == D("0.0033475")
    assert no_cache_cost(call, price("gpt-5")) == D("0.0055075")


def test_openai_responses_costs_on_gpt_4o_mini():
    call = normalize_usage(
        {
            "input_tokens": 1_000_000,
            "input_tokens_details": {"cached_tokens": 500_000},
            "output_tokens": 100_000,
        }
    )

    # 500k × $0.15 + 500k × $0.075 + 100k × $0.60.
    assert call_cost(call, price("gpt-4o-mini")).total == D("0.1725")


def test_without_a_write_surcharge_written_tokens_bill_as_input():
    # An OTel record for an OpenAI model that reports creation tokens: no 1.25× on gpt-4.1.
    call = usage("otel", uncached_input=2000, cache_write_5m=1000)

    cost = call_cost(call, price("gpt-4.1"))

    assert cost.cache_write_5m == D("0.002")
    assert cost.total == D("0.006")
    assert cache_savings(call, price("gpt-4.1")) == 0


def test_a_dated_snapshot_with_its_own_row_keeps_its_own_price():
    call = usage("openai_chat", uncached_input=1_000_000, output=1_000_000)

    assert call_cost(call, price("gpt-4o-2024-05-13")).total == D("20")
    assert call_cost(call, price("gpt-4o-2024-08-06")).total == D("12.50")


def test_costs_are_exact_whatever_the_thread_decimal_context():
    call = usage(uncached_input=123_456_789, cache_read=987_654_321, output=55_555)

    with localcontext() as ctx:
        ctx.prec = 3
        cost = call_cost(call, price("claude-3-5-haiku"))

    # 123456789 × 0.80 + 987654321 × 0.08 + 55555 × 4, per million: no digit lost to prec=3.
    assert (cost.uncached_input, cost.cache_read, cost.output) == (
        D("98.7654312"),
        D("79.01234568"),
        D("0.22222"),
    )
    assert cost.total == D("177.99999688")


# --- model id resolution -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("CLAUDE-SONNET-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("o3-2025-04-16", "o3"),
        ("gpt-5.2-2025-12-11", "gpt-5.2"),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("global.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5"),
        ("us-gov.anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
        (
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-20250514-v1:0",
            "claude-sonnet-4",
        ),
        (
            "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "claude-sonnet-4-5",
        ),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-6", "claude-opus-4-6"),
        (
            "projects/p/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001",
            "claude-haiku-4-5",
        ),
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4o-audio-preview", None),
        ("gpt-4o-mini-tts", None),
        ("claude-sonnet", None),
        ("llama-3.1-70b", None),
        ("arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3", None),
        ("", None),
    ],
)
def test_model_ids_resolve_to_their_catalogue_row(model_id, expected):
    assert resolve_model(model_id, SEED_IDS) == expected


def test_a_snapshot_row_wins_over_its_family_for_every_spelling():
    known = ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]

    assert resolve_model("claude-sonnet-4-5-20250929", known) == "claude-sonnet-4-5-20250929"
    assert resolve_model("claude-sonnet-4-5@20250929", known) == "claude-sonnet-4-5-20250929"
    assert (
        resolve_model("us.anthropic.claude-sonnet-4-5-20250929-v1:0", known)
        == "claude-sonnet-4-5-20250929"
    )
    assert resolve_model("claude-sonnet-4-5-20251231", known) == "claude-sonnet-4-5"


def test_a_vertex_version_that_is_not_a_date_is_dropped():
    known = ["claude-sonnet-4-5", "claude-sonnet-4-5-v2"]
    # "@v2" is no snapshot date: the family prices it, not a row that happens to be "-v2"
    assert resolve_model("claude-sonnet-4-5@v2", known) == "claude-sonnet-4-5"
    # the id is cut at its first "@": whatever follows is the version
    assert resolve_model("claude-sonnet-4-5@20250929@x", known) == "claude-sonnet-4-5"


def test_resolution_returns_the_catalogue_spelling():
    assert resolve_model("gpt-4o-2024-08-06", ["GPT-4o"]) == "GPT-4o"


def test_an_unknown_model_has_no_price_rather_than_a_zero_one():
    assert find_price("mistral-large-2411", SEED_CATALOGUE) is None


# --- the seed catalogue ------------------------------------------------------------------------


def test_seed_catalogue_ids_are_unique_and_resolve_to_themselves():
    assert len(SEED_IDS) == len(set(SEED_IDS))
    for model in SEED_IDS:
        assert resolve_model(model, SEED_IDS) == model


def test_every_seed_family_is_a_seed_row():
    for row in SEED_CATALOGUE:
        assert row.family in SEED_IDS


@pytest.mark.parametrize(
    "row", [r for r in SEED_CATALOGUE if r.provider == "anthropic"], ids=lambda r: r.model
)
def test_anthropic_rows_use_the_cache_multipliers_at_every_tier(row):
    # Writes are always 1.25x (5m) and 2x (1h) of input; reads 0.1x, or less on the models
    # that read cheaper (Opus 5.5, Sonnet 5.5, Fable/Mythos 5.1).
    for rates in (row.base, row.long_context):
        if rates is None:
            continue
        assert 0 < rates.cache_read <= rates.input * D("0.1")
        assert rates.cache_write_5m == rates.input * D("1.25")
        assert rates.cache_write_1h == rates.input * 2
    if row.long_context is not None:
        assert row.long_context_threshold in (100_000, 200_000)
        assert row.long_context.input > row.input
        assert row.long_context.output > row.output


@pytest.mark.parametrize(
    "row", [r for r in SEED_CATALOGUE if r.provider == "openai"], ids=lambda r: r.model
)
def test_openai_rows_have_no_write_charge_and_cached_at_most_input(row):
    assert row.cache_write_5m is None
    assert row.cache_write_1h is None
    assert row.cache_read <= row.input


@pytest.mark.parametrize(
    ("model", "window", "input", "output", "cache_read"),
    [
        ("claude-sonnet-4-5", 200_000, "3", "15", "0.30"),
        (
            "claude-opus-4-6",
            200_000,  # 1M is opt-in (max_window_tokens)
            "5",
            "25",
            "0.50",
        ),
        ("claude-sonnet-5-5", 1_000_000, "2", "10", "0.10"),
        ("claude-opus-5-5", 1_000_000, "4", "20", "0.20"),
        ("claude-haiku-5-5", 1_000_000, "0.10", "0.50", "0.01"),
        ("claude-opus-4-1", 200_000, "15", "75", "1.50"),
        ("claude-haiku-4-5", 200_000, "1", "5", "0.10"),
        ("claude-3-5-haiku", 200_000, "0.80", "4", "0.08"),
        ("gpt-5", 400_000, "1.25", "10", "0.125"),
        ("gpt-5-mini", 400_000, "0.25", "2", "0.025"),
        ("gpt-4.1", 1_047_576, "2", "8", "0.50"),
        ("gpt-4o", 128_000, "2.50", "10", "1.25"),
        ("o4-mini", 200_000, "1.10", "4.40", "0.275"),
    ],
)
def test_seed_prices_match_the_list_prices(model, window, input, output, cache_read):
    row = price(model)

    assert (row.window_tokens, row.input, row.output, row.cache_read) == (
        window,
        D(input),
        D(output),
        D(cache_read),
    )


def test_sonnet_4_5_write_prices_match_the_anthropic_docs_example():
    # provider-usage.md: $3 base, $3.75 5m, $6 1h, $0.30 read per MTok.
    row = price("claude-sonnet-4-5")

    assert (row.cache_write_5m, row.cache_write_1h) == (D("3.75"), D("6"))
    assert row.long_context is not None
    assert (row.long_context.input, row.long_context.output) == (D("6"), D("22.50"))


# --- the dataclasses' own invariants -----------------------------------------------------------


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


@pytest.mark.parametrize(
    "overrides",
    [
        {"input": 1.0},
        {"output": D("-1")},
        {"cache_read": D("NaN")},
        {"window_tokens": 0},
        {"provider": "google"},
        {"model": ""},
        {"long_context_threshold": 500},
        {"long_context": Rates(D("2"), D("4"), D("1"), None, None)},
        {"long_context_threshold": 0, "long_context": Rates(D("2"), D("4"), D("1"), None, None)},
    ],
)
def test_model_price_refuses_rows_that_break_its_invariants(overrides):
    with pytest.raises(ValueError):
        _row(**overrides)


def test_an_admin_edited_row_prices_like_a_seeded_one():
    row = _row(
        long_context_threshold=500,
        long_context=Rates(D("2"), D("4"), D("1"), None, None),
    )

    assert call_cost(usage(uncached_input=500, output=1_000_000), row).total == D("2.0005")
    assert call_cost(usage(uncached_input=501, output=1_000_000), row).total == D("4.001002")
