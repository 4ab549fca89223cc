"""Provider-side compaction and context editing: billing every pass, hand-computed (pure)."""

from __future__ import annotations

from decimal import Decimal as D
from typing import Any

import pytest

from telemetry.errors import FieldError
from telemetry.pricing import SEED_CATALOGUE, billed_cost, billed_no_cache_cost, find_price
from telemetry.provider_context import FLAG_BILLED_ITERATIONS, read_provider_usage
from telemetry.usage import normalize_usage

SONNET = find_price("claude-sonnet-4-5", SEED_CATALOGUE)
GPT5 = find_price("gpt-5", SEED_CATALOGUE)

# An Anthropic response whose request triggered server-side compaction (compact_20260112):
# the compaction pass read 180,000 tokens (170,000 from the cache) and wrote a 3,500-token
# summary; the answer then ran on 23,000 tokens (20,000 written to the cache).
COMPACTED: dict[str, Any] = {
    "input_tokens": 3_000,
    "cache_creation_input_tokens": 20_000,
    "cache_read_input_tokens": 0,
    "output_tokens": 1_200,
    "iterations": [
        {
            "type": "compaction",
            "input_tokens": 10_000,
            "cache_read_input_tokens": 170_000,
            "cache_creation_input_tokens": 0,
            "output_tokens": 3_500,
        },
        {
            "type": "message",
            "input_tokens": 3_000,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 20_000,
            "output_tokens": 1_200,
        },
    ],
}


def read(usage: dict[str, Any], **kwargs: Any) -> Any:
    return read_provider_usage(
        usage,
        normalize_usage(
            usage,
            provider=kwargs.pop("provider", None),
            model=kwargs.pop("model", "claude-sonnet-4-5"),
        ),
        **kwargs,
    )


def test_golden_an_anthropic_compaction_iteration_is_billed_in_full():
    assert SONNET is not None
    provided = read(COMPACTED)
    # The call's context is the final iteration's input: 3,000 + 20,000.
    assert provided.context.context_tokens == 23_000
    assert FLAG_BILLED_ITERATIONS in provided.context.flags
    cost = billed_cost(provided.billed, SONNET)
    # $/MTok: input 3, cache read 0.30, 5-minute write 3.75, output 15.
    assert cost.uncached_input == D("0.039")  # (10,000 + 3,000) × 3
    assert cost.cache_read == D("0.051")  # 170,000 × 0.30
    assert cost.cache_write_5m == D("0.075")  # 20,000 × 3.75
    assert cost.output == D("0.0705")  # (3,500 + 1,200) × 15
    assert cost.total == D("0.2355")
    # The top-level usage alone would have billed $0.102: the compaction pass is $0.1335.
    top_level = billed_cost([normalize_usage(COMPACTED)], SONNET).total
    assert top_level == D("0.102")
    # Without the cache: 180,000 × 3 + 3,500 × 15 + 23,000 × 3 + 1,200 × 15.
    assert billed_no_cache_cost(provided.billed, SONNET) == D("0.6795")


def test_the_compaction_iteration_is_a_provider_compaction_with_tokens_before_and_after():
    (event,) = read(COMPACTED).events
    assert (event.kind, event.key, event.tokens_before, event.tokens_after) == (
        "compaction",
        "iteration:0",
        180_000,
        23_000,
    )
    assert event.detail["summary_output_tokens"] == 3_500


def test_each_pass_is_billed_at_the_tier_its_own_input_selects():
    assert SONNET is not None
    usage = {
        "input_tokens": 30_000,
        "output_tokens": 1_000,
        "iterations": [
            {"type": "compaction", "input_tokens": 250_000, "output_tokens": 4_000},
            {"type": "message", "input_tokens": 30_000, "output_tokens": 1_000},
        ],
    }
    cost = billed_cost(read(usage).billed, SONNET)
    # over 200k: $6 / $22.50 for the compaction pass; the answer at $3 / $15
    assert cost.uncached_input == D("1.5") + D("0.09")
    assert cost.output == D("0.09") + D("0.015")
    assert cost.long_context is True


def test_golden_applied_edits_are_context_edits_with_the_cleared_tokens():
    usage = {
        "input_tokens": 1_200,
        "cache_read_input_tokens": 45_000,
        "cache_creation_input_tokens": 3_000,
        "output_tokens": 800,
    }
    edits = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 8,
                "cleared_input_tokens": 50_000,
            },
            {
                "type": "clear_thinking_20251015",
                "cleared_thinking_turns": 3,
                "cleared_input_tokens": 15_000,
            },
        ]
    }
    tools, thinking = read(usage, context_management=edits).events
    assert (tools.kind, tools.trigger, tools.tokens_before, tools.tokens_after) == (
        "context_edit",
        "clear_tool_uses_20250919",
        99_200,
        49_200,
    )
    assert tools.detail["cleared_tool_uses"] == 8
    assert thinking.detail["cleared_thinking_turns"] == 3 and thinking.tokens_before == 64_200


def test_golden_openai_compact_usage_is_billed_and_its_compaction_item_recorded():
    assert GPT5 is not None
    usage = {
        "input_tokens": 120_000,
        "input_tokens_details": {"cached_tokens": 100_000},
        "output_tokens": 2_000,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 122_000,
    }
    items = [
        {"type": "message", "id": "msg_1"},
        {"type": "compaction", "id": "cmp_001", "encrypted_content": "gAAAA" * 10},
    ]
    provided = read(usage, model="gpt-5", output_items=items)
    # 20,000 × 1.25 + 100,000 × 0.125 + 2,000 × 10 ($/MTok)
    assert billed_cost(provided.billed, GPT5).total == D("0.0575")
    (event,) = provided.events
    assert (event.kind, event.key, event.tokens_before, event.tokens_after) == (
        "compaction",
        "item:cmp_001",
        120_000,
        None,
    )
    assert event.detail["encrypted_chars"] == 50


def test_an_ordinary_call_is_billed_once_and_has_no_events():
    usage = {"input_tokens": 10, "output_tokens": 5}
    provided = read(usage)
    assert provided.billed == (provided.context,) and provided.events == ()


@pytest.mark.parametrize(
    ("usage", "extra", "field"),
    [
        ({**COMPACTED, "iterations": {}}, {}, "usage.iterations"),
        (
            {**COMPACTED, "iterations": [{"type": "message", "output_tokens": 1}]},
            {},
            "usage.iterations.0.input_tokens",
        ),
        (
            {**COMPACTED, "iterations": [{"input_tokens": -1, "output_tokens": 1}]},
            {},
            "usage.iterations.0.input_tokens",
        ),
        (
            {"input_tokens": 1, "output_tokens": 1},
            {"context_management": {"applied_edits": [{"cleared_input_tokens": 1.5}]}},
            "context_management.applied_edits.0.cleared_input_tokens",
        ),
        ({"input_tokens": 1, "output_tokens": 1}, {"output_items": ["x"]}, "output_items.0"),
    ],
)
def test_bad_provider_fields_name_the_field(usage, extra, field):
    with pytest.raises(FieldError) as error:
        read(usage, **extra)
    assert error.value.field == field
