"""Pruning, summarizing and relief planning; golden stub and summary texts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_core import (
    CachePricing,
    ExtractiveSummarizer,
    Message,
    PruneOperation,
    ReliefPolicy,
    StubSpec,
    SummarizeOperation,
    ToolResult,
    canonical_json,
    derive_surface,
    make_stub,
    operation_from_dict,
    parse_anthropic,
    parse_openai,
    plan_prune,
    plan_relief,
    plan_summarize,
    split_rounds,
    summary_text,
    validate_transcript,
)


def fixed_transcript(rounds: int = 6, size: int = 2_000) -> list[Message]:
    """A user goal, then `rounds` rounds of one read_file call each, then a conclusion."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Find why the parser drops NUL bytes."}
    ]
    for i in range(rounds):
        items.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading part {i}."},
                    {
                        "type": "tool_use",
                        "id": f"c{i}",
                        "name": "read_file",
                        "input": {"path": f"p{i}.py"},
                    },
                ],
            }
        )
        body = f"line {i}\x00" + "abcdefghij" * (size // 10) + f"end {i}"
        items.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"c{i}", "content": body}],
            }
        )
    items.append(
        {"role": "assistant", "content": "The parser strips NUL in decode(); fix proposed."}
    )
    return parse_anthropic(items, system="You are a careful engineer.")


def test_golden_stub_text():
    assert make_stub("read_file", "HEAD-" + "x" * 100 + "-TAIL", StubSpec(5, 5)) == (
        "[tool result pruned: read_file returned 110 chars; head and tail kept]\n"
        "HEAD-\n[... 100 chars omitted ...]\n-TAIL"
    )
    assert make_stub("grep", "short", StubSpec(5, 5)) == (
        "[tool result pruned: grep returned 5 chars; head and tail kept]\nshort"
    )


def test_golden_prune_of_a_fixed_transcript():
    log = fixed_transcript()
    plan = plan_prune(log, keep_rounds=2, stub=StubSpec(12, 6))
    assert plan.operation is not None
    # Seven rounds: six reads and the closing answer; the last two rounds are kept.
    assert [(r.seq, r.call_id) for r in plan.operation.results] == [
        (3, "c0"),
        (5, "c1"),
        (7, "c2"),
        (9, "c3"),
        (11, "c4"),
    ]
    assert plan.first_changed_index == 3
    assert plan.operation.results[0].stub == (
        "[tool result pruned: read_file returned 2012 chars; head and tail kept]\n"
        "line 0\x00abcde\n[... 1994 chars omitted ...]\njend 0"
    )
    assert plan.operation.results[0].stub.endswith(_expected_stub_body())


def _expected_stub_body() -> str:
    body = "line 0\x00" + "abcdefghij" * 200 + "end 0"
    return body[:12] + f"\n[... {len(body) - 18} chars omitted ...]\n" + body[-6:]


def test_golden_summary_of_a_fixed_transcript():
    log = fixed_transcript(rounds=3, size=400)
    plan = plan_summarize(
        log, keep_rounds_verbatim=1, summary_max_tokens=200, summarizer=ExtractiveSummarizer()
    )
    assert plan.operation is not None
    assert (plan.start, plan.stop) == (2, 8)
    outcome = "abcdefghij" * 15 + "ab\u2026"
    assert summary_text(plan.operation) == (
        "[Summary of 6 earlier messages (seq 2-7) by extractive]\n"
        "User goals:\n"
        "Tool calls:\n"
        f'- read_file({{"path":"p0.py"}}) -> line 0\x00{outcome}\n'
        f'- read_file({{"path":"p1.py"}}) -> line 1\x00{outcome}\n'
        f'- read_file({{"path":"p2.py"}}) -> line 2\x00{outcome}\n'
        "Latest conclusions:\n"
        "- Reading part 0.\n"
        "- Reading part 1.\n"
        "- Reading part 2."
    )
    surface = derive_surface(log, [plan.operation])
    assert [m.role for m in surface.messages] == ["system", "user", "user", "assistant"]
    assert surface.messages[2].summarizes == (2, 7)
    assert surface.messages[2].seq == 2
    validate_transcript(surface.messages)


def test_extractive_summary_stays_within_its_budget():
    log = fixed_transcript(rounds=200, size=500)
    text = ExtractiveSummarizer().summarize(log[2:-3], max_tokens=100)
    assert len(text) <= 400
    assert "earlier tool calls omitted" in text
    assert "p198.py" in text and "p0.py" not in text  # the latest calls are the ones kept


def test_prune_never_touches_excluded_tools_recent_rounds_or_the_first_user_message():
    log = fixed_transcript()
    plan = plan_prune(log, keep_rounds=7, stub=StubSpec(10, 10))
    assert plan.operation is None
    plan = plan_prune(log, keep_rounds=1, stub=StubSpec(10, 10), exclude_tools={"read_file"})
    assert plan.operation is None


