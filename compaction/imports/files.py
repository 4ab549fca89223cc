"""Which transcript a file is, and the parser for it (pure: paths and bytes, no Django)."""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any, BinaryIO, Literal, Protocol

from compaction.imports import claude_code, codex
from compaction.imports.reader import read_lines
from compaction.imports.records import Record

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


def detect_format(handle: BinaryIO) -> Format | None:
    """The format of the file from its first lines; None for an empty file (nothing yet).

    Raises NotATranscript naming the first line when no line looks like either format.
    """
    first: str | None = None
    for index, line in enumerate(read_lines(handle)):
        if index >= _SNIFF_LINES:
            break
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
        if first is None:
            first = f"line {line.number}: {line.text[:80]!r}"
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
