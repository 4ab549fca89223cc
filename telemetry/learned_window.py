"""Learning a session's window from the provider's own overflow error (D4, D6)."""

from __future__ import annotations

from django.db import transaction

from telemetry.ingest import refresh_projection
from telemetry.models import AgentSession
from telemetry.windows import OverflowLimit, parse_overflow_limit


def learn_window_from_overflow(session: AgentSession, text: str) -> OverflowLimit | None:
    """Remember the limit an overflow error states ("prompt is too long: 210345 tokens > 200000
    maximum") for the session's current model, and re-project its pressure against it.

    The learned limit outranks the profile and the catalogue but not a record's own window
    (`telemetry.windows`). Returns what was learned, None when the text states no limit.
    """
    limit = parse_overflow_limit(text)
    if limit is None:
        return None
    with transaction.atomic():
        locked = AgentSession.objects.select_for_update().get(pk=session.pk)
        locked.learned_window_tokens = limit.limit
        locked.learned_window_model = locked.model
        fields = ["learned_window_tokens", "learned_window_model"]
        if locked.window_source != "record":
            locked.window_tokens = limit.limit
            locked.window_source = "overflow"
            fields += ["window_tokens", "window_source"]
        locked.save(update_fields=fields)
    refresh_projection(session.pk)
    session.refresh_from_db()
    return limit
