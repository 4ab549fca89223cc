"""The surface: what the model sees next, a pure function of the log and the operations.

Same log and operations ⇒ byte-identical `canonical_json` (D1: a stable prefix is what makes the
prompt cache hit). The surface never carries the log's `cache_control` markers (replayed markers
would exceed the provider's limit of four).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from context_core.bounding import bound_text
from context_core.messages import (
    Block,
    ContentBlock,
    Format,
    Message,
    OpaqueBlock,
    TextBlock,
    ToolCall,
    ToolResult,
    to_anthropic,
    to_openai,
)
from context_core.operations import (
    AgentCompactionOperation,
    Operation,
    PruneOperation,
    SummarizeOperation,
)
from context_core.summarize import summary_message
from context_core.tokens import estimate_tokens


@dataclass(frozen=True, slots=True)
class Surface:
    """The model-visible messages, in order, and their total `chars`."""

    messages: tuple[Message, ...]
    chars: int

    @property
    def tokens(self) -> int:
        """chars // 4 (D6); use a Calibration for a whole-request estimate."""
        return estimate_tokens(self.chars)

    @property
    def format(self) -> Format | None:
        return self.messages[0].format if self.messages else None

    def to_anthropic(self) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
        return to_anthropic(self.messages)

    def to_openai(self) -> list[dict[str, Any]]:
        return to_openai(self.messages)

    def canonical_json(self, format: Format | None = None) -> bytes:
        return canonical_json(self.messages, format=format)


def canonical_json(messages: Surface | Iterable[Message], *, format: Format | None = None) -> bytes:
    """The one byte serialisation of a message list: sorted keys, no whitespace, ASCII only.

    Anthropic: `{"messages": [...], "system": ...}` (system omitted when there is none); OpenAI:
    `{"messages": [...]}`. `format` defaults to the messages' own (Anthropic when empty); another
    format converts, or raises ConversionError when that would lose information.
    """
    items = messages.messages if isinstance(messages, Surface) else tuple(messages)
    fmt = format or (items[0].format if items else "anthropic")
    document: dict[str, Any]
    if fmt == "anthropic":
        system, rendered = to_anthropic(items)
        document = {"messages": rendered}
        if system is not None:
            document["system"] = system
    else:
        document = {"messages": to_openai(items)}
    # ASCII escapes keep every byte valid UTF-8 (lone surrogates, NUL) and the output unambiguous.
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def _strip_content(block: ContentBlock) -> ContentBlock:
    return replace(block, cache_control="") if block.cache_control else block


def _strip_block(block: Block) -> Block:
    if isinstance(block, TextBlock | OpaqueBlock | ToolCall):
        return replace(block, cache_control="") if block.cache_control else block
    if isinstance(block, ToolResult):
        content = block.content
        if isinstance(content, tuple):
            content = tuple(_strip_content(b) for b in content)
        return replace(block, cache_control="", content=content)
    return block


def strip_cache_control(message: Message) -> Message:
    """The message without any `cache_control` marker (blocks, result parts, message keys)."""
    extra = message.extra
    if '"cache_control"' in extra:
        rest = json.loads(extra)
        rest.pop("cache_control", None)
        extra = json.dumps(rest, ensure_ascii=False, separators=(",", ":")) if rest else ""
    return replace(message, blocks=tuple(_strip_block(b) for b in message.blocks), extra=extra)


def _bound_result(block: ToolResult, cap: int) -> ToolResult:
    if block.text_chars <= cap:
        return block
    if isinstance(block.content, str):
        return replace(block, content=bound_text(block.content, cap))
    assert block.content is not None
    # The cap applies to the result's text: its text parts become one bounded part, at the
    # place of the first; other parts (images) stay where they were.
    bounded = TextBlock(bound_text(block.text, cap))
    parts: list[ContentBlock] = []
    placed = False
    for part in block.content:
        if isinstance(part, TextBlock):
            if not placed:
                parts.append(bounded)
                placed = True
        else:
            parts.append(part)
    return replace(block, content=tuple(parts))


def bound_message(message: Message) -> Message:
    """Bound each tool result of `message` by the cap recorded with it (D3); unchanged when no
    cap was recorded or no result exceeds it."""
    if message.bound is None or message.longest_result <= message.bound.max_result_chars:
        return message
    cap = message.bound.max_result_chars
    blocks = tuple(
        _bound_result(b, cap) if isinstance(b, ToolResult) else b for b in message.blocks
    )
    return replace(message, blocks=blocks)


def _apply_stubs(message: Message, stubs: Mapping[str, str]) -> Message:
    blocks = tuple(
        replace(b, content=stubs[b.call_id], pruned=True)
        if isinstance(b, ToolResult) and b.call_id in stubs
        else b
        for b in message.blocks
    )
    return replace(message, blocks=blocks)


def _summary_past(message: Message, cut: int) -> bool:
    """A summary message (of ours) that stands for messages at or after the agent's cut."""
    return message.summarizes is not None and message.summarizes[1] >= cut


