"""What a transcript parser produces: plain records, in file order, ready to store.

Every record names its session by the external id it will have in the console. Parsers assign
log sequence numbers themselves (they see every message in order), so storing is idempotent on
`seq` and a re-read line lands on the same position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Relation = Literal["", "subagent", "sidechain", "compaction"]


@dataclass(frozen=True, slots=True)
class SessionSeen:
    """A session the file holds: the main one, or a child (`parent` is its parent's id)."""

    session: str
    parent: str = ""
    relation: Relation = ""
    agent_id: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What the file says about a session (`telemetry.session_meta` keys): cwd, branch, the
    agent's version, its title or first prompt..."""

    session: str
    metadata: dict[str, str]
    line: int


@dataclass(frozen=True, slots=True)
class LogAppend:
    """One message for the session's log, in the log's `format`, at position `seq`."""

    session: str
    seq: int
    format: Literal["anthropic", "openai"]
    message: dict[str, Any]
    line: int


@dataclass(frozen=True, slots=True)
class CallSeen:
    """One LLM call (one request) with its provider usage, verbatim in `provider`'s shape.

    `log_messages` is how many log messages the request held (the reply starts there).
    """

    session: str
    turn: int
    call: int
    request_id: str | None
    model: str
    provider: str
    usage: dict[str, Any]
    at: str | None
    window_tokens: int | None
    log_messages: int
    line: int
    # The provider's cache diagnostics of the response, verbatim (Claude Code writes Anthropic's
    # `message.diagnostics`): the record's `diagnostics` (`telemetry.cache_diagnostics`).
    diagnostics: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CompactionSeen:
    """The agent compacted its context: the log from `keep_from_seq` on is what it sent after."""

    session: str
    source: str
    source_key: str
    trigger: str
    tokens_before: int | None
    summary: str
    keep_from_seq: int
    at: str | None
    turn: int | None
    line: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokensAfter:
    """The first call after a compaction measured what the agent sent: its `tokens_after`."""

    session: str
    source_key: str
    tokens_after: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line not imported, and why (malformed, unknown type, truncated, ...)."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something the import did that an operator should know (a synthesised tool result, ...)."""

    line: int
    text: str


Record: TypeAlias = (
    SessionSeen | SessionMeta | LogAppend | CallSeen | CompactionSeen | TokensAfter | Skipped | Note
)
