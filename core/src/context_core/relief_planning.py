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
    that cannot describe a policy (thresholds outside (0, 1], prune above summarize, a
    hysteresis outside [0, 1], a window no larger than the reserve, negative
    counts).
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
    # The same default as telemetry.policy_rules.PolicyValues (see `target_pressure`).
    relief_hysteresis: float = 0.15
    window_tokens: int = 200_000
    reserved_output_tokens: int = 16_000

    def __post_init__(self) -> None:
        if not 0 < self.prune_threshold <= 1 or not 0 < self.summarize_threshold <= 1:
            raise ValueError("thresholds must lie in (0, 1]")
        if self.prune_threshold > self.summarize_threshold:
            raise ValueError(
                "prune_threshold must not exceed summarize_threshold (D4: prune first)"
            )
        if not 0 <= self.relief_hysteresis <= 1:
            raise ValueError("relief_hysteresis must lie in [0, 1]")
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
    def target_pressure(self) -> float:
        """Where automatic relief aims: `relief_hysteresis` below `prune_threshold`, so that a
        relieved session grows for several rounds before it reaches the threshold again (D1:
        each pass costs one cache miss, so passes are few and large). Never below 0."""
        return max(self.prune_threshold - self.relief_hysteresis, 0.0)

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


def next_call_crosses(tokens: int, *, growth_tokens: int, budget_tokens: int) -> bool:
    """True when a request of `tokens` plus one more round of `growth_tokens` would not fit in
    `budget_tokens` (window − reserved output): relief must land before that round does, so it
    starts now, whatever the thresholds say (proactive relief)."""
    return tokens + max(growth_tokens, 0) > budget_tokens


def plan_relief(
    messages: Surface | Sequence[Message],
    *,
    policy: ReliefPolicy,
    mode: Mode = "normal",
    summarizer: Summarizer | None = None,
    calibration: Calibration | None = None,
    context_tokens: int | None = None,
    pricing: CachePricing | None = None,
    growth_tokens: int = 0,
) -> ReliefPlan:
    """Plan relief for the current surface (pass the surface, not the raw log).

    Normal mode (D3, D4): below `prune_threshold` nothing happens, unless the next call is
    expected to cross the window (`tokens_before + growth_tokens` above the budget: relief
    starts before the wall, since a job lands only after the agent's next round). Otherwise the
    plan aims at `target_pressure` (prune_threshold − relief_hysteresis), so a relieved session
    grows for several rounds before it needs relief again: the prune batch (`plan_prune` with
    keep_rounds, the stub spec and prune_exclude_tools) first, then — only when pruning alone
    cannot reach the target — a summary of the largest older span outside the last
    `keep_rounds_verbatim` rounds, in the same plan (one cache miss). The reason says when the
    target is out of reach.

    Worth-it rule (D1, `context_core.economics`), on the plan as a whole since the whole plan
    costs one cache re-write: the plan is skipped (its passes named in `skipped`) when it frees
    less than `prune_min_free_tokens` or cannot pay back its re-write within
    `pricing.horizon_calls`, but only while relief is not needed: at or above
    `summarize_threshold`, or when the next call is expected to cross the window, it runs.

    Forced mode (manual or overflow) ignores the thresholds, the target and the worth-it rule: it
    prunes every eligible result and summarizes whenever a span exists and shrinks. Both modes
    keep every safety rule of the planners: the operations name seqs of `messages`, never split
    a call from its result, and stay valid when messages are appended after them (the tool loop
    in progress is never touched).

    `tokens_before` is `context_tokens` (the projected next request, D6) when given, else the
    calibrated estimate of the surface; reductions use the calibration's slope. Deterministic when
    the summarizer is.
    """
    pricing = pricing or CachePricing()
    calibration = calibration or Calibration()
    items = messages.messages if isinstance(messages, Surface) else tuple(messages)
    forced = mode == "forced"
    tokens_before = (
        context_tokens
        if context_tokens is not None
        else calibration.estimate(sum(m.chars for m in items))
    )
    frame = _Frame(mode, tokens_before, policy.budget_tokens, pricing, policy.prune_min_free_tokens)
    target_tokens = int(policy.target_pressure * frame.budget)
    p_before = frame.pressure(tokens_before)
    crossing = next_call_crosses(
        tokens_before, growth_tokens=growth_tokens, budget_tokens=frame.budget
    )
    if not forced and p_before < policy.prune_threshold and not crossing:
        return frame.plan(
            "nothing",
            f"pressure {p_before:.2f} is below prune_threshold {policy.prune_threshold:.2f}",
        )
    passes = _prune_pass(items, policy, calibration)
    if forced or tokens_before - passes.freed_tokens > target_tokens:
        _summarize_pass(passes, items, policy, calibration, summarizer or ExtractiveSummarizer())
    if not forced and passes.ops:
        p_after = frame.pressure(max(tokens_before - passes.freed_tokens, 0))
        passes.reasons.append(
            f"still at {p_after:.2f}, above the target {policy.target_pressure:.2f}:"
            " the verbatim rounds are too large"
            if tokens_before - passes.freed_tokens > target_tokens
            else f"down to {p_after:.2f}, target {policy.target_pressure:.2f}"
        )
    if not passes.ops:
        return frame.plan("nothing", "; ".join(passes.reasons))
    needed = p_before >= policy.summarize_threshold or crossing
    return _judged_plan(
        frame,
        items,
        passes,
        calibration,
        forced=forced,
        needed=needed,
        crossing=crossing,
        below_summarize=p_before < policy.summarize_threshold,
    )


