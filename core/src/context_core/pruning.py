"""Pruning (D3): old tool results become head+marker+tail stubs, in one batch."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from context_core.bounding import omission_marker
from context_core.messages import Message, ToolCall, ToolResult
from context_core.operations import PrunedResult, PruneOperation, StubSpec
from context_core.rounds import protected_head_end, split_rounds

# The first line of every stub: what was pruned and how big it was. The omission marker inside
# the stub is the same one `bound_text` uses (D3: one convention).
STUB_HEADER = "[tool result pruned: {tool} returned {chars} chars; head and tail kept]\n"


def make_stub(tool_name: str, text: str, spec: StubSpec) -> str:
    """The stub for a result of `tool_name` whose text is `text`.

    STUB_HEADER, then the first `spec.head_chars` characters, the omission marker and the last
    `spec.tail_chars` characters. When nothing would be omitted, header + the whole text.
    """
    length = len(text)
    header = STUB_HEADER.format(tool=tool_name, chars=length)
    keep = spec.head_chars + spec.tail_chars
    if length <= keep:
        return header + text
    tail = text[length - spec.tail_chars :] if spec.tail_chars else ""
    return header + text[: spec.head_chars] + omission_marker(length - keep) + tail


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """The prune batch for a transcript: `operation` is None when nothing is worth stubbing.

    `freed_chars` is what the batch removes; `first_changed_index` the index of the first message
    it changes (the cache prefix survives up to there).
    """

    operation: PruneOperation | None
    freed_chars: int
    first_changed_index: int | None


def plan_prune(
    messages: Sequence[Message],
    *,
    keep_rounds: int,
    stub: StubSpec,
    exclude_tools: Collection[str] = frozenset(),
) -> PrunePlan:
    """Pick tool results older than the last `keep_rounds` rounds to replace with stubs.

    Never separates a call from its result (only a result's content changes; its block, call id,
    error flag and position stay). Never touches system messages, the first user message, the
    tool loop in progress (a trailing round with a pending call), a result already pruned, a
    result of a tool in `exclude_tools`, or a result whose stub would not be shorter. Never
    mutates `messages`. Deterministic: the batch lists results in transcript order.
    """
    if keep_rounds < 0:
        raise ValueError(f"keep_rounds must be >= 0, got {keep_rounds}")
    rounds = split_rounds(messages)
    protected_from = len(messages)
    if keep_rounds and rounds:
        protected_from = rounds[-min(keep_rounds, len(rounds))].start
    if rounds and rounds[-1].pending:
        protected_from = min(protected_from, rounds[-1].start)
    head_end = protected_head_end(messages)
    names: dict[str, str] = {}
    results: list[PrunedResult] = []
    freed = 0
    first: int | None = None
    for index in range(protected_from):
        message = messages[index]
        if message.role == "assistant":
            for block in message.blocks:
                if isinstance(block, ToolCall):
                    names[block.id] = block.name
            continue
        if index < head_end or not message.is_tool_result_carrier:
            continue
        for block in message.blocks:
            if not isinstance(block, ToolResult) or block.pruned:
                continue
            name = names.get(block.call_id, "unknown")
            if name in exclude_tools:
                continue
            stub_text = make_stub(name, block.text, stub)
            if len(stub_text) >= block.chars:
                continue
            results.append(PrunedResult(message.seq, block.call_id, name, block.chars, stub_text))
            freed += block.chars - len(stub_text)
            if first is None:
                first = index
    if not results:
        return PrunePlan(None, 0, None)
    return PrunePlan(PruneOperation(tuple(results), stub), freed, first)