def derive_surface(log: Sequence[Message], operations: Iterable[Operation] = ()) -> Surface:
    """Derive the surface from the append-only log and the compaction operations, in order.

    Pure and deterministic; O(len(log) + size of operations), copying only changed messages.
    Each message loses its cache markers and has its tool results bounded by its own recorded
    cap (D3); a prune operation replaces the content of the named results with their stubs; a
    summarize operation replaces the messages whose seq lies in its span with its summary
    message (a later span that covers an earlier summary replaces that summary too); an agent
    compaction hides every message before its `keep_from_seq` except system prompts (the latest
    cut wins: the agent sent its summary and what followed, never the older history). Re-applying
    operations changes nothing: `derive_surface(derive_surface(log, ops).messages, ops)` equals
    `derive_surface(log, ops)`, and so does listing an operation twice. Operations naming seqs
    that are not present change nothing. Never calls a model, never reads policy.
    """
    return _derive(log, operations, ())[0]


def hidden_seqs(log: Sequence[Message], operations: Iterable[Operation] = ()) -> tuple[int, ...]:
    """The seqs of the messages of `log` that `derive_surface(log, operations)` leaves out
    wholly (inside a summary span in force, or before the agent's cut and no system prompt),
    in log order: the one definition of "the surface no longer shows it".

    Only a message's `seq` and `role` (and `summarizes`, which only summaries of ours carry)
    decide it, never its content or the other messages: so `derive_surface` gives the same
    bytes whatever the content of these messages, and a sub-list of `log` gives the same
    answer for each of its messages.
    """
    hidden: list[int] = []
    _derive(log, operations, (), hidden)
    return tuple(hidden)


def derive_surface_at(
    log: Sequence[Message], operations: Iterable[Operation], counts: Sequence[int]
) -> tuple[Surface, tuple[int, ...]]:
    """`derive_surface(log, operations)`, and for each of the ascending `counts` the chars of
    `derive_surface([m for m in log if m.seq < count], operations)`, in the same single pass.

    `log` is in seq order. This is the size of the surface a request saw when the log held
    `count` messages (its surface version, D6), without deriving the surface once per request:
    a shown log message adds its own chars to every prefix that holds it, and each summary of
    ours counts in every prefix (a span not reached yet is appended at the prefix's end).
    """
    return _derive(log, operations, counts)


def _derive(
    log: Sequence[Message],
    operations: Iterable[Operation],
    counts: Sequence[int],
    hidden: list[int] | None = None,
) -> tuple[Surface, tuple[int, ...]]:
    stubs: dict[int, dict[str, str]] = {}
    # (operation, last seq it hides): a span that swallows an earlier summary also hides
    # everything that summary stood for.
    spans: list[tuple[SummarizeOperation, int]] = []
    cut = 0
    for operation in operations:
        if isinstance(operation, AgentCompactionOperation):
            cut = max(cut, operation.keep_from_seq)
        elif isinstance(operation, PruneOperation):
            for result in operation.results:
                stubs.setdefault(result.seq, {})[result.call_id] = result.stub
        else:
            last = operation.last_seq
            kept: list[tuple[SummarizeOperation, int]] = []
            for earlier, earlier_last in spans:
                if operation.first_seq <= earlier.first_seq <= operation.last_seq:
                    last = max(last, earlier_last)
                else:
                    kept.append((earlier, earlier_last))
            spans = [*kept, (operation, last)]
    # Our own summaries of spans wholly before the agent's cut were never sent either.
    spans = sorted((s for s in spans if s[1] >= cut), key=lambda s: s[0].first_seq)
    fmt: Format = log[0].format if log else "anthropic"
    summaries = [summary_message(span, fmt) for span, _ in spans]
    # The chars of the summaries not emitted yet: a prefix ending here appends them.
    pending = [0] * (len(summaries) + 1)
    for i in range(len(summaries) - 1, -1, -1):
        pending[i] = pending[i + 1] + summaries[i].chars
    at: list[int] = []
    next_count = counts[0] if counts else None

    out: list[Message] = []
    chars = 0
    next_span = 0
    covered_to: int | None = None
    for message in log:
        seq = message.seq
        while next_count is not None and next_count <= seq:
            at.append(chars + pending[next_span])
            next_count = counts[len(at)] if len(at) < len(counts) else None
        while next_span < len(spans) and spans[next_span][0].first_seq <= seq:
            _, hides_to = spans[next_span]
            summary = summaries[next_span]
            out.append(summary)
            chars += summary.chars
            covered_to = hides_to if covered_to is None else max(covered_to, hides_to)
            next_span += 1
        if covered_to is not None and seq <= covered_to:
            if hidden is not None:
                hidden.append(seq)
            continue
        if seq < cut and message.role != "system" and not _summary_past(message, cut):
            if hidden is not None:
                hidden.append(seq)
            continue
        if message.marked:
            message = strip_cache_control(message)
        if message.bound is not None and message.longest_result > message.bound.max_result_chars:
            message = bound_message(message)
        replaced = stubs.get(seq)
        if replaced is not None:
            message = _apply_stubs(message, replaced)
        out.append(message)
        chars += message.chars
    for summary in summaries[next_span:]:
        out.append(summary)
        chars += summary.chars
    at.extend([chars] * (len(counts) - len(at)))
    return Surface(tuple(out), chars), tuple(at)