def test_prune_skips_the_tool_loop_in_progress():
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "z" * 5000},
    ]
    log = parse_openai(items)
    assert split_rounds(log)[-1].pending == ("b",)
    assert plan_prune(log, keep_rounds=0, stub=StubSpec(10, 10)).operation is None


def policy(**overrides: Any) -> ReliefPolicy:
    base: dict[str, Any] = {
        "keep_rounds": 2,
        "keep_rounds_verbatim": 1,
        "stub_head_chars": 20,
        "stub_tail_chars": 10,
        "prune_min_free_tokens": 100,
        "summary_max_tokens": 100,
        "window_tokens": 4_000,
        "reserved_output_tokens": 500,
    }
    base.update(overrides)
    return ReliefPolicy(**base)


def test_relief_does_nothing_below_the_prune_threshold():
    plan = plan_relief(derive_surface(fixed_transcript()), policy=policy(window_tokens=100_000))
    assert plan.action == "nothing" and plan.operations == ()
    assert "below prune_threshold" in plan.reason


def test_relief_prunes_when_it_is_worth_it_and_stops_below_summarize():
    surface = derive_surface(fixed_transcript())  # ~3,050 tokens of 3,500: pressure ~0.87
    plan = plan_relief(surface, policy=policy(summarize_threshold=0.95))
    assert plan.action == "prune"
    assert plan.first_changed_index == 3
    (operation,) = plan.operations
    assert isinstance(operation, PruneOperation)
    after = derive_surface(surface.messages, plan.operations)
    assert plan.tokens_after == plan.tokens_before - plan.freed_tokens
    assert plan.cache_write_tokens == sum(m.chars for m in after.messages[3:]) // 4
    assert plan.pressure_after < 0.6


def test_relief_skips_a_prune_that_is_not_worth_its_cache_rewrite():
    surface = derive_surface(fixed_transcript())
    stingy = CachePricing(horizon_calls=1)
    plan = plan_relief(surface, policy=policy(summarize_threshold=0.95), pricing=stingy)
    assert plan.action == "nothing"
    assert "not worth it" in plan.reason
    forced = plan_relief(
        surface, policy=policy(summarize_threshold=0.95), pricing=stingy, mode="forced"
    )
    assert forced.operations and isinstance(forced.operations[0], PruneOperation)


def test_relief_summarizes_when_pruning_leaves_pressure_high_and_lands_below_prune():
    surface = derive_surface(fixed_transcript(rounds=12, size=400))
    plan = plan_relief(
        surface, policy=policy(window_tokens=700, reserved_output_tokens=200, keep_rounds=1)
    )
    assert plan.action == "prune+summarize"
    assert [type(o) for o in plan.operations] == [PruneOperation, SummarizeOperation]
    assert plan.pressure_after < 0.6
    after = derive_surface(surface.messages, plan.operations)
    validate_transcript(after.messages)
    assert after.chars < surface.chars
    assert (
        plan_relief(
            after, policy=policy(window_tokens=700, reserved_output_tokens=200, keep_rounds=1)
        ).action
        == "nothing"
    )


def test_context_tokens_from_telemetry_drive_pressure():
    surface = derive_surface(fixed_transcript())
    plan = plan_relief(surface, policy=policy(window_tokens=100_000), context_tokens=80_000)
    assert plan.tokens_before == 80_000
    assert plan.action != "nothing"


def test_operations_round_trip_through_json():
    log = fixed_transcript()
    plan = plan_relief(
        derive_surface(log),
        policy=policy(window_tokens=1_000, reserved_output_tokens=0),
        mode="forced",
    )
    assert plan.operations
    for operation in plan.operations:
        assert operation_from_dict(json.loads(json.dumps(operation.to_dict()))) == operation
    with pytest.raises(ValueError, match="unknown operation kind"):
        operation_from_dict({"kind": "rewrite"})


def test_the_surface_is_byte_stable_and_keeps_result_positions():
    log = fixed_transcript()
    plan = plan_relief(derive_surface(log), policy=policy(summarize_threshold=0.95))
    first = canonical_json(derive_surface(log, plan.operations))
    assert first == canonical_json(derive_surface(fixed_transcript(), plan.operations))
    stubbed = derive_surface(log, plan.operations).messages[3].blocks[0]
    assert isinstance(stubbed, ToolResult) and stubbed.pruned and stubbed.call_id == "c0"


def test_policy_rejects_values_that_cannot_describe_a_policy():
    with pytest.raises(ValueError, match="prune_threshold must not exceed"):
        ReliefPolicy(prune_threshold=0.9, summarize_threshold=0.8)
    with pytest.raises(ValueError, match="window_tokens must exceed"):
        ReliefPolicy(window_tokens=100, reserved_output_tokens=100)
