"""Compaction economics (D1, D4): hand-computed plans for Anthropic (5m and 1h writes, per-model
read rates) and OpenAI, and the worth-it rule of automatic relief that uses the same figures."""

from __future__ import annotations

from decimal import Decimal

from context_core import (
    CachePricing,
    CacheRates,
    derive_surface,
    net_saving,
    pass_economics,
    plan_relief,
)
from tests.unit.core.test_relief_planning import fixed_transcript, policy

SONNET_45_5M = CacheRates(input=Decimal(3), read=Decimal("0.30"), write=Decimal("3.75"))
SONNET_45_1H = CacheRates(input=Decimal(3), read=Decimal("0.30"), write=Decimal(6))
OPUS_55_5M = CacheRates(input=Decimal(4), read=Decimal("0.20"), write=Decimal(5))
GPT_5 = CacheRates(input=Decimal("1.25"), read=Decimal("0.125"), write=Decimal("1.25"))


def test_anthropic_5_minute_plan_by_hand():
    # premium 60,000 x (3.75 - 0.30) = $0.207; saving 40,000 x 0.30 = $0.012 per call: 17.25 -> 18
    figures = pass_economics(
        freed_tokens=40_000, rewrite_tokens=60_000, rates=SONNET_45_5M, remaining_calls=18
    )
    assert figures.rewrite_cost_usd == Decimal("0.225")
    assert figures.rewrite_premium_usd == Decimal("0.207")
    assert figures.saving_per_call_usd == Decimal("0.012")
    assert figures.break_even_calls == 18 and figures.worth_it
    assert not pass_economics(
        freed_tokens=40_000, rewrite_tokens=60_000, rates=SONNET_45_5M, remaining_calls=17
    ).worth_it


def test_anthropic_1_hour_writes_take_longer_to_pay_back():
    # premium 60,000 x (6 - 0.30) = $0.342 over $0.012 a call: 28.5 -> 29
    figures = pass_economics(
        freed_tokens=40_000, rewrite_tokens=60_000, rates=SONNET_45_1H, remaining_calls=50
    )
    assert figures.rewrite_premium_usd == Decimal("0.342")
    assert figures.break_even_calls == 29


def test_a_cheap_read_rate_makes_freeing_tokens_worth_less():
    # Opus 5.5 reads at $0.20: premium 100,000 x 4.80 = $0.48; saving 10,000 x 0.20 = $0.002
    figures = pass_economics(
        freed_tokens=10_000, rewrite_tokens=100_000, rates=OPUS_55_5M, remaining_calls=200
    )
    assert figures.break_even_calls == 240 and not figures.worth_it
    assert "beyond the ~200 expected" in figures.why


def test_openai_pays_the_rewrite_as_input():
    # premium 50,000 x (1.25 - 0.125) = $0.05625; saving 20,000 x 0.125 = $0.0025: 22.5 -> 23
    figures = pass_economics(
        freed_tokens=20_000, rewrite_tokens=50_000, rates=GPT_5, remaining_calls=30
    )
    assert figures.rewrite_premium_usd == Decimal("0.05625")
    assert figures.break_even_calls == 23 and figures.worth_it


def test_a_pass_under_the_policy_minimum_is_never_worth_it():
    figures = pass_economics(
        freed_tokens=500,
        rewrite_tokens=0,
        rates=SONNET_45_5M,
        remaining_calls=1_000,
        min_free_tokens=600,
    )
    assert figures.break_even_calls == 0 and not figures.worth_it
    assert "under the policy minimum of 600" in figures.why


def test_a_pass_that_frees_nothing_never_pays_back():
    figures = pass_economics(
        freed_tokens=0, rewrite_tokens=1_000, rates=SONNET_45_5M, remaining_calls=1_000
    )
    assert figures.break_even_calls is None and not figures.worth_it


def test_net_saving_is_later_calls_times_the_saving_minus_the_measured_premium():
    # 30 later calls x $0.012 - $0.207 = $0.153
    assert net_saving(
        freed_tokens=40_000, rewrite_tokens=60_000, rates=SONNET_45_5M, later_calls=30
    ) == Decimal("0.153")


def test_relief_defers_a_plan_that_cannot_pay_back_only_until_relief_is_needed():
    surface = derive_surface(fixed_transcript())  # ~3,050 tokens: pressure ~0.87 of 3,500
    nothing_to_prune = policy(keep_rounds=100, summarize_threshold=0.95)
    never = CachePricing(horizon_calls=0)
    plan = plan_relief(surface, policy=nothing_to_prune, pricing=never)
    assert plan.action == "nothing" and plan.skipped == ("summarize",)
    assert "not worth it yet" in plan.reason
    # at summarize_threshold the plan runs whatever it costs
    urgent = plan_relief(surface, policy=policy(keep_rounds=100), pricing=never)
    assert urgent.action == "prune+summarize" and urgent.skipped == ()
    assert "pressure at summarize_threshold" in urgent.reason
    # ...and so it does below it when one more round like the last ones would cross the window
    growth = 3_500 - plan.tokens_before + 1
    crossing = plan_relief(surface, policy=nothing_to_prune, pricing=never, growth_tokens=growth)
    assert crossing.action == "prune+summarize" and "cross the window" in crossing.reason
    short = plan_relief(surface, policy=nothing_to_prune, pricing=never, growth_tokens=growth - 1)
    assert short.action == "nothing"
    generous = plan_relief(
        surface, policy=nothing_to_prune, pricing=CachePricing(horizon_calls=10_000)
    )
    assert generous.action == "prune+summarize"


def test_relief_prices_the_plan_with_the_rates_it_is_given():
    surface = derive_surface(fixed_transcript())
    pricing = CachePricing(rates=SONNET_45_1H, horizon_calls=500)
    plan = plan_relief(surface, policy=policy(summarize_threshold=0.95), pricing=pricing)
    assert plan.action == "prune" and plan.economics is not None
    assert plan.economics.freed_tokens == plan.freed_tokens
    assert plan.economics.rewrite_tokens == plan.cache_write_tokens
    assert plan.economics.rewrite_premium_usd == Decimal(plan.cache_write_tokens) * Decimal(
        "5.70"
    ) / Decimal(1_000_000)
