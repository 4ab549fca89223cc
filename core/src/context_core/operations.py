"""Compaction operations: the events that turn the log into the surface.

Each operation records everything derivation needs — the stub texts, the summary text, the
parameters used — so `derive_surface` never calls a model and never re-reads policy. They are
frozen and round-trip through JSON (`to_dict` / `operation_from_dict`) for a database column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

OPERATION_VERSION = 1


@dataclass(frozen=True, slots=True)
class StubSpec:
    """Head and tail sizes of a pruning stub (policy `stub_head_chars`, `stub_tail_chars`)."""

    head_chars: int
    tail_chars: int

    def __post_init__(self) -> None:
        if self.head_chars < 1 or self.tail_chars < 0:
            raise ValueError(
                f"stub needs head_chars >= 1 and tail_chars >= 0, got {self.head_chars}, {self.tail_chars}"
            )

    def to_dict(self) -> dict[str, int]:
        return {"head_chars": self.head_chars, "tail_chars": self.tail_chars}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StubSpec:
        return cls(head_chars=int(data["head_chars"]), tail_chars=int(data["tail_chars"]))


@dataclass(frozen=True, slots=True)
class PrunedResult:
    """One tool result (message `seq`, call `call_id`) and the stub text that replaces its content."""

    seq: int
    call_id: str
    tool_name: str
    original_chars: int
    stub: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "original_chars": self.original_chars,
            "stub": self.stub,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrunedResult:
        return cls(
            seq=int(data["seq"]),
            call_id=str(data["call_id"]),
            tool_name=str(data["tool_name"]),
            original_chars=int(data["original_chars"]),
            stub=str(data["stub"]),
        )


@dataclass(frozen=True, slots=True)
class PruneOperation:
    """Tool results replaced by head+marker+tail stubs in one batch (D3).

    The stub keeps the block type, call id, error flag and position; only the content changes.
    """

    results: tuple[PrunedResult, ...]
    stub_spec: StubSpec
    kind: Literal["prune"] = "prune"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "prune",
            "version": OPERATION_VERSION,
            "stub_spec": self.stub_spec.to_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PruneOperation:
        _check_header(data, "prune")
        return cls(
            results=tuple(PrunedResult.from_dict(r) for r in data["results"]),
            stub_spec=StubSpec.from_dict(data["stub_spec"]),
        )


@dataclass(frozen=True, slots=True)
class SummarizeOperation:
    """The contiguous log span `first_seq..last_seq` (inclusive) replaced by one summary (D4).

    `summary` is the summarizer's text exactly as produced; `summarizer` names who wrote it;
    `message_count` how many surface messages it replaced when planned.
    """

    first_seq: int
    last_seq: int
    summary: str
    summarizer: str
    message_count: int
    kind: Literal["summarize"] = "summarize"

    def __post_init__(self) -> None:
        if self.last_seq < self.first_seq:
            raise ValueError(f"empty span {self.first_seq}..{self.last_seq}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "summarize",
            "version": OPERATION_VERSION,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "summary": self.summary,
            "summarizer": self.summarizer,
            "message_count": self.message_count,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SummarizeOperation:
        _check_header(data, "summarize")
        return cls(
            first_seq=int(data["first_seq"]),
            last_seq=int(data["last_seq"]),
            summary=str(data["summary"]),
            summarizer=str(data["summarizer"]),
            message_count=int(data["message_count"]),
        )


@dataclass(frozen=True, slots=True)
class AgentCompactionOperation:
    """The agent compacted its own context (Claude Code's `compact_boundary`, Codex's
    `compacted`): from `keep_from_seq` on, the log holds what the agent sent after it.

    The log message at `keep_from_seq` is the agent's own summary (Claude Code's
    `isCompactSummary` line, or the first item of Codex's `replacement_history`); derivation hides
    every earlier message except system prompts. The original messages stay in the log.
    `source` names the agent ("claude-code", "codex"), `source_key` the transcript line that said
    so (idempotency), `trigger` "manual" / "auto" / "" (not stated), `summary` the text.
    """

    keep_from_seq: int
    source: str
    source_key: str
    trigger: str
    summary: str
    kind: Literal["agent"] = "agent"

    def __post_init__(self) -> None:
        if self.keep_from_seq < 0:
            raise ValueError(f"keep_from_seq must be >= 0, got {self.keep_from_seq}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "agent",
            "version": OPERATION_VERSION,
            "keep_from_seq": self.keep_from_seq,
            "source": self.source,
            "source_key": self.source_key,
            "trigger": self.trigger,
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentCompactionOperation:
        _check_header(data, "agent")
        return cls(
            keep_from_seq=int(data["keep_from_seq"]),
            source=str(data["source"]),
            source_key=str(data["source_key"]),
            trigger=str(data["trigger"]),
            summary=str(data["summary"]),
        )


Operation: TypeAlias = PruneOperation | SummarizeOperation | AgentCompactionOperation


def _check_header(data: Mapping[str, Any], kind: str) -> None:
    if data.get("kind") != kind:
        raise ValueError(f"not a {kind} operation: kind={data.get('kind')!r}")
    if data.get("version") != OPERATION_VERSION:
        raise ValueError(f"unsupported {kind} operation version {data.get('version')!r}")


def operation_from_dict(data: Mapping[str, Any]) -> Operation:
    """Rebuild an operation from `to_dict()` output; ValueError for an unknown kind or version."""
    kind = data.get("kind")
    if kind == "prune":
        return PruneOperation.from_dict(data)
    if kind == "summarize":
        return SummarizeOperation.from_dict(data)
    if kind == "agent":
        return AgentCompactionOperation.from_dict(data)
    raise ValueError(f"unknown operation kind {kind!r}")
