"""Relief that keeps up with a fast agent (issue 40): a plan made on a snapshot of the log stays
valid when messages are appended after it, it aims below the prune threshold with hysteresis,
and it prunes then summarizes in one plan when pruning alone cannot reach the target."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from context_core import (
    CachePricing,
    ReliefPolicy,
    derive_surface,
    plan_relief,
    round_growth_chars,
    split_rounds,
)
from tests.unit.core import transcripts as tx
from tests.unit.core.test_properties import _assert_pairing, _log, formats
from tests.unit.core.test_relief_planning import fixed_transcript


@st.composite
def policies(draw: st.DrawFn) -> ReliefPolicy:
    prune = draw(st.sampled_from([0.01, 0.3, 0.6, 1.0]))
    return ReliefPolicy(
        prune_threshold=prune,
        summarize_threshold=draw(st.sampled_from([prune, (prune + 1) / 2, 1.0])),
        relief_hysteresis=draw(st.sampled_from([0.0, 0.15, 0.5, 1.0])),
        keep_rounds=draw(st.integers(0, 6)),
        keep_rounds_verbatim=draw(st.integers(0, 6)),
        stub_head_chars=draw(st.integers(2, 40)),
        stub_tail_chars=draw(st.integers(0, 40)),
        prune_min_free_tokens=draw(st.integers(0, 50)),
        prune_exclude_tools=draw(st.frozensets(st.sampled_from(["grep", "run"]), max_size=1)),
        summary_max_tokens=draw(st.integers(2, 200)),
        window_tokens=draw(st.integers(101, 1_500)),
        reserved_output_tokens=100,
    )


# Every plan pays back: the properties below are about where relief aims, not when it defers.
ALWAYS_WORTH_IT = CachePricing(horizon_calls=10**9)


@given(tx.transcripts(), formats, policies())
def test_a_relief_reaches_its_target_whenever_the_target_is_reachable(t, fmt, policy):
    # and no floor on what it frees: below summarize_threshold a plan that frees less than
    # prune_min_free_tokens is deferred (D1), even one that would reach the target
    # (test_relief_skips_a_prune_that_is_not_worth_its_cache_rewrite)
    policy = replace(policy, prune_min_free_tokens=0)
    surface = derive_surface(_log(t, fmt))
    plan = plan_relief(surface, policy=policy, pricing=ALWAYS_WORTH_IT)
    target = int(policy.target_pressure * policy.budget_tokens)
    # Reachable: everything the planners may do (the forced plan) gets there.
    everything = plan_relief(surface, policy=policy, mode="forced")
    assume(plan.pressure_before >= policy.prune_threshold)
    if everything.tokens_after <= target:
        assert plan.operations or plan.tokens_before <= target
        assert plan.tokens_after <= target, plan.reason
    else:
        assert "above the target" in plan.reason or not plan.operations
    _assert_pairing(derive_surface(surface.messages, plan.operations).messages)


@given(tx.transcripts(), formats, policies())
def test_a_relief_summarizes_only_when_pruning_alone_cannot_reach_the_target(t, fmt, policy):
    surface = derive_surface(_log(t, fmt))
    plan = plan_relief(surface, policy=policy, pricing=ALWAYS_WORTH_IT)
    target = int(policy.target_pressure * policy.budget_tokens)
    kinds = [operation.kind for operation in plan.operations]
    if "summarize" in kinds:
        assert kinds in (["summarize"], ["prune", "summarize"])
        prune_only = [o for o in plan.operations if o.kind == "prune"]
        freed_by_prune = surface.chars - derive_surface(surface.messages, prune_only).chars
        assert plan.tokens_before - freed_by_prune // 4 > target, plan.reason


@given(tx.transcripts(), formats, policies(), st.sampled_from(["normal", "forced"]), st.data())
def test_a_plan_applied_after_later_appends_equals_applying_it_then_appending(
    t, fmt, policy, mode, data
):
    log = _log(t, fmt)
    assume(log)
    cut = data.draw(st.integers(1, len(log)))
    snapshot, appended = log[:cut], log[cut:]
    plan = plan_relief(derive_surface(snapshot), policy=policy, mode=mode, pricing=ALWAYS_WORTH_IT)
    later = derive_surface(log, plan.operations)
    then = derive_surface(snapshot, plan.operations)
    # The operations name only seqs of the snapshot; what followed is appended as it was.
    fresh = derive_surface(log).messages[len(derive_surface(snapshot).messages) :]
    assert [m.seq for m in fresh] == [m.seq for m in appended]
    assert later.messages == then.messages + fresh
    assert later.chars == then.chars + sum(m.chars for m in fresh)
    _assert_pairing(later.messages)


@given(tx.transcripts(), formats)
def test_round_growth_is_the_largest_recent_complete_round(t, fmt):
    messages = derive_surface(_log(t, fmt)).messages
    complete = [r for r in split_rounds(messages) if not r.pending]
    sizes = [sum(m.chars for m in messages[r.start : r.stop]) for r in complete]
    assert round_growth_chars(messages) == max(sizes[-3:], default=0)
    assert round_growth_chars(messages, lookback=1) == (sizes[-1] if sizes else 0)


def test_relief_aims_below_the_prune_threshold_by_the_hysteresis():
    surface = derive_surface(fixed_transcript(rounds=12, size=2_000))
    base: dict[str, Any] = {
        "keep_rounds": 10,
        "keep_rounds_verbatim": 2,
        "stub_head_chars": 20,
        "stub_tail_chars": 10,
        "prune_min_free_tokens": 0,
        "summary_max_tokens": 100,
        "reserved_output_tokens": 500,
        "window_tokens": 10_000,
    }
    # ~6,100 tokens of 9,500: pressure ~0.64, over the prune threshold
    plain = plan_relief(surface, policy=ReliefPolicy(**base, relief_hysteresis=0.0))
    deeper = plan_relief(surface, policy=ReliefPolicy(**base, relief_hysteresis=0.3))
    assert plain.pressure_before >= 0.6
    assert plain.action == "prune" and plain.pressure_after < 0.6
    assert deeper.pressure_after <= 0.3 < plain.pressure_after
    # Pruning the two oldest results stops short of 0.30: the same plan summarizes too, after the prune (D4).
    assert [o.kind for o in deeper.operations] == ["prune", "summarize"]
    assert deeper.action == "prune+summarize" and "target 0.30" in deeper.reason


def test_a_relief_that_cannot_reach_its_target_says_why():
    surface = derive_surface(fixed_transcript(rounds=6, size=2_000))
    policy = ReliefPolicy(
        keep_rounds=2,
        keep_rounds_verbatim=7,  # every round: nothing may be summarized
        prune_min_free_tokens=0,
        window_tokens=2_000,
        reserved_output_tokens=500,
    )
    plan = plan_relief(surface, policy=policy, pricing=ALWAYS_WORTH_IT)
    assert plan.action == "prune" and plan.pressure_after > policy.target_pressure
    assert "no summary" in plan.reason
    assert "above the target 0.45: the verbatim rounds are too large" in plan.reason
