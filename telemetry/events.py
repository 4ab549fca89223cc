"""The write path of `ContextEvent`: agent- and provider-side context changes.

Every on-ramp (OTLP logs and spans, transcript imports, usage normalisation of provider-side
compaction) records what it learned through `record_context_event`, so replays of the same
export or the same transcript line never add a second event.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from telemetry.models import AgentSession, ContextEvent, LLMCall


def record_context_event(
    session: AgentSession,
    *,
    kind: str,
    origin: str,
    source: str,
    source_key: str,
    at: datetime,
    trigger: str = "",
    turn: int | None = None,
    call: LLMCall | None = None,
    tokens_before: int | None = None,
    tokens_after: int | None = None,
    summary: str = "",
    detail: Mapping[str, Any] | None = None,
) -> tuple[ContextEvent, bool]:
    """Store one event; a replay (same session and `source_key`) returns the stored one and False."""
    if kind not in ContextEvent.Kind.values:
        raise ValueError(f"kind: must be one of {', '.join(ContextEvent.Kind.values)}")
    if origin not in ContextEvent.Origin.values:
        raise ValueError(f"origin: must be one of {', '.join(ContextEvent.Origin.values)}")
    if not source_key:
        raise ValueError("source_key: must not be empty")
    existing = ContextEvent.objects.filter(session=session, source_key=source_key).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            event = ContextEvent.objects.create(
                session=session,
                kind=kind,
                origin=origin,
                source=source,
                source_key=source_key,
                trigger=trigger,
                turn=turn,
                call=call,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
                summary=summary,
                detail=dict(detail or {}),
                at=at,
            )
    except IntegrityError:
        # A concurrent replay won the race: the stored event is the answer.
        return ContextEvent.objects.get(session=session, source_key=source_key), False
    return event, True


def session_context_events(session: AgentSession) -> QuerySet[ContextEvent]:
    """The session's agent- and provider-side events, oldest first."""
    return ContextEvent.objects.filter(session=session).order_by("at", "pk")
