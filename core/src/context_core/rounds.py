"""Rounds: one assistant message (one LLM call) and the tool results that answer it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from context_core.messages import Message


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
        call_ids = message.call_ids
        j = i + 1
        answered: set[str] = set()
        while j < n and messages[j].is_tool_result_carrier:
            answered.update(messages[j].result_ids)
            j += 1
            if messages[j - 1].format == "anthropic":
                break  # Anthropic: all results of a call live in the one next user message
        pending = tuple(c for c in call_ids if c not in answered) if call_ids else ()
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
        for call_id in message.call_ids:
            call_at[call_id] = index
        for call_id in message.result_ids:
            origin = call_at.get(call_id)
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
            if message.call_ids:
                for k in range(index + 1, n):
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


def round_growth_chars(messages: Sequence[Message], *, lookback: int = 3) -> int:
    """What one more round is expected to add to the next request, in characters: the largest
    of the last `lookback` complete rounds (an assistant message and its results; a round still
    waiting for a result is not complete). 0 without a complete round.

    The largest, not the latest: a session whose results grow keeps growing, and one small
    round must not hide the size of the ones before it.
    """
    complete = [r for r in split_rounds(messages) if not r.pending][-max(lookback, 1) :]
    return max(
        (sum(m.chars for m in messages[r.start : r.stop]) for r in complete),
        default=0,
    )
