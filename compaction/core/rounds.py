"""Rounds: one assistant message (one LLM call) and the tool results that answer it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compaction.core.messages import Message, ToolCall, ToolResult


@dataclass(frozen=True, slots=True)
class Round:
    """Messages `[start, stop)` of a transcript: an assistant message at `start` and the result
    messages right after it. `pending` lists its calls that have no result yet."""

    start: int
    stop: int
    call_ids: tuple[str, ...]
    pending: tuple[str, ...]


def split_rounds(messages: Sequence[Message]) -> tuple[Round, ...]:
    """Split a transcript into rounds, in order.

    Every assistant message opens a round; the OpenAI tool messages or the Anthropic user message
    of results that follow it belong to it. System messages and user prompts belong to no round.
    O(n); never reorders or copies messages.
    """
    rounds: list[Round] = []
    n = len(messages)
    i = 0
    while i < n:
        message = messages[i]
        if message.role != "assistant":
            i += 1
            continue
        call_ids = tuple(b.id for b in message.blocks if isinstance(b, ToolCall))
        answered: set[str] = set()
        j = i + 1
        while j < n and messages[j].is_tool_result_carrier:
            answered.update(b.call_id for b in messages[j].blocks if isinstance(b, ToolResult))
            j += 1
            if messages[j - 1].format == "anthropic":
                break  # Anthropic: all results of a call live in the one next user message
        pending = tuple(c for c in call_ids if c not in answered)
        rounds.append(Round(i, j, call_ids, pending))
        i = j
    return tuple(rounds)


def safe_cuts(messages: Sequence[Message]) -> list[bool]:
    """`cuts[i]` is True when cutting before message i separates no call from its result.

    Index len(messages) (the end) is always safe. O(n).
    """
    n = len(messages)
    call_at: dict[str, int] = {}
    unsafe_from = [0] * (n + 2)
    for index, message in enumerate(messages):
        for block in message.blocks:
            if isinstance(block, ToolCall):
                call_at[block.id] = index
            elif isinstance(block, ToolResult):
                origin = call_at.get(block.call_id)
                if origin is not None and origin < index:
                    # Cuts origin+1 .. index would split this pair.
                    unsafe_from[origin + 1] += 1
                    unsafe_from[index + 1] -= 1
    cuts: list[bool] = []
    depth = 0
    for i in range(n + 1):
        depth += unsafe_from[i]
        cuts.append(depth == 0)
    # A trailing call still waiting for its result must stay with whatever follows it.
    for index in range(n - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            if any(isinstance(b, ToolCall) for b in message.blocks):
                for k in range(index + 1, n + 1):
                    if k < n:
                        cuts[k] = False
            break
        if not message.is_tool_result_carrier:
            break
    return cuts


def protected_head_end(messages: Sequence[Message]) -> int:
    """Index just past the head no compaction touches: leading system messages and the first
    user message when it opens the conversation (the task statement)."""
    i = 0
    n = len(messages)
    while i < n and messages[i].role == "system":
        i += 1
    if i < n and messages[i].role == "user" and not messages[i].is_tool_result_carrier:
        i += 1
    return i
