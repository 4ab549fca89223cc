"""The relief planner (D4): nothing, prune, or prune then summarize — and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from context_core.economics import CacheRates, PassEconomics, pass_economics
from context_core.messages import Message
from context_core.operations import Operation, StubSpec
from context_core.pruning import plan_prune
from context_core.summarize import ExtractiveSummarizer, Summarizer, plan_summarize
from context_core.surface import Surface, derive_surface
from context_core.tokens import Calibration

Mode = Literal["normal", "forced"]
Action = Literal["nothing", "prune", "prune+summarize"]


@dataclass(frozen=True, slots=True)
class ReliefPolicy:
    """The policy fields relief uses; the service maps the effective DB policy row onto it.

    Pressure = tokens / (window_tokens − reserved_output_tokens). Raises ValueError on values
    that cannot describe a policy (thresholds outside (0, 1], prune above summarize, a window no
    larger than the reserve, negative counts).
    """

    prune_threshold: float = 0.60
    summarize_threshold: float = 0.80
    keep_rounds: int = 4  # the same default as telemetry.policy_rules.PolicyValues
    keep_rounds_verbatim: int = 4
    stub_head_chars: int = 400
    stub_tail_chars: int = 200
    max_result_chars: int = 50_000
    prune_min_free_tokens: int = 4_000  # the same default as telemetry.policy_rules.PolicyValues
    prune_exclude_tools: frozenset[str] = field(default_factory=frozenset)
    summary_max_tokens: int = 2_000
    window_tokens: int = 200_000
    reserved_output_tokens: int = 16_000

    def __post_init__(self) -> None:
        if not 0 < self.prune_threshold <= 1 or not 0 < self.summarize_threshold <= 1:
            raise ValueError("thresholds must lie in (0, 1]")
        if self.prune_threshold > self.summarize_threshold:
            raise ValueError(
                "prune_threshold must not exceed summarize_threshold (D4: prune first)"
            )
        if self.window_tokens <= self.reserved_output_tokens:
            raise ValueError("window_tokens must exceed reserved_output_tokens")
        for name in (
            "keep_rounds",
            "keep_rounds_verbatim",
            "stub_tail_chars",
            "prune_min_free_tokens",
            "reserved_output_tokens",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("stub_head_chars", "max_result_chars", "summary_max_tokens"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be >= 2")
        if not isinstance(self.prune_exclude_tools, frozenset):
            object.__setattr__(self, "prune_exclude_tools", frozenset(self.prune_exclude_tools))

    @property
    def budget_tokens(self) -> int:
        """What the request may hold: window − reserved output."""
        return self.window_tokens - self.reserved_output_tokens

    @property
    def stub_spec(self) -> StubSpec:
        return StubSpec(self.stub_head_chars, self.stub_tail_chars)


@dataclass(frozen=True, slots=True)
class CachePricing:
    """What the worth-it rule weighs (`context_core.economics`): the session's model's cache
    rates and how many calls are likely to follow (the horizon a pass must pay back within).

    Defaults: Anthropic's relative prices (input 1, read 0.1×, 5-minute write 1.25×; `for_ttl("1h")`
    for 2×) and 50 calls. The service passes the real per-model rates and the session's typical
    remaining calls.
    """

    rates: CacheRates = field(default_factory=CacheRates.relative)
    horizon_calls: int = 50

    @classmethod
    def for_ttl(cls, ttl: Literal["5m", "1h"], *, horizon_calls: int = 50) -> CachePricing:
        """Anthropic prices: a 5-minute write costs 1.25×, a 1-hour write 2× (D7 tiers)."""
        return cls(
            rates=CacheRates.relative(write="2" if ttl == "1h" else "1.25"),
            horizon_calls=horizon_calls,
        )

    def assess(self, *, freed_tokens: int, rewrite_tokens: int, min_free: int) -> PassEconomics:
        return pass_economics(
            freed_tokens=freed_tokens,
            rewrite_tokens=rewrite_tokens,
            rates=self.rates,
            remaining_calls=self.horizon_calls,
            min_free_tokens=min_free,
        )


@dataclass(frozen=True, slots=True)
class ReliefPlan:
    """What to do and why.

    `action` is the stage reached (`prune+summarize` means pruning ran first, D4, even when it
    freed nothing); `operations` holds the non-empty operations to append, in order.
    `first_changed_index` indexes the planned-on messages (None when nothing changes);
    `cache_write_tokens` is what the pass makes the next call write to the cache (everything from
    the first changed message on, after the pass).
    """

    action: Action
    mode: Mode
    reason: str
    tokens_before: int
    tokens_after: int
    pressure_before: float
    pressure_after: float
    first_changed_index: int | None
    cache_write_tokens: int
    freed_tokens: int
    operations: tuple[Operation, ...]
    # Passes the worth-it rule rejected ("prune", "summarize"), and the money of the plan as a
    # whole (its freed tokens and the re-write from the first change on).
    skipped: tuple[str, ...] = ()
    economics: PassEconomics | None = None


def plan_relief(
    messages: Surface | Sequence[Message],
    *,
    policy: ReliefPolicy,
    mode: Mode = "normal",
    summarizer: Summarizer | None = None,
    calibration: Calibration | None = None,
    context_tokens: int | None = None,
    pricing: CachePricing | None = None,
) -> ReliefPlan:
    """Plan relief for the current surface (pass the surface, not the raw log).

    Normal mode, in order (D4): below `prune_threshold` nothing happens. At or above it, the
    prune batch (`plan_prune` with keep_rounds, the stub spec and prune_exclude_tools) runs if it
    is worth it (see CachePricing) — or regardless when pressure is already at or above
    `summarize_threshold`, since a summary costs the same rewrite and loses more. If pressure
    after pruning is still at or above `summarize_threshold`, the largest older span outside the
    last `keep_rounds_verbatim` rounds is summarized, aiming below `prune_threshold`; the reason
    says when it cannot get there. Forced mode (manual or overflow) ignores the thresholds and
    the worth-it rule: it prunes every eligible result and summarizes whenever a span exists and
    shrinks. Both modes keep every safety rule of the planners.

    Worth-it rule (normal mode, `context_core.economics`): a prune or summarize pass is
    skipped (and named in `skipped`) when it frees less than `prune_min_free_tokens` or cannot
    pay back its cache re-write within `pricing.horizon_calls`; prune still runs at
    `summarize_threshold`, and summarize at the provider's wall (pressure 1.0).

    `tokens_before` is `context_tokens` (the projected next request, D6) when given, else the
    calibrated estimate of the surface; reductions use the calibration's slope. Deterministic when
    the summarizer is.
    """
    pricing = pricing or CachePricing()
    calibration = calibration or Calibration()
    items = messages.messages if isinstance(messages, Surface) else tuple(messages)
    forced = mode == "forced"
    total_chars = sum(m.chars for m in items)
    tokens_before = (
        context_tokens if context_tokens is not None else calibration.estimate(total_chars)
    )
    budget = policy.budget_tokens

    def pressure(tokens: int) -> float:
        return tokens / budget

    def result(
        action: Action,
        reason: str,
        ops: tuple[Operation, ...],
        freed: int,
        first: int | None,
        write: int,
    ) -> ReliefPlan:
        after = max(tokens_before - freed, 0)
        return ReliefPlan(
            action,
            mode,
            reason,
            tokens_before,
            after,
            pressure(tokens_before),
            pressure(after),
            first,
            write,
            freed,
            ops,
            tuple(skipped),
            pricing.assess(freed_tokens=freed, rewrite_tokens=write, min_free=0),
        )

    skipped: list[str] = []
    p_before = pressure(tokens_before)
    if not forced and p_before < policy.prune_threshold:
        return result(
            "nothing",
            f"pressure {p_before:.2f} is below prune_threshold {policy.prune_threshold:.2f}",
            (),
            0,
            None,
            0,
        )

    prune = plan_prune(
        items,
        keep_rounds=policy.keep_rounds,
        stub=policy.stub_spec,
        exclude_tools=policy.prune_exclude_tools,
    )
    ops: list[Operation] = []
    reasons: list[str] = []
    freed_tokens = 0
    first: int | None = None
    current: Sequence[Message] = items
    if prune.operation is not None and prune.first_changed_index is not None:
        prune_freed = calibration.delta(prune.freed_chars)
        suffix_chars = sum(m.chars for m in items[prune.first_changed_index :]) - prune.freed_chars
        write = calibration.delta(suffix_chars)
        figures = pricing.assess(
            freed_tokens=prune_freed, rewrite_tokens=write, min_free=policy.prune_min_free_tokens
        )
        worth = figures.worth_it
        urgent = p_before >= policy.summarize_threshold
        if forced or worth or urgent:
            ops.append(prune.operation)
            freed_tokens = prune_freed
            first = prune.first_changed_index
            current = derive_surface(items, [prune.operation]).messages
            why = (
                "forced" if forced else ("worth it" if worth else "pressure at summarize_threshold")
            )
            reasons.append(
                f"prune {len(prune.operation.results)} results freeing ~{prune_freed} tokens ({why})"
            )
        else:
            skipped.append("prune")
            reasons.append(f"prune not worth it: {figures.why}")
    else:
        reasons.append("no prunable tool results")

    p_after_prune = pressure(max(tokens_before - freed_tokens, 0))
    summarized = False
    if forced or p_after_prune >= policy.summarize_threshold:
        plan = plan_summarize(
            current,
            keep_rounds_verbatim=policy.keep_rounds_verbatim,
            summary_max_tokens=policy.summary_max_tokens,
            summarizer=summarizer or ExtractiveSummarizer(),
        )
        summary_figures: PassEconomics | None = None
        if plan.operation is not None and not forced:
            summary_freed = calibration.delta(plan.freed_chars)
            summarized_surface = derive_surface(current, [plan.operation]).messages
            start = _index_of_seq(summarized_surface, plan.operation.first_seq)
            summary_figures = pricing.assess(
                freed_tokens=summary_freed,
                rewrite_tokens=calibration.delta(sum(m.chars for m in summarized_surface[start:])),
                min_free=policy.prune_min_free_tokens,
            )
        # D4: at the provider's wall the pass runs whatever it costs (the safety valve).
        at_wall = p_after_prune >= 1.0
        if (
            plan.operation is not None
            and summary_figures is not None
            and not summary_figures.worth_it
            and not at_wall
        ):
            skipped.append("summarize")
            reasons.append(f"summarize not worth it: {summary_figures.why}")
        elif plan.operation is not None:
            summarized = True
            ops.append(plan.operation)
            summary_freed = calibration.delta(plan.freed_chars)
            freed_tokens += summary_freed
            # The span starts at or before any pruned message that survives, so on the
            # original indices the first change is the earlier of the two.
            span_first = _index_of_seq(items, plan.operation.first_seq)
            first = span_first if first is None else min(first, span_first)
            p_after = pressure(max(tokens_before - freed_tokens, 0))
            note = (
                ""
                if p_after < policy.prune_threshold
                else (
                    f"; still at {p_after:.2f}, above prune_threshold: the verbatim rounds are too large"
                )
            )
            reasons.append(
                f"summarize {plan.operation.message_count} messages freeing ~{summary_freed} tokens{note}"
            )
        else:
            reasons.append(f"no summary: {plan.reason}")
    elif ops:
        reasons.append(
            f"pressure after pruning {p_after_prune:.2f} is below summarize_threshold"
            f" {policy.summarize_threshold:.2f}"
        )

    if not ops:
        return result("nothing", "; ".join(reasons), (), 0, None, 0)
    final = derive_surface(items, ops)
    write_chars = sum(
        m.chars for m in final.messages[_surface_index(final.messages, items, first) :]
    )
    action: Action = "prune+summarize" if summarized else "prune"
    return result(
        action, "; ".join(reasons), tuple(ops), freed_tokens, first, calibration.delta(write_chars)
    )


def _index_of_seq(messages: Sequence[Message], seq: int) -> int:
    for index, message in enumerate(messages):
        if message.seq >= seq:
            return index
    return len(messages)


def _surface_index(new: Sequence[Message], old: Sequence[Message], first: int | None) -> int:
    """Index in `new` of the first message changed at index `first` of `old`."""
    if first is None or first >= len(old):
        return len(new)
    return _index_of_seq(new, old[first].seq)
