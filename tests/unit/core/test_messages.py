"""Messages: parsing, validation errors that name the message, converters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from context_core import (
    ConversionError,
    ThinkingBlock,
    ToolResult,
    TranscriptError,
    canonical_json,
    derive_surface,
    parse_anthropic,
    parse_message,
    parse_openai,
    to_anthropic,
    to_openai,
)

REPO = Path(__file__).resolve().parents[3]


def call(cid: str, name: str = "grep") -> dict[str, object]:
    return {"type": "tool_use", "id": cid, "name": name, "input": {"q": cid}}


def result(cid: str, content: object = "ok") -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": cid, "content": content}


def test_importing_the_core_never_imports_django():
    code = "import context_core, sys; assert 'django' not in sys.modules"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "core" / "src")},
    )
    assert done.returncode == 0, done.stderr


def test_core_imports_only_the_standard_library_and_itself():
    paths = sorted((REPO / "core" / "src" / "context_core").glob("*.py"))
    assert paths, "the core package moved: point this test at it"
    for path in paths:
        for line in path.read_text().splitlines():
            if line.startswith(("import ", "from ")):
                module = line.split()[1]
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or module.startswith("context_core"), (
                    f"{path.name}: {line}"
                )


def test_result_without_its_call_is_rejected_naming_the_message():
    with pytest.raises(TranscriptError) as caught:
        parse_anthropic(
            [{"role": "user", "content": "hi"}, {"role": "user", "content": [result("nope")]}]
        )
    assert caught.value.index == 1 and caught.value.seq == 1
    assert "message 1 (seq 1, role user)" in str(caught.value)
    assert "result without its call" in str(caught.value)


def test_duplicate_call_id_is_rejected():
    with pytest.raises(TranscriptError, match="duplicate tool call id 'a'"):
        parse_anthropic(
            [
                {"role": "assistant", "content": [call("a")]},
                {"role": "user", "content": [result("a")]},
                {"role": "assistant", "content": [call("a")]},
            ]
        )


def test_unknown_role_is_rejected_in_both_formats():
    with pytest.raises(TranscriptError, match="unknown role 'robot'") as caught:
        parse_openai([{"role": "user", "content": "x"}, {"role": "robot", "content": "x"}])
    assert caught.value.index == 1
    with pytest.raises(TranscriptError, match=r"unknown role 'system' \(pass the system prompt"):
        parse_anthropic([{"role": "system", "content": "x"}])


def test_malformed_block_is_rejected():
    with pytest.raises(
        TranscriptError, match="malformed block: block 0: tool_use without a string 'id'"
    ):
        parse_anthropic(
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "x", "input": {}}]}]
        )
    with pytest.raises(TranscriptError, match="not valid JSON"):
        parse_openai(['{"role": "user"'])


def test_anthropic_results_come_first_in_the_one_next_user_message():
    with pytest.raises(TranscriptError, match="results come first"):
        parse_anthropic(
            [
                {"role": "assistant", "content": [call("a"), call("b")]},
                {
                    "role": "user",
                    "content": [result("a"), {"type": "text", "text": "x"}, result("b")],
                },
            ]
        )
    with pytest.raises(TranscriptError, match="'b' \\(seq 0\\) has no result in this message"):
        parse_anthropic(
            [
                {"role": "assistant", "content": [call("a"), call("b")]},
                {"role": "user", "content": [result("a")]},
            ]
        )


def test_openai_calls_are_answered_before_the_next_non_tool_message():
    calls: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ],
    }
    partial: list[dict[str, Any]] = [calls, {"role": "tool", "tool_call_id": "a", "content": "1"}]
    assert len(parse_openai(partial)) == 2  # pending trailing call: valid
    with pytest.raises(
        TranscriptError, match="'b' \\(seq 0\\) has no result before this message"
    ) as caught:
        parse_openai([*partial, {"role": "user", "content": "next"}])
    assert caught.value.index == 2


def test_a_trailing_call_without_result_is_pending_and_valid():
    log = parse_anthropic(
        [{"role": "user", "content": "go"}, {"role": "assistant", "content": [call("a")]}]
    )
    assert [m.seq for m in log] == [0, 1]


def test_a_batch_is_validated_as_the_continuation_of_the_log():
    log = parse_anthropic(
        [{"role": "user", "content": "go"}, {"role": "assistant", "content": [call("a")]}]
    )
    batch = parse_anthropic([{"role": "user", "content": [result("a")]}], preceding=log)
    assert batch[0].seq == 2
    with pytest.raises(TranscriptError) as caught:
        parse_anthropic([{"role": "user", "content": "no results"}], preceding=log)
    assert caught.value.index == 0 and caught.value.seq == 2
    assert "tool call 'a' (seq 1) has no result" in str(caught.value)


def test_raw_keeps_the_original_text_including_nul():
    text = '{"role": "user",   "content": "a\\u0000b \\u00e9"}'
    (message,) = parse_anthropic([text])
    assert message.raw == text
    assert message.text == "a\x00b \u00e9"
    assert parse_message(text, format="anthropic", seq=7).seq == 7


def test_thinking_blocks_stay_opaque_with_their_signature():
    block = {"type": "thinking", "thinking": "hm", "signature": "EqQB\u0000==", "future": [1]}
    (message,) = parse_anthropic(
        [{"role": "assistant", "content": [block, {"type": "text", "text": "x"}]}]
    )
    assert isinstance(message.blocks[0], ThinkingBlock)
    assert to_anthropic([message])[1][0]["content"][0] == block
    with pytest.raises(ConversionError, match="thinking block"):
        to_openai([message])


def test_unknown_fields_and_blocks_survive_the_round_trip():
    items: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "image", "source": {"type": "base64", "data": "QQ=="}}],
            "meta": 1,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "t", "citations": [{"x": 1}]}]},
    ]
    assert to_anthropic(parse_anthropic(items)) == (None, items)
    openai_items: list[dict[str, Any]] = [
        {"role": "developer", "content": "rules", "name": "ops"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]},
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": []},
    ]
    assert to_openai(parse_openai(openai_items)) == openai_items
    with pytest.raises(ConversionError, match="developer"):
        to_anthropic(parse_openai([{"role": "developer", "content": "rules"}]))


def test_surface_strips_cache_control_everywhere():
    marker = {"type": "ephemeral"}
    log = parse_anthropic(
        [
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": marker}]},
            {"role": "assistant", "content": [{**call("a"), "cache_control": marker}]},
            {
                "role": "user",
                "content": [
                    {
                        **result("a", [{"type": "text", "text": "r", "cache_control": marker}]),
                        "cache_control": marker,
                    }
                ],
            },
        ],
        system=[
            {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
    )
    assert b"cache_control" in canonical_json(log)
    surface = derive_surface(log)
    assert b"cache_control" not in canonical_json(surface)
    assert b"cache_control" not in canonical_json(surface, format="openai")
    assert isinstance(surface.messages[3].blocks[0], ToolResult)


def test_openai_transcript_converts_to_anthropic_with_results_merged_first():
    items: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "user", "content": "and?"},
    ]
    system, messages = to_anthropic(parse_openai(items))
    assert system == "be brief"
    assert messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "a",
        "name": "f",
        "input": {"x": 1},
    }
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "1"},
            {"type": "tool_result", "tool_use_id": "b", "content": "2"},
            {"type": "text", "text": "and?"},
        ],
    }
    back = to_openai(parse_anthropic(messages, system=system))
    assert [m["role"] for m in back] == ["system", "user", "assistant", "tool", "tool", "user"]


def test_invalid_json_arguments_refuse_conversion():
    items: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{bad"}}
            ],
        }
    ]
    with pytest.raises(ConversionError, match="not a compact JSON object"):
        to_anthropic(parse_openai(items))


def test_error_flag_refuses_conversion_to_openai():
    log = parse_anthropic(
        [
            {"role": "assistant", "content": [call("a")]},
            {"role": "user", "content": [{**result("a"), "is_error": True}]},
        ]
    )
    with pytest.raises(ConversionError, match="error flag"):
        to_openai(log)


def test_canonical_json_is_sorted_compact_and_ascii():
    log = parse_openai([json.dumps({"role": "user", "content": "\u00e9\x00", "z": 1}, indent=4)])
    assert canonical_json(log) == b'{"messages":[{"content":"\\u00e9\\u0000","role":"user","z":1}]}'
