"""Summarizing (D4): a contiguous older span becomes one summary message.

The summary message is a **user** message with bare-string content, in both formats, placed where
the span was (after the protected head: system prompt and first user message). A user message is
what every provider accepts mid-conversation (Anthropic merges consecutive user turns; OpenAI
chat templates reject a mid-conversation system message on many endpoints). It carries the seq of
the first message it replaced and `summarizes=(first_seq, last_seq)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from context_core.bounding import bound_text
from context_core.messages import Format, Message, TextBlock, ToolCall, ToolResult
from context_core.operations import SummarizeOperation
from context_core.rounds import protected_head_end, safe_cuts, split_rounds
from context_core.tokens import CHARS_PER_TOKEN

SUMMARY_HEADER = "[Summary of {count} earlier messages (seq {first}-{last}) by {summarizer}]\n"


class Summarizer(Protocol):
    """Writes the summary text of a span. Deterministic summarizers make plans reproducible;
    an LLM-backed one is allowed because the text is stored in the operation (derivation never
    calls it)."""

    @property
    def name(self) -> str: ...

    def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        """Return at most `max_tokens * CHARS_PER_TOKEN` characters summarizing `messages`."""
        ...


def summary_text(operation: SummarizeOperation) -> str:
    """The summary message's full text: SUMMARY_HEADER followed by the stored summary."""
    header = SUMMARY_HEADER.format(
        count=operation.message_count,
        first=operation.first_seq,
        last=operation.last_seq,
        summarizer=operation.summarizer,
    )
    return header + operation.summary


def summary_message(operation: SummarizeOperation, format: Format) -> Message:
    """The surface message that stands for the summarized span (role user, bare string)."""
    return Message(
        role="user",
        blocks=(TextBlock(summary_text(operation)),),
        seq=operation.first_seq,
        format=format,
        content_form="text",
        summarizes=(operation.first_seq, operation.last_seq),
    )


def _flat(text: str, limit: int) -> str:
    """The first `limit` characters of `text` on one line (whitespace runs collapsed)."""
    head = " ".join(text[: limit * 2].split())
    return head if len(head) <= limit else head[: limit - 1] + "\u2026"


