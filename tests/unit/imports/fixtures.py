"""Transcript fixtures written from the facts of issue 11 (no real user data).

`claude_code_session()` and `codex_rollout()` return JSONL text; the db tests write them to
files. Each fact of the issue appears once, named in a comment where it is built.
"""

from __future__ import annotations

import json
from typing import Any

SESSION = "0d3e5f6a-1111-4222-8333-944455556666"
CODEX_SESSION = "7a8b9c0d-aaaa-4bbb-8ccc-dddddddddddd"
MODEL = "claude-sonnet-4-5-20250929"


def _usage(inp: int, read: int, write: int, out: int) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
        "output_tokens": out,
        "service_tier": "standard",
    }


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj) + "\n"


def user(uuid: str, content: Any, *, parent: str | None = None, **extra: Any) -> str:
    return _line(
        {
            "type": "user",
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": extra.pop("session", SESSION),
            "timestamp": extra.pop("at", "2026-11-30T10:00:00.000Z"),
            "message": {"role": "user", "content": content},
            **extra,
        }
    )


def assistant(
    uuid: str,
    msg_id: str,
    block: dict[str, Any],
    usage: dict[str, Any],
    *,
    request: str | None,
    stop: str | None = None,
    **extra: Any,
) -> str:
    obj: dict[str, Any] = {
        "type": "assistant",
        "uuid": uuid,
        "sessionId": extra.pop("session", SESSION),
        "timestamp": extra.pop("at", "2026-11-30T10:00:01.000Z"),
        "message": {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": extra.pop("model", MODEL),
            "content": [block],
            "stop_reason": stop,
            "usage": usage,
        },
        **extra,
    }
    if request is not None:
        obj["requestId"] = request
    return _line(obj)


def claude_code_session(*, truncated: bool = True) -> str:
    lines = [
        _line({"type": "summary", "summary": "Fix the build", "leafUuid": "x"}),
        # A real prompt starts turn 0.
        user("u1", "Why does the build fail?"),
        # One response written as three lines sharing message.id and requestId; output_tokens
        # grows, so the request's usage is the last line's (out 40), not the sum (5+20+40).
        assistant(
            "a1",
            "msg_1",
            {"type": "thinking", "thinking": "Let me look.", "signature": "sig-AAA=="},
            _usage(10, 1000, 500, 5),
            request="req_1",
        ),
        assistant(
            "a2",
            "msg_1",
            {"type": "text", "text": "Reading the log."},
            _usage(10, 1000, 500, 20),
            request="req_1",
        ),
        assistant(
            "a3",
            "msg_1",
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}},
            _usage(10, 1000, 500, 40),
            request="req_1",
            stop="tool_use",
        ),
        # The result in a following user line (content as blocks, is_error).
        user(
            "u2",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "error: missing dep"}],
                    "is_error": True,
                }
            ],
        ),
        # No requestId (Bedrock/Vertex): message.id keys the request.
        assistant(
            "a4",
            "msg_2",
            {"type": "text", "text": "The dependency is missing."},
            _usage(5, 1500, 100, 30),
            request=None,
            stop="end_turn",
        ),
        # isMeta: not a real prompt, no new turn.
        user("u3", "Caveat: local command output follows.", isMeta=True),
        # Claude Code compacted: the boundary, then the summary line.
        _line(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": "cb1",
                "sessionId": SESSION,
                "timestamp": "2026-11-30T10:05:00.000Z",
                "content": "Conversation compacted",
                "compactMetadata": {"trigger": "auto", "preTokens": 150000},
            }
        ),
        user(
            "u4",
            "This session is being continued from a previous conversation. Summary: the build "
            "fails on a missing dependency.",
            isCompactSummary=True,
        ),
        # A real prompt after the compaction: turn 1.
        user("u5", "Add the dependency then."),
        assistant(
            "a5",
            "msg_3",
            {"type": "text", "text": "Added."},
            _usage(20, 3000, 50, 12),
            request="req_3",
            stop="end_turn",
        ),
        # An inline subagent (older files): isSidechain lines, its own chain.
        user("s1", "Search the repo for the dep.", isSidechain=True),
        assistant(
            "s2",
            "msg_s",
            {"type": "text", "text": "Found in setup.cfg."},
            _usage(3, 0, 800, 9),
            request="req_s",
            stop="end_turn",
            isSidechain=True,
            parentUuid="s1",
        ),
        _line({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}),
        _line({"type": "weird-new-type", "uuid": "w"}),
        "{not json\n",
    ]
    text = "".join(lines)
    if truncated:
        text += '{"type": "user", "uuid": "u9", "message": {"role": "us'
    return text


def subagent_file(name: str = "agent-a1b2c3") -> str:
    return "".join(
        [
            user("sa1", "Find the failing test.", isSidechain=True, agentId="a1b2c3"),
            assistant(
                "sa2",
                "msg_sa",
                {"type": "text", "text": "test_build fails."},
                _usage(4, 0, 900, 15),
                request="req_sa",
                stop="end_turn",
                isSidechain=True,
                agentId="a1b2c3",
            ),
        ]
    )


