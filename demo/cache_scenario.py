"""Demo traffic for the cache-miss causes (D1, D2): three small sessions whose misses have every
cause the console names. Standard library only; `manage.py simulate` sends them through the API.

- `cache-causes` (default profile, 5-minute tier): a model switch, an expiry after a 22-minute
  gap, an agent compaction (the command records its context event between turns 5 and 6), and
  an eviction (the prefix fingerprints match, the provider read nothing);
- `cache-volatile-system` (desktop profile, 1-hour tier): the agent puts the clock in its system
  block, so every call breaks the prefix at `system` — a D2 violation the profile is flagged for;
- `cache-compacted` (default profile): a transcript the command compacts between two calls, so
  the next call's re-write is our compaction's, measured against its plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

SONNET: Final = "claude-sonnet-4-5-20250929"
HAIKU: Final = "claude-haiku-4-5"
TOOLS_TOKENS: Final = 2_400
SYSTEM_HEAD: Final = "You are a careful software agent. Follow the project's contributing guide."


@dataclass(frozen=True, slots=True)
class DemoEvent:
    """An agent-side compaction the command records (it is not a telemetry record)."""

    session_id: str
    at: datetime
    source_key: str
    tokens_before: int
    tokens_after: int
    summary: str


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _prefix(system: str, messages: int = 0) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = [
        {"kind": "tools", "hash": _digest("bash,read_file,grep,edit_file"), "tokens": TOOLS_TOKENS},
        {"kind": "system", "hash": _digest(system), "tokens": len(system) // 4, "text": system},
    ]
    segments += [
        {"kind": "message", "hash": _digest(f"m{i}"), "tokens": 4_000} for i in range(messages)
    ]
    return segments


def _record(
    session_id: str,
    turn: int,
    at: datetime,
    *,
    model: str = SONNET,
    read: int = 0,
    write: int = 0,
    output: int = 600,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn": turn,
        "model": model,
        "provider": "anthropic",
        "usage": {
            "input_tokens": 40,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": output,
        },
        "at": at.isoformat().replace("+00:00", "Z"),
        **extra,
    }


def causes_session(start: datetime) -> tuple[list[dict[str, Any]], DemoEvent]:
    """Model switch (turn 2), expiry (turn 4), agent compaction (turn 6), eviction (turn 8)."""
    sid = "cache-causes"
    system = SYSTEM_HEAD
    p = _prefix(system, 8)

    def at(minutes: float) -> datetime:
        return start + timedelta(minutes=minutes)

    records = [
        _record(sid, 0, at(0), write=40_000, prefix=p),
        _record(sid, 1, at(1), read=40_000, write=2_000, prefix=p),
        _record(sid, 2, at(2), model=HAIKU, write=42_500, prefix=p),
        _record(sid, 3, at(3), model=HAIKU, read=42_500, write=1_000, prefix=p),
        _record(sid, 4, at(25), model=HAIKU, write=44_000, prefix=p),
        _record(sid, 5, at(26), model=HAIKU, read=44_000, write=1_000, prefix=p),
        # the agent compacted its history to a summary: only tools and system stay cached
        _record(sid, 6, at(27), model=HAIKU, read=2_418, write=9_600, prefix=_prefix(system, 1)),
        _record(sid, 7, at(28), model=HAIKU, read=12_018, write=900, prefix=_prefix(system, 1)),
        # same prefix, nothing read: the provider evicted it
        _record(sid, 8, at(29), model=HAIKU, write=13_500, prefix=_prefix(system, 1)),
    ]
    event = DemoEvent(
        session_id=sid,
        at=at(26.5),
        source_key="cache-demo:compact-1",
        tokens_before=45_040,
        tokens_after=12_000,
        summary="The user asked to fix the flaky invoice test; the fix is in billing/round.py.",
    )
    return records, event


def volatile_system_session(start: datetime, calls: int = 6) -> list[dict[str, Any]]:
    """The clock in the system block: every call re-writes everything after the tools."""
    sid = "cache-volatile-system"
    records = []
    for turn in range(calls):
        at = start + timedelta(minutes=turn)
        system = f"{SYSTEM_HEAD}\nCurrent time: {at:%Y-%m-%d %H:%M} UTC"
        size = 30_000 + 1_500 * turn
        read = TOOLS_TOKENS if turn else 0
        records.append(
            _record(sid, turn, at, read=read, write=size - read, prefix=_prefix(system, turn + 1))
        )
    return records


def compacted_transcript(rounds: int = 10, result_chars: int = 24_000) -> dict[str, Any]:
    """An Anthropic transcript (messages append body) with big tool results to prune."""
    messages: list[dict[str, Any]] = [
        {"seq": 1, "role": "user", "content": "Find why the nightly export drops rows, and fix it."}
    ]
    seq = 2
    for i in range(rounds):
        call_id = f"toolu_demo_{i:03d}"
        messages.append(
            {
                "seq": seq,
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading export log part {i}."},
                    {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"part": i}},
                ],
            }
        )
        body = (f"export part {i}: row batch ok, 500 rows written\n") * (result_chars // 44)
        messages.append(
            {
                "seq": seq + 1,
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": body}],
            }
        )
        seq += 2
    return {"format": "anthropic", "system": SYSTEM_HEAD, "messages": messages}


def compacted_records(
    start: datetime, *, before_version: int, after_version: int, before_tokens: int, after: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The call before our compaction (everything cached), and three after it: the first
    re-writes from the first changed message on, the next two read the smaller prefix."""
    sid = "cache-compacted"
    first = _record(
        sid, 0, start, read=before_tokens - 1_000, write=1_000, surface_version=before_version
    )
    head = 1_500  # tools, system and the first user message stay cached
    later = [
        _record(
            sid,
            1,
            start + timedelta(minutes=2),
            read=head,
            write=after - head,
            surface_version=after_version,
        ),
        _record(
            sid,
            2,
            start + timedelta(minutes=3),
            read=after,
            write=700,
            surface_version=after_version,
        ),
        _record(
            sid,
            3,
            start + timedelta(minutes=4),
            read=after + 700,
            write=650,
            surface_version=after_version,
        ),
    ]
    return first, later
