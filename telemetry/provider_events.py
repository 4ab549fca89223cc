"""Provider-side compactions and context edits found at ingest, into the session's history."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from django.db.models import Q

from telemetry.events import record_context_event
from telemetry.models import ContextEvent, LLMCall
from telemetry.provider_context import ProviderEvent

# request id + ":" + the event's key (e.g. "iteration:12", "item:<id>") within 200 characters.
_MAX_IDENTITY = 100


def record_provider_events(items: Sequence[tuple[LLMCall, Sequence[ProviderEvent]]]) -> int:
    """Record each call's provider events as `ContextEvent`s (origin "provider"), linked to the
    stored call. Idempotent: the key is the call's identity plus the event's key within it, so a
    replayed record adds nothing. Returns the number of events created."""
    items = [(call, events) for call, events in items if events]
    if not items:
        return 0
    wanted = Q(pk__in=[])
    for call, _ in items:
        wanted |= Q(session_id=call.session_id, turn=call.turn, call=call.call)
    stored = {
        (row.session_id, row.turn, row.call): row
        for row in LLMCall.objects.filter(wanted).only("pk", "session_id", "turn", "call")
    }
    created = 0
    for call, events in items:
        row = stored.get((call.session_id, call.turn, call.call))
        identity = call.request_id or f"turn:{call.turn}:call:{call.call}"
        if len(identity) > _MAX_IDENTITY:
            # Keys are 200 chars at most: a long request id is hashed, never cut (a cut could
            # make two events of one call collide and drop the second as a replay).
            identity = "sha256:" + hashlib.sha256(identity.encode()).hexdigest()
        for event in events:
            _, new = record_context_event(
                call.session,
                kind=event.kind,
                origin=ContextEvent.Origin.PROVIDER,
                source="telemetry",
                source_key=f"{identity}:{event.key}",
                at=call.at,
                trigger=event.trigger,
                turn=call.turn,
                call=row,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                detail=event.detail,
                summary=event.summary,
            )
            created += new
    return created
