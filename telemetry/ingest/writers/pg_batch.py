"""The PostgreSQL batch writer: two records or more (docs/performance.md, P1).

Statements, whatever the batch's size: the sessions upserted and locked in one
(`session_state.lock_sessions`), the stored keys read in one, the new calls copied in one
(`new_rows.copy_rows`, rows built as tuples by `telemetry.costing.call_values`), their turns
derived by the database from the stored rows and upserted in one
(`turn_derivation.derive_turns`), and the session figures, brought forward from that upsert's
answer, sent with the hour rows as one statement, its COMMIT in the same round trip
(`steps.write_last`). Held to store what the portable writer stores by
`test_pg_batch_stores_what_portable_stores` (tests/db/test_writers_equal.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from telemetry.costing import CallRow, call_row, call_values
from telemetry.ingest import new_rows, turn_derivation
from telemetry.ingest.writers.steps import (
    Submission,
    Written,
    decide,
    merged_of,
    read_keys,
    refresh_sessions,
    sessions_of,
    touched,
    write_last,
)
from telemetry.models import LLMCall, Turn
from telemetry.provider_context import ProviderEvent
from telemetry.provider_events import record_provider_events
from telemetry.rollups import add_calls_statement


def store(sub: Submission) -> Written:
    """Store the new records of `sub` (see the module's note)."""
    sessions = sessions_of(sub)
    # each session's id once: `.pk` is a property call (docs/performance.md, P1)
    pk_of = {external_id: session.pk for external_id, session in sessions.items()}
    keys = read_keys(sub, pk_of)
    decided, created = decide(keys, sub.valid, pk_of)
    now = timezone.now()
    rows: list[CallRow] = []
    events: list[tuple[LLMCall, Sequence[ProviderEvent]]] = []
    for v in created:
        pricer = sub.catalogue.pricer(v.record.model)
        rows.append(call_values(pk_of[v.record.session_id], v, pricer, now))
        if v.provided.events:
            call = call_row(sessions[v.record.session_id], v, pricer, now)
            events.append((call, v.provided.events))
    new_rows.copy_rows(LLMCall, rows)
    record_provider_events(events)
    positions = sorted({(pk_of[v.record.session_id], v.record.turn) for v in created})
    changed = turn_derivation.derive_turns(Turn, LLMCall, positions)
    turn_calls = keys.calls_by_turn(touched(decided, pk_of))
    created_in = {pk_of[v.record.session_id] for v in created}
    result = refresh_sessions(sub, sessions, created_in, changed)
    merged = merged_of(sub, sessions)
    write_last(result, add_calls_statement(sub.profile.pk, rows), metadata=merged)
    return Written(result, decided, turn_calls, merged)
