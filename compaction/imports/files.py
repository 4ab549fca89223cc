"""Which transcript a file is, and the parser for it (pure: paths and bytes, no Django)."""

from __future__ import annotations

import json
import re
from itertools import islice
from pathlib import PurePath
from typing import Any, BinaryIO, Literal, Protocol

from compaction.imports import claude_code, codex
from compaction.imports.reader import as_line, read_frames
from compaction.imports.records import Record
from context_core.line_framing import (
    DEFAULT_MAX_LINE_BYTES,
    Frame,
    FramerState,
    LineFramer,
    Overlong,
)

Format = Literal["claude-code", "codex"]
FORMATS: tuple[Format, ...] = ("claude-code", "codex")
_SNIFF_LINES = 20
_UUID_TAIL = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


class NotATranscript(ValueError):
    """A file that is neither a Claude Code session nor a Codex rollout."""


class Parser(Protocol):
    def feed(self, number: int, text: str) -> list[Record]: ...
    def flush(self, *, final: bool, number: int = 0) -> list[Record]: ...
    def state(self) -> dict[str, Any]: ...


def detect_format(
    handle: BinaryIO, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, end: int | None = None
) -> Format | None:
    """The format of the file from its first lines; None for an empty file (nothing yet).

    Reads at most `_SNIFF_LINES` lines of at most `max_line_bytes` each, and no further than
    that many bytes (a file of one endless line is refused, not read to its end). Raises
    NotATranscript naming the first line that is not a known one by its number only: a refused
    file may be anything (a password file, a secret), so its content is never echoed.
    """
    if end is None:
        end = handle.seek(0, 2)
    limit = min(end, max_line_bytes + _SNIFF_LINES * 4096)
    framer = LineFramer(max_bytes=max_line_bytes, state=FramerState())
    frames: list[Frame | Overlong] = list(
        islice(read_frames(handle, framer, end=limit), _SNIFF_LINES)
    )
    tail = framer.tail() if limit == end else None
    if tail is not None and len(frames) < _SNIFF_LINES:
        frames.append(tail)
    first: str | None = None
    for frame in frames:
        if isinstance(frame, Overlong):
            first = first or f"line {frame.number} is longer than {max_line_bytes} bytes"
            continue
        line = as_line(frame)
        if not line.text.strip():
            continue
        try:
            obj = json.loads(line.text)
        except ValueError:
            obj = None
        if codex.looks_like(obj):
            return "codex"
        if claude_code.looks_like(obj):
            return "claude-code"
        first = first or f"line {line.number} is neither"
    if first is None and framer.discarding:
        first = f"line {framer.number} is longer than {max_line_bytes} bytes"
    if first is None:
        return None
    raise NotATranscript(
        f"not a Claude Code session or a Codex rollout (no known line in the first "
        f"{_SNIFF_LINES}; {first})"
    )


def make_parser(fmt: Format, name: str, state: dict[str, Any] | None) -> Parser:
    """The parser for a file called `name` (a path: its folders say whether a Claude Code file is
    a subagent's, `<session>/subagents/agent-*.jsonl`), resumed from `state` when given."""
    path = PurePath(name)
    stem = path.name.removesuffix(".jsonl")
    if fmt == "codex":
        match = _UUID_TAIL.search(stem)
        return codex.CodexParser(session_hint=match.group(1) if match else stem, state=state)
    kind: claude_code.FileKind = "main"
    parent = ""
    if path.parent.name == "subagents" and stem.startswith("agent-"):
        kind = "compaction" if stem.startswith("agent-acompact") else "subagent"
        parent = path.parent.parent.name
    return claude_code.ClaudeCodeParser(
        session_hint=stem, kind=kind, parent_hint=parent, state=state
    )
