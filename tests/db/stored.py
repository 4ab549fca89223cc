"""For tests that compare two write paths: a session's records, and what the database holds of it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from telemetry.models import AgentSession, LLMCall, Turn

# Ids, keys and server clocks differ between two sessions written alike.
_ALWAYS_SKIPPED = frozenset({"id", "session_id", "received_at", "profile_id", "created_at"})


def session_rows(session: AgentSession, *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The session's calls, turns and row as stored, without ids, keys, server clocks and the
    fields in `skip`."""
    left_out = _ALWAYS_SKIPPED | set(skip)
    calls = [
        {k: v for k, v in row.items() if k not in left_out}
        for row in LLMCall.objects.filter(session=session).order_by("turn", "call").values()
    ]
    turns = [
        {k: v for k, v in row.items() if k not in left_out}
        for row in Turn.objects.filter(session=session).order_by("turn").values()
    ]
    figures = {
        k: v
        for k, v in AgentSession.objects.filter(pk=session.pk).values().get().items()
        if k not in left_out
    }
    return {"calls": calls, "turns": turns, "session": figures}


def session_record(session_id: str, turn: int, call: int = 0, **extra: Any) -> dict[str, Any]:
    """A call record of `session_id` (Anthropic usage growing with the turn, a request id, a
    time in another offset); `extra` replaces or adds fields."""
    return {
        "session_id": session_id,
        "turn": turn,
        "call": call,
        "request_id": f"req-{turn}-{call}",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input_tokens": 100 + turn,
            "cache_read_input_tokens": 5_000 * turn,
            "cache_creation_input_tokens": 300,
            "output_tokens": 40 + call,
        },
        "at": f"2025-06-01T10:{turn % 60:02d}:{call % 60:02d}+02:00",
        **extra,
    }
