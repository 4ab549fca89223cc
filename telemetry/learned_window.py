"""Learning a session's window from the provider's own overflow error (D4, D6)."""

from __future__ import annotations

from context_core.overflow_limit import OverflowLimit
from telemetry.models import AgentSession
from telemetry.session_state import record_learned_window
from telemetry.windows import parse_overflow_limit


def learn_window_from_overflow(session: AgentSession, text: str) -> OverflowLimit | None:
    """Remember the limit an overflow error states ("prompt is too long: 210345 tokens > 200000
    maximum") for the session's current model, and re-project its pressure against it.

    The learned limit outranks the profile and the catalogue but not a record's own window
    (`telemetry.windows`). Returns what was learned, None when the text states no limit.
    """
    limit = parse_overflow_limit(text)
    if limit is None:
        return None
    record_learned_window(session.pk, limit.limit)
    session.refresh_from_db()
    return limit
