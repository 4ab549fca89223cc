"""The transcript viewer's presentation: messages as drawn (roles, text, tool calls and results
named after their call, pruned stubs and summaries marked, long blocks cut), a surface and an
archive ready for the page. Pure: no query, never changes a message."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from compaction.models import Archive
from console.selectors.compaction import ArchivedTranscript, SurfaceRead
from context_core import (
    OMISSION_MARKER,
    STUB_HEADER,
    SUMMARY_HEADER,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)

# A block longer than this is cut in the page (the downloads and the API keep every byte).
SHOWN_BLOCK_CHARS: Final = 20_000

_STUB_START: Final = STUB_HEADER.split("{", 1)[0]
_SUMMARY_START: Final = SUMMARY_HEADER.split("{", 1)[0]
# D3: a result bounded at write time carries the one omission marker
_OMITTED: Final = re.compile(re.escape(OMISSION_MARKER).replace(re.escape("{omitted}"), r"\d+"))


@dataclass(frozen=True)
class ShownBlock:
    """One block of a message as the transcript viewer draws it."""

    kind: Literal["text", "call", "result", "thinking", "other"]
    text: str
    chars: int
    cut: int = 0  # characters left out of `text` (SHOWN_BLOCK_CHARS)
    name: str = ""  # the tool's name (calls and results)
    call_id: str = ""
    pruned: bool = False
    bounded: bool = False
    is_error: bool = False


@dataclass(frozen=True)
class ShownMessage:
    seq: int
    role: str
    blocks: list[ShownBlock]
    chars: int
    summarizes: tuple[int, int] | None = None

    @property
    def is_summary(self) -> bool:
        return self.summarizes is not None


@dataclass(frozen=True)
class ShownSurface:
    """A surface for the viewer: `turn` None is the surface now; `missing` says why there is
    nothing to show."""

    messages: list[ShownMessage] = field(default_factory=list)
    version: int | None = None
    turn: int | None = None
    tokens: int = 0
    chars: int = 0
    missing: str = ""

    @property
    def stubs(self) -> int:
        return sum(1 for m in self.messages for b in m.blocks if b.pruned)

    @property
    def summaries(self) -> int:
        return sum(1 for m in self.messages if m.is_summary)


def _cut(text: str, limit: int | None = SHOWN_BLOCK_CHARS) -> tuple[str, int]:
    if limit is None or len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def _pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments  # OpenAI passes arguments through as the model wrote them


def _shown_block(
    block: Block, tools: dict[str, str], limit: int | None = SHOWN_BLOCK_CHARS
) -> ShownBlock:
    if isinstance(block, TextBlock):
        text, cut = _cut(block.text, limit)
        return ShownBlock("text", text, block.chars, cut)
    if isinstance(block, ToolCall):
        tools[block.id] = block.name
        text, cut = _cut(_pretty_arguments(block.arguments), limit)
        return ShownBlock("call", text, block.chars, cut, name=block.name, call_id=block.id)
    if isinstance(block, ToolResult):
        whole = block.text
        text, cut = _cut(whole, limit)
        return ShownBlock(
            "result",
            text,
            block.chars,
            cut,
            name=tools.get(block.call_id, ""),
            call_id=block.call_id,
            # a surface read back from JSON (an archive) has lost the flag; the header tells
            pruned=block.pruned or whole.startswith(_STUB_START),
            bounded=not block.pruned and _OMITTED.search(whole) is not None,
            is_error=bool(block.is_error),
        )
    if isinstance(block, ThinkingBlock):
        return ShownBlock("thinking", "", block.chars, name=block.kind)
    text, cut = _cut(block.native, limit)
    return ShownBlock("other", text, block.chars, cut, name=block.type)


def shown_messages(
    messages: Iterable[Message], *, limit: int | None = SHOWN_BLOCK_CHARS
) -> list[ShownMessage]:
    """Messages as the viewer draws them: roles, text, calls and results (named after their
    call), pruned stubs and summaries marked. Never changes a message."""
    tools: dict[str, str] = {}
    shown = []
    for message in messages:
        blocks = [_shown_block(block, tools, limit) for block in message.blocks]
        summarizes = message.summarizes
        if summarizes is None and message.text.startswith(_SUMMARY_START):
            summarizes = _summary_span(message.text) or (message.seq, message.seq)
        shown.append(ShownMessage(message.seq, message.role, blocks, message.chars, summarizes))
    return shown


# At most 18 digits a seq: a longer number is no seq, and `int` refuses thousands of digits.
_SUMMARY_SPAN: Final = re.compile(r"\(seq (\d{1,18})-(\d{1,18})\)")


def _summary_span(text: str) -> tuple[int, int] | None:
    found = _SUMMARY_SPAN.search(text.split("\n", 1)[0])
    return (int(found.group(1)), int(found.group(2))) if found else None


def shown_surface(read: SurfaceRead) -> ShownSurface:
    """A surface as the viewer draws it (`missing` kept)."""
    return ShownSurface(
        shown_messages(read.messages),
        version=read.version,
        turn=read.turn,
        tokens=read.tokens,
        chars=read.chars,
        missing=read.missing,
    )


@dataclass(frozen=True)
class ShownArchive:
    archive: Archive
    document: dict[str, Any]
    log: list[ShownMessage]
    surface: list[ShownMessage]
    problem: str = ""


def archive_view(read: ArchivedTranscript, *, whole_seq: int | None = None) -> ShownArchive:
    """An archive for the transcript viewer: its log and the surface as it was. With
    `whole_seq`, only that log message, uncut (a block longer than SHOWN_BLOCK_CHARS is cut
    on the archive page and read whole here). An archive is shown even when it no longer
    parses (`problem`)."""
    if read.problem:
        return ShownArchive(read.archive, read.document, [], [], problem=read.problem)
    if whole_seq is not None:
        chosen = [m for m in read.log if m.seq == whole_seq]
        return ShownArchive(read.archive, read.document, shown_messages(chosen, limit=None), [])
    return ShownArchive(
        read.archive, read.document, shown_messages(read.log), shown_messages(read.surface)
    )