# The unique requests of `claude_code_session()` and their last-line usage, for the sums.
CLAUDE_REQUESTS = {
    "req_1": _usage(10, 1000, 500, 40),
    "msg_2": _usage(5, 1500, 100, 30),
    "req_3": _usage(20, 3000, 50, 12),
}


def _codex(kind: str, payload: dict[str, Any], at: str = "2026-11-30T11:00:00.000Z") -> str:
    return _line({"timestamp": at, "type": kind, "payload": payload})


def _item(payload: dict[str, Any]) -> str:
    return _codex("response_item", payload)


def _msg(role: str, text: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


def _count(total: dict[str, int], last: dict[str, int] | None, window: int = 272000) -> str:
    info = None
    if last is not None:
        info = {
            "total_token_usage": total,
            "last_token_usage": last,
            "model_context_window": window,
        }
    return _codex("event_msg", {"type": "token_count", "info": info, "rate_limits": {}})


def _tokens(inp: int, cached: int, out: int, reasoning: int) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "reasoning_output_tokens": reasoning,
        "total_tokens": inp + out,
    }


def _plus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a[k] + b[k] for k in a}


CODEX_CALLS = [_tokens(5000, 0, 300, 200), _tokens(5600, 4900, 150, 50), _tokens(3000, 0, 80, 0)]


def codex_rollout() -> str:
    l1, l2, l3 = CODEX_CALLS
    t1 = l1
    t2 = _plus(t1, l2)
    t3 = _plus(t2, l3)
    return "".join(
        [
            _codex(
                "session_meta",
                {
                    "id": CODEX_SESSION,
                    "cwd": "/work/app",
                    "cli_version": "0.63.0",
                    "model_provider": "openai",
                    "originator": "codex_cli_rs",
                    "instructions": None,
                    "git": {
                        "commit_hash": "4f1c2e9a0b7d3e5f6a8b9c0d1e2f3a4b5c6d7e8f",
                        "branch": "fix/tests",
                        "repository_url": "git@github.com:acme/app.git",
                    },
                },
            ),
            _item(_msg("developer", "You are Codex.")),
            _codex(
                "turn_context", {"model": "gpt-5-codex", "effort": "medium", "cwd": "/work/app"}
            ),
            _codex("event_msg", {"type": "user_message", "message": "fix the tests"}),
            _item(_msg("user", "fix the tests")),
            _count({}, None),  # rate limits only: no usage
            _item({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque"}),
            _item(
                {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": json.dumps({"command": ["pytest"]}),
                    "call_id": "call_1",
                }
            ),
            _count(t1, l1),
            _count(t1, l1),  # the same total repeated: not a second call
            _item({"type": "function_call_output", "call_id": "call_1", "output": "1 failed"}),
            _item(_msg("assistant", "One test fails; fixed.")),
            _count(t2, l2),
            _count(t2, l2),
            _codex(
                "compacted",
                {
                    "message": "Summary: the tests were fixed.",
                    "replacement_history": [
                        _msg("user", "fix the tests"),
                        _msg("user", "Summary: the tests were fixed."),
                    ],
                },
            ),
            _codex("event_msg", {"type": "context_compacted"}),
            _codex("turn_context", {"model": "gpt-5-codex", "effort": "medium"}),
            _item(_msg("user", "now run lint")),
            _item(_msg("assistant", "Lint is clean.")),
            _count(t3, l3),
        ]
    )


def codex_without_usage() -> str:
    return "".join(
        [
            _codex("session_meta", {"id": "no-usage-0000", "cwd": "/x"}),
            _codex("turn_context", {"model": "gpt-5"}),
            _item(_msg("user", "hello")),
            _item(_msg("assistant", "hi")),
        ]
    )


# What every message line of a Claude Code transcript carries beside its message (2.x).
CLAUDE_CODE_CONTEXT = {
    "cwd": "/home/dev/src/shop",
    "gitBranch": "feature/checkout",
    "version": "2.0.31",
    "entrypoint": "cli",
    "userType": "external",
    "isSidechain": False,
}
NAMED_SESSION = "5b6c7d8e-2222-4333-8444-955566667777"


def claude_code_named_session() -> str:
    """A session its user named (`/rename`: a `custom-title` line), whose lines carry cwd,
    gitBranch, version and entrypoint; the branch changes midway (the first one is kept)."""
    ctx: dict[str, Any] = {**CLAUDE_CODE_CONTEXT, "session": NAMED_SESSION}
    return "".join(
        [
            user(
                "n1",
                "  Add a   coupon field\nto the checkout form, and validate it server-side "
                "against the promotions table before the order is placed.",
                **ctx,
            ),
            assistant(
                "n2",
                "msg_n1",
                {"type": "text", "text": "Done."},
                _usage(12, 0, 900, 30),
                request="req_n1",
                stop="end_turn",
                **ctx,
            ),
            _line(
                {
                    "type": "custom-title",
                    "customTitle": "Checkout coupons",
                    "sessionId": NAMED_SESSION,
                }
            ),
            user("n3", "now the tests", **{**ctx, "gitBranch": "main"}),
        ]
    )
