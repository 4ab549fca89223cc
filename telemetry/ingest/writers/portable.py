"""The portable writer: any database Django supports (SQLite in development and tests).

The sessions are locked, the stored keys read, the new calls inserted as model instances
(`new_rows.insert_rows`), their turns re-derived in Python (`telemetry.derivation.
rederive_turns` over `telemetry.accounting`), the session figures re-derived from their turns
and written, and the hour rollups added (`telemetry.rollups.add_calls`): a constant number of
statements whatever the submission's size. The reference the PostgreSQL writers are held to
(tests/db/test_writers_equal.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from django.utils import timezone

from telemetry import session_state
from telemetry.accounting import CallFigures
from telemetry.costing import call_row
from telemetry.derivation import call_figures, rederive_turns
from telemetry.ingest import new_rows
from telemetry.ingest.writers.steps import (
    Submission,
    Written,
    decide,
    read_keys,
    refresh_sessions,
    sessions_of,
    touched,
)
from telemetry.models import LLMCall
from telemetry.provider_context import ProviderEvent
from telemetry.provider_events import record_provider_events
from telemetry.rollups import add_calls


def store(sub: Submission) -> Written:
    """Store the new records of `sub` (see the module's note)."""
    sessions = sessions_of(sub)
    pk_of = {external_id: session.pk for external_id, session in sessions.items()}
    keys = read_keys(sub, pk_of)
    decided, created = decide(keys, sub.valid, pk_of)
    now = timezone.now()
    calls: list[LLMCall] = []
    events: list[tuple[LLMCall, Sequence[ProviderEvent]]] = []
    for v in created:
        call = call_row(sessions[v.record.session_id], v, sub.catalogue.pricer(v.record.model), now)
        calls.append(call)
        if v.provided.events:
            events.append((call, v.provided.events))
    new_rows.insert_rows(LLMCall, calls)
    record_provider_events(events)
    new: dict[tuple[int, int], list[CallFigures]] = defaultdict(list)
    for c in calls:
        new[(c.session_id, c.turn)].append(call_figures(c))
    turn_calls = rederive_turns(
        touched(decided, pk_of), write=set(new), stored=keys.stored_turns, new=new
    )
    rows = refresh_sessions(sub, sessions, {c.session_id for c in calls}, None)
    session_state.write_figures(rows)
    add_calls(sub.profile.pk, calls)  # last: see `steps.write_last`
    return Written(rows, decided, turn_calls)