@dataclass(frozen=True, slots=True)
class _Frame:
    """What every outcome of one plan shares: the mode, the tokens planned on and the budget
    they are measured against, and the pricing that judges the freed tokens and the re-write."""

    mode: Mode
    tokens_before: int
    budget: int
    pricing: CachePricing
    min_free: int

    def pressure(self, tokens: int) -> float:
        return tokens / self.budget

    def plan(
        self,
        action: Action,
        reason: str,
        ops: tuple[Operation, ...] = (),
        freed: int = 0,
        first: int | None = None,
        write: int = 0,
        skipped: tuple[str, ...] = (),
    ) -> ReliefPlan:
        """The plan with these figures; its tokens after are never below zero."""
        after = max(self.tokens_before - freed, 0)
        return ReliefPlan(
            action,
            self.mode,
            reason,
            self.tokens_before,
            after,
            self.pressure(self.tokens_before),
            self.pressure(after),
            first,
            write,
            freed,
            ops,
            skipped,
            self.pricing.assess(freed_tokens=freed, rewrite_tokens=write, min_free=self.min_free),
        )


@dataclass(slots=True)
class _Passes:
    """The passes planned so far: their operations in order, the tokens they free, the first
    index of the planned-on messages they change, and the surface they leave (`current`)."""

    ops: list[Operation]
    reasons: list[str]
    freed_tokens: int
    first: int | None
    current: Sequence[Message]
    summarized: bool = False


def _prune_pass(
    items: Sequence[Message], policy: ReliefPolicy, calibration: Calibration
) -> _Passes:
    """The prune batch (`plan_prune` with keep_rounds, the stub spec and prune_exclude_tools).

    Never splits a call from its result and never touches the last `keep_rounds` rounds
    (`plan_prune`'s invariant); `current` is `items` with the batch applied."""
    prune = plan_prune(
        items,
        keep_rounds=policy.keep_rounds,
        stub=policy.stub_spec,
        exclude_tools=policy.prune_exclude_tools,
    )
    if prune.operation is None or prune.first_changed_index is None:
        return _Passes([], ["no prunable tool results"], 0, None, items)
    freed = calibration.delta(prune.freed_chars)
    return _Passes(
        [prune.operation],
        [f"prune {len(prune.operation.results)} results freeing ~{freed} tokens"],
        freed,
        prune.first_changed_index,
        derive_surface(items, [prune.operation]).messages,
    )


def _summarize_pass(
    passes: _Passes,
    items: Sequence[Message],
    policy: ReliefPolicy,
    calibration: Calibration,
    summarizer: Summarizer,
) -> None:
    """Add a summary of the largest older span of `passes.current` outside the last
    `keep_rounds_verbatim` rounds, when one exists and shrinks (`plan_summarize`).

    The span starts at or before any pruned message that survives, so on the planned-on
    indices the first change is the earlier of the two."""
    plan = plan_summarize(
        passes.current,
        keep_rounds_verbatim=policy.keep_rounds_verbatim,
        summary_max_tokens=policy.summary_max_tokens,
        summarizer=summarizer,
    )
    if plan.operation is None:
        passes.reasons.append(f"no summary: {plan.reason}")
        return
    passes.summarized = True
    passes.ops.append(plan.operation)
    summary_freed = calibration.delta(plan.freed_chars)
    passes.freed_tokens += summary_freed
    span_first = _index_of_seq(items, plan.operation.first_seq)
    passes.first = span_first if passes.first is None else min(passes.first, span_first)
    passes.reasons.append(
        f"summarize {plan.operation.message_count} messages freeing ~{summary_freed} tokens"
    )


def _judged_plan(
    frame: _Frame,
    items: Sequence[Message],
    passes: _Passes,
    calibration: Calibration,
    *,
    forced: bool,
    needed: bool,
    crossing: bool,
    below_summarize: bool,
) -> ReliefPlan:
    """The worth-it rule (D1) on the passes as a whole, which cost one cache re-write (all from
    the first changed message on): skipped (`nothing`, its passes named) when not worth it and
    relief is not needed; forced plans are never judged."""
    final = derive_surface(items, passes.ops)
    write = calibration.delta(
        sum(m.chars for m in final.messages[_surface_index(final.messages, items, passes.first) :])
    )
    figures = frame.pricing.assess(
        freed_tokens=passes.freed_tokens, rewrite_tokens=write, min_free=frame.min_free
    )
    if not forced and not figures.worth_it and not needed:
        passes.reasons.append(f"not worth it yet: {figures.why}")
        skipped = tuple(op.kind for op in passes.ops)
        return frame.plan("nothing", "; ".join(passes.reasons), skipped=skipped)
    if not forced and not figures.worth_it:
        passes.reasons.append(
            "the next call would cross the window"
            if crossing and below_summarize
            else "pressure at summarize_threshold"
        )
    action: Action = "prune+summarize" if passes.summarized else "prune"
    return frame.plan(
        action,
        "; ".join(passes.reasons),
        tuple(passes.ops),
        passes.freed_tokens,
        passes.first,
        write,
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