def _fit(lines: list[str], budget: int, *, keep_latest: bool) -> tuple[list[str], int]:
    """Keep whole lines within `budget` chars (earliest or latest first); return them and how
    many were dropped."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines) if keep_latest else lines:
        if used + len(line) + 1 > budget:
            break
        kept.append(line)
        used += len(line) + 1
    if keep_latest:
        kept.reverse()
    return kept, len(lines) - len(kept)


@dataclass(frozen=True, slots=True)
class ExtractiveSummarizer:
    """The default summarizer: offline, deterministic, no model.

    Three sections: the user's goals (the head of each user prompt, earliest kept first), each
    tool called with the head of its arguments and of its outcome (latest kept first when over
    budget, with a count of the omitted), and the assistant's latest conclusions (its last
    texts). The whole stays within `max_tokens * CHARS_PER_TOKEN` characters.
    """

    goal_chars: int = 240
    argument_chars: int = 80
    outcome_chars: int = 160
    conclusion_chars: int = 400
    latest_conclusions: int = 3
    name: str = "extractive"

    def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        budget = max(max_tokens, 1) * CHARS_PER_TOKEN
        quarter = budget // 4
        # Lines are built lazily, newest tool calls first, only as many as the budget can hold:
        # a 10,000-message span costs one pass over attributes plus a few dozen lines of text.
        goal_sources: list[Message] = []
        assistants: list[Message] = []
        calls: list[ToolCall] = []
        outcomes: dict[str, ToolResult] = {}
        for message in messages:
            role = message.role
            if role == "assistant":
                assistants.append(message)
                if message.call_ids:
                    calls.extend(b for b in message.blocks if isinstance(b, ToolCall))
                continue
            if message.result_ids:
                for block in message.blocks:
                    if isinstance(block, ToolResult):
                        outcomes[block.call_id] = block
            if role == "user" and len(message.blocks) > len(message.result_ids):
                goal_sources.append(message)

        goals: list[str] = []
        for message in goal_sources:
            text = message.text
            if not text.strip():
                continue
            prefix = "- (earlier summary) " if message.summarizes is not None else "- "
            goals.append(prefix + _flat(text, self.goal_chars))
        goal_kept, goal_dropped = _fit(goals, quarter, keep_latest=False)

        conclusions: list[str] = []
        for message in reversed(assistants):
            if len(conclusions) == self.latest_conclusions:
                break
            text = message.text
            if text.strip():
                conclusions.append("- " + _flat(text, self.conclusion_chars))
        conclusions.reverse()
        conclusion_kept, _ = _fit(conclusions, quarter, keep_latest=True)

        room = max(budget - sum(len(x) + 1 for x in goal_kept + conclusion_kept) - 100, 0)
        tool_kept: list[str] = []
        for call in reversed(calls):
            result = outcomes.get(call.id)
            if result is None:
                outcome = "(no result)"
            else:
                outcome = _flat(result.text, self.outcome_chars)
                if result.is_error:
                    outcome += " [error]"
            line = f"- {call.name}({_flat(call.arguments, self.argument_chars)}) -> {outcome}"
            if len(line) + 1 > room:
                break
            tool_kept.append(line)
            room -= len(line) + 1
        tool_kept.reverse()
        tool_dropped = len(calls) - len(tool_kept)

        sections = ["User goals:", *goal_kept]
        if goal_dropped:
            sections.append(f"- ({goal_dropped} later requests omitted)")
        sections.append("Tool calls:")
        if tool_dropped:
            sections.append(f"- ({tool_dropped} earlier tool calls omitted)")
        sections.extend(tool_kept)
        sections.append("Latest conclusions:")
        sections.extend(conclusion_kept)
        out = "\n".join(sections)
        return bound_text(out, budget) if budget >= 2 else out[:budget]


@dataclass(frozen=True, slots=True)
class SummarizePlan:
    """The span `[start, stop)` (indices) to summarize; `operation` None when there is none, with
    `reason` saying why. `freed_chars` is the span's chars minus the summary message's."""

    operation: SummarizeOperation | None
    start: int
    stop: int
    freed_chars: int
    reason: str


def summary_span(messages: Sequence[Message], *, keep_rounds_verbatim: int) -> tuple[int, int]:
    """The largest span `[start, stop)` that may be summarized (possibly empty).

    It starts after the protected head (leading system messages and the first user message) and
    after any system message; it ends before the last `keep_rounds_verbatim` rounds (and the user
    prompt that opened them) and before the tool loop in progress; both ends are safe cuts, so no
    result is left whose call was summarized away.
    """
    if keep_rounds_verbatim < 0:
        raise ValueError(f"keep_rounds_verbatim must be >= 0, got {keep_rounds_verbatim}")
    n = len(messages)
    rounds = split_rounds(messages)
    head_end = protected_head_end(messages)
    if keep_rounds_verbatim:
        if len(rounds) <= keep_rounds_verbatim:
            return head_end, head_end
        stop = rounds[-keep_rounds_verbatim].start
    else:
        stop = n
    if rounds and rounds[-1].pending:
        stop = min(stop, rounds[-1].start)
    while (
        stop > head_end
        and messages[stop - 1].role == "user"
        and not messages[stop - 1].is_tool_result_carrier
        and messages[stop - 1].summarizes is None
    ):
        stop -= 1
    cuts = safe_cuts(messages)
    while stop > head_end and not cuts[stop]:
        stop -= 1
    start = head_end
    for index in range(head_end, stop):
        if messages[index].role == "system":
            start = index + 1
    while start < stop and not cuts[start]:
        start += 1
    return start, max(start, stop)


def plan_summarize(
    messages: Sequence[Message],
    *,
    keep_rounds_verbatim: int,
    summary_max_tokens: int,
    summarizer: Summarizer,
) -> SummarizePlan:
    """Plan one summary over `summary_span(messages)`.

    Calls `summarizer` once (that is the only non-pure step, and its text is stored in the
    operation). No operation when the span is empty or the summary message would not be smaller
    than the span. Never mutates `messages`.
    """
    start, stop = summary_span(messages, keep_rounds_verbatim=keep_rounds_verbatim)
    if stop <= start:
        return SummarizePlan(None, start, stop, 0, "no older span outside the protected rounds")
    span = messages[start:stop]
    text = summarizer.summarize(span, max_tokens=summary_max_tokens)
    operation = SummarizeOperation(
        first_seq=span[0].seq,
        # A summary inside the span stands for log messages up to its own last seq.
        last_seq=max(m.summarizes[1] if m.summarizes else m.seq for m in span),
        summary=text,
        summarizer=summarizer.name,
        message_count=len(span),
    )
    span_chars = sum(m.chars for m in span)
    freed = span_chars - len(summary_text(operation))
    if freed <= 0:
        return SummarizePlan(None, start, stop, 0, "the summary would not be smaller than its span")
    return SummarizePlan(operation, start, stop, freed, f"summarize messages {start}..{stop - 1}")
