"""The live loop's pure half: which surface follows the agent's history, and the surface the
client composes itself (last good surface + the messages since, relieved past the window)."""

from __future__ import annotations

import json
from typing import Any

from context_console.client import Surface
from context_console.conversation import Conversation, message_digest
from context_console.local import LocalSurfaces, request_tokens
from context_core import STUB_HEADER, content_digest, log_hash


def tool_round(n: int, size: int) -> list[dict[str, Any]]:
    call = f"toolu_{n:03d}"
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"Step {n}."},
                {"type": "tool_use", "id": call, "name": "t", "input": {"round": n}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call, "content": "x" * size}],
        },
    ]


def history_of(rounds: int, size: int = 200) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for n in range(rounds):
        history += tool_round(n, size)
    return history


def console_surface(system: str, history: list[dict[str, Any]], version: int = 1) -> Surface:
    """A console surface following `history` (system at seq 0), as the console would state it."""
    digests = [content_digest({"role": "system", "content": system})]
    digests += [content_digest(m) for m in history]
    return Surface(
        version, "anthropic", history, system, log_seq=len(history), log_hash=log_hash(digests)
    )


def planned(history: list[dict[str, Any]], system: str = "S") -> Conversation:
    conv = Conversation("anthropic")
    plan = conv.plan(history, system)
    assert plan is not None
    conv.appended(plan, 1)
    return conv


def test_a_surface_follows_the_history_only_at_its_last_seq_with_the_same_log():
    history = history_of(3)
    conv = planned(history)
    last = conv.first_seq("S") + len(history) - 1
    assert conv.follows(console_surface("S", history), last)
    # behind: a part of the history (a round missing) is not the whole of it
    behind = console_surface("S", history[:-2])
    assert not conv.follows(behind, last) and conv.follows_part(behind, last)
    # the same length, another log (another system prompt, a changed result) follows nothing
    assert not conv.follows_part(console_surface("T", history), last)
    changed = [*history[:-1], tool_round(2, 199)[1]]
    assert not conv.follows_part(console_surface("S", changed), last)
    # a console that states no position is never trusted
    unstated = Surface(1, "anthropic", history, "S")
    assert not conv.follows_part(unstated, last)


def test_the_log_hash_is_of_what_was_appended_a_failed_reply_is_replanned_as_the_echo():
    history = history_of(1)
    conv = planned(history)
    reply = {"role": "assistant", "content": [{"type": "text", "text": "done", "citations": []}]}
    conv.reply_appended(reply, 2)
    assert conv.log_hash(len(history) + 1) is not None
    logged_reply = conv.digests[-1]
    assert logged_reply == message_digest(reply)
    # a reply never appended: the next plan holds the caller's echo at its seq instead
    conv = planned(history)
    echo = {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    grown = [*history, echo, {"role": "user", "content": "more"}]
    conv.plan(grown, "S")
    assert conv.digests[len(history) + 1] == message_digest(echo) != logged_reply
    assert conv.log_hash(len(grown)) == log_hash(
        [content_digest({"role": "system", "content": "S"})] + [content_digest(m) for m in grown]
    )


def test_away_the_last_good_surface_is_sent_with_the_messages_since_unchanged():
    history = history_of(6)
    base = console_surface("S", history[:5], version=7)
    local = LocalSurfaces("anthropic")
    composed = local.compose(history, "S", 1, base=base, policy=None, window=None)
    assert composed.local and composed.version == 7
    assert composed.messages == history and composed.system == "S"


def test_past_the_window_the_composition_is_pruned_by_the_core_keeping_every_pair():
    history = history_of(12, size=4_000)
    local = LocalSurfaces("anthropic")
    window = 10_000
    assert request_tokens(history, "S") > window
    composed = local.compose(history, "S", 1, base=None, policy=None, window=window)
    text = json.dumps(composed.messages)
    assert STUB_HEADER.split("{")[0] in text
    assert request_tokens(composed.messages, composed.system) < window
    calls = [
        b["id"]
        for m in composed.messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    results = [
        b["tool_use_id"]
        for m in composed.messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert calls == results and calls[-1] == "toolu_011"
    assert composed.messages[-1] == history[-1]
    # the next call on the same base keeps the relieved prefix byte for byte (D1)
    grown = [*history, {"role": "assistant", "content": "done"}, {"role": "user", "content": "ok"}]
    again = local.compose(grown, "S", 1, base=None, policy=None, window=window)
    assert again.messages[: len(composed.messages)] == composed.messages
    assert again.messages[-2:] == grown[-2:]


def test_an_overflow_error_teaches_the_window_and_how_far_the_estimate_fell_short():
    local = LocalSurfaces("anthropic")
    local.learn("prompt is too long: 12000 tokens > 10000 maximum", sent_tokens=8_000)
    assert local.window(None) == 10_000 and local.window(50_000) == 10_000
    assert local.scale == 1.5
    local.learn("something else", sent_tokens=1)
    assert local.window(None) == 10_000
