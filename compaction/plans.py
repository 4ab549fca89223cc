"""The plan of a compaction before it runs (D1, D4): the profile's policy as the planner's rules,
and what compacting now would free, re-write and cost, as the API and the console show it.

Reads only. The run (`compaction.services`) plans with the same rules (`relief_policy`), and
the plan's cache figures come from `compaction.cache_report.session_pricing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any, Literal

from compaction.cache_report import Pricing, session_pricing
from compaction.calibration import compaction_estimate, next_round_tokens, session_calibration
from compaction.models import Surface
from compaction.transcripts import derive
from context_core import (
    ExtractiveSummarizer,
    ReliefPlan,
    ReliefPolicy,
    Summarizer,
    derive_surface,
    plan_relief,
)
from telemetry.models import AgentSession
from telemetry.money import money_text
from telemetry.policy_rules import PolicyValues

# When the window is unknown, forced compaction still needs a budget to report pressure against.
FALLBACK_WINDOW = 200_000


def relief_policy(policy: PolicyValues, window_tokens: int | None) -> ReliefPolicy:
    """The profile's policy as the planner's rules, against the session's window (or the
    fallback window when it is unknown or no larger than the reserved output)."""
    window = (
        window_tokens if window_tokens and window_tokens > policy.reserved_output_tokens else None
    )
    return ReliefPolicy(
        prune_threshold=policy.prune_threshold,
        summarize_threshold=policy.summarize_threshold,
        keep_rounds=policy.keep_rounds,
        keep_rounds_verbatim=policy.keep_rounds_verbatim,
        stub_head_chars=policy.stub_head_chars,
        stub_tail_chars=policy.stub_tail_chars,
        max_result_chars=policy.max_result_chars,
        prune_min_free_tokens=policy.prune_min_free_tokens,
        prune_exclude_tools=frozenset(policy.prune_exclude_tools),
        summary_max_tokens=policy.summary_max_tokens,
        relief_hysteresis=policy.relief_hysteresis,
        window_tokens=window or max(FALLBACK_WINDOW, policy.reserved_output_tokens + 1),
        reserved_output_tokens=policy.reserved_output_tokens,
    )


def plan_payload(
    session: AgentSession,
    plan: ReliefPlan,
    pricing: Pricing,
    *,
    surface_messages: Sequence[Any] = (),
) -> dict[str, Any]:
    """A plan as the API and the console show it (dollars as strings, exact)."""
    economics = plan.economics
    first: dict[str, Any] | None = None
    if plan.first_changed_index is not None:
        index = plan.first_changed_index
        message = surface_messages[index] if index < len(surface_messages) else None
        leading_system = bool(surface_messages) and surface_messages[0].role == "system"
        first = {
            "index": index,
            "segment": f"message {index - 1 if leading_system else index}",
            "seq": getattr(message, "seq", None),
            "role": getattr(message, "role", None),
            "unchanged_tokens": max(plan.tokens_after - plan.cache_write_tokens, 0),
        }

    def money(value: Decimal | None) -> str | None:
        return None if value is None or not pricing.priced else money_text(value)

    return {
        "session_id": session.external_id,
        "mode": "manual" if plan.mode == "forced" else "auto",
        "action": plan.action,
        "reason": plan.reason,
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after,
        "freed_tokens": plan.freed_tokens,
        "first_change": first,
        "rewrite_tokens": plan.cache_write_tokens,
        "rewrite_cost_usd": money(economics.rewrite_cost_usd if economics else None),
        "rewrite_premium_usd": money(economics.rewrite_premium_usd if economics else None),
        "saving_per_call_usd": money(economics.saving_per_call_usd if economics else None),
        "break_even_calls": economics.break_even_calls if economics else None,
        "remaining_calls": pricing.pricing.horizon_calls,
        "worth_it": bool(economics and economics.worth_it and plan.operations),
        "skipped": list(plan.skipped),
        "model": pricing.model,
        "priced": pricing.priced,
        "write_tier": pricing.tier,
        "rates_per_mtok": {
            "input": str(pricing.pricing.rates.input),
            "read": str(pricing.pricing.rates.read),
            "write": str(pricing.pricing.rates.write),
        }
        if pricing.priced
        else None,
    }


def plan_now(
    session: AgentSession,
    policy: PolicyValues,
    *,
    mode: Literal["manual", "auto"],
    summarizer: Summarizer | None = None,
) -> dict[str, Any] | None:
    """What compacting now would do and cost, without doing it; None without a transcript log.

    Summaries are estimated with the offline extractive summarizer unless one is given (a GET
    must never call a model).
    """
    if not Surface.objects.filter(session=session).exists():
        return None
    log, operations, surface = derive(session)
    tokens = session.projected_tokens
    pricing = session_pricing(session, policy, tokens or surface.tokens)
    calibration = session_calibration(session)
    plan = plan_relief(
        surface,
        policy=relief_policy(policy, session.window_tokens),
        mode="forced" if mode == "manual" else "normal",
        summarizer=summarizer or ExtractiveSummarizer(),
        calibration=calibration,
        context_tokens=tokens,
        pricing=pricing.pricing,
        growth_tokens=next_round_tokens(calibration, surface),
    )
    method = None
    if plan.operations:
        # D6: the estimate the run records, not the planner's freed characters
        after = derive_surface(log, [*operations, *plan.operations])
        estimate = compaction_estimate(
            session, before=surface, after=after, tokens_before=plan.tokens_before
        )
        freed = max(plan.tokens_before - estimate.tokens, 0)
        plan, method = (
            replace(plan, tokens_after=estimate.tokens, freed_tokens=freed),
            estimate.method,
        )
    return {
        **plan_payload(session, plan, pricing, surface_messages=surface.messages),
        "estimate_method": method,
    }
