"""Who may hear that ingest changed sessions, without telemetry knowing them.

`sessions_changed` is sent after an ingest batch commits, with the ids of the sessions it
touched (`session_ids`). The alerts app listens to evaluate its per-session rules off the
request path; telemetry imports none of its listeners (the dependency rule).
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

sessions_changed = Signal()


def announce_after_commit(session_ids: list[int]) -> None:
    """Send `sessions_changed` once the open transaction commits (nothing when none listens)."""
    if session_ids and sessions_changed.has_listeners(None):
        transaction.on_commit(lambda: sessions_changed.send(None, session_ids=session_ids))
