"""Pure parts: records from SDK objects, D1 breakpoints, D8 signals, overflow recognition, the
history-to-seq mapping, and the package's own dependency rule."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from context_console.conversation import (
    Conversation,
    add_nudge_anthropic,
    is_overflow,
    place_breakpoints,
    round_signal,
)
from context_console.records import build_record, jsonable

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "context_console"

ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 21,
        "cache_creation_input_tokens": 188086,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 188086, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 393,
    },
}
CHAT_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-5",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920},
        "completion_tokens_details": {"reasoning_tokens": 128},
    },
}
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-5",
    "status": "completed",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 5000,
        "input_tokens_details": {"cached_tokens": 4096},
        "output_tokens": 700,
        "output_tokens_details": {"reasoning_tokens": 512},
        "total_tokens": 5700,
    },
}


@pytest.mark.parametrize(
    ("model_class", "document", "provider"),
    [
        (Message, ANTHROPIC_MESSAGE, "anthropic"),
        (ChatCompletion, CHAT_COMPLETION, "openai_chat"),
        (Response, RESPONSE, "openai_responses"),
    ],
)
def test_a_raw_sdk_response_becomes_a_record_with_its_usage_verbatim(
    model_class, document, provider
):
    response = model_class.construct(**document)  # how the SDKs build responses (lenient)
    record = build_record(response, session_id="s", turn=2, call=1)
    assert record == {
        "session_id": "s",
        "turn": 2,
        "call": 1,
        "model": document["model"],
        "usage": document["usage"],
        "provider": provider,
        "request_id": document["id"],
    }
    # the dict form of the same response gives the same record
    assert build_record(document, session_id="s", turn=2, call=1) == record


def test_a_usage_dict_is_taken_verbatim_and_needs_a_model():
    usage = {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}
    record = build_record(usage, session_id="s", turn=0, call=0, model="m", provider="otel")
    assert record["usage"] == usage and record["provider"] == "otel"
    with pytest.raises(ValueError, match="model"):
        build_record(usage, session_id="s", turn=0, call=0)
    with pytest.raises(ValueError, match="usage"):
        build_record({}, session_id="s", turn=0, call=0, model="m")


def test_jsonable_drops_none_fields_of_sdk_objects():
    message = Message.model_validate(ANTHROPIC_MESSAGE)
    dumped = jsonable(message.content)
    assert dumped == [{"type": "text", "text": "hi"}]


def test_breakpoints_follow_d1_and_never_exceed_four():
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"},
    ]
    before = copy.deepcopy(messages)
    system, out = place_breakpoints("stable", messages, "1h")
    assert messages == before  # not mutated
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert system == [{"type": "text", "text": "stable", "cache_control": marker}]
    assert out[-1]["content"][-1]["cache_control"] == marker
    assert out[0]["content"][-1]["cache_control"] == marker  # the previous round's tail
    assert "cache_control" not in str(out[1])
    tools = [{"name": f"t{i}", "cache_control": {"type": "ephemeral"}} for i in range(3)]
    system, out = place_breakpoints("stable", messages, "5m", tools=tools)
    assert str([system, out]).count("cache_control") == 1  # 3 on tools + 1 = Anthropic's four


def test_the_nudge_goes_after_the_last_breakpoint():
    messages = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}]
    out = add_nudge_anthropic(messages, "re-ground")
    assert out[-1]["content"] == [
        {"type": "text", "text": "x", "cache_control": {}},
        {"type": "text", "text": "re-ground"},
    ]


def test_round_signal_mirrors_the_console_rule():
    policy = {"round_soft_limit": 3, "round_hard_cap": 5, "nudge_text": "n"}
    assert [round_signal(0, r, policy).state for r in range(7)] == [
        "none",
        "none",
        "none",
        "nudge",
        "nudge",
        "stop",
        "stop",
    ]
    assert round_signal(0, 99, {"round_soft_limit": 0, "round_hard_cap": 0}).state == "none"
    assert round_signal(0, 99, None).state == "none"


def _status_error(cls, status, body):
    request = httpx.Request("POST", "http://provider/v1/messages")
    response = httpx.Response(status, json=body, request=request)
    message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
    return cls(message, response=response, body=body)


def test_overflow_errors_are_recognised_and_others_are_not():
    too_long = _status_error(
        anthropic.BadRequestError,
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 215000 tokens > 200000 maximum",
            },
        },
    )
    other = _status_error(
        anthropic.BadRequestError,
        400,
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: field required"},
        },
    )
    context_length = _status_error(
        openai.BadRequestError,
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens.",
                "code": "context_length_exceeded",
            }
        },
    )
    assert is_overflow(too_long) and is_overflow(context_length)
    assert not is_overflow(other)
    assert not is_overflow(
        _status_error(
            anthropic.InternalServerError, 500, {"error": {"message": "prompt is too long"}}
        )
    )


def test_history_positions_map_onto_log_seqs_with_the_system_at_zero():
    conv = Conversation("anthropic")
    history = [{"role": "user", "content": "q"}]
    plan = conv.plan(history, "sys")
    assert plan is not None and plan.seq == 1 and plan.system == "sys" and plan.new_turn
    conv.begin_call(plan)
    conv.appended(plan, 1)
    conv.end_call()
    assert conv.reply_seq(len(history)) == 2
    conv.reply_appended({"role": "assistant", "content": "a"}, 2)
    history += [
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    plan = conv.plan(history, "sys")
    assert plan is not None
    assert plan.seq == 3 and plan.messages == history[2:] and plan.system is None
    assert not plan.new_turn  # a tool result continues the turn
    conv.begin_call(plan)
    assert conv.turn == 0
    history.append({"role": "user", "content": "next question"})
    plan = conv.plan(history, "sys")
    assert plan is not None and plan.new_turn
    assert conv.plan(history[:1], "sys") is None  # a shrunk history is never re-appended
    assert conv.diverged


def test_the_package_imports_nothing_of_the_server():
    forbidden = {"django", "ninja", "telemetry", "compaction", "console", "pydantic"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in forbidden]
    assert offenders == []
