"""What the database holds of one session, for tests that compare two write paths' results."""

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
