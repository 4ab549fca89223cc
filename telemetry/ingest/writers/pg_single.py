"""The PostgreSQL single-record writer: one record (docs/performance.md, P2).

A record of a session this process wrote last goes in one statement and one round trip, BEGIN
and COMMIT included (`telemetry.ingest.known_sessions.store_one`: it writes only if the session
row is still the version remembered). Otherwise, or when that statement wrote nothing, the
session is upserted and locked (`session_state.lock_sessions`, with the BEGIN in its round
trip), the record's stored keys read, its row inserted unless they hold it and its turn
re-derived in one statement (`call_keys.insert_and_derive`), and the session figures sent with
the hour rows and the COMMIT (`steps.write_last`): two round trips, after which the session is
remembered for its next record. Held to store what the portable writer stores by
`test_pg_single_stores_what_portable_stores` (tests/db/test_writers_equal.py).
"""

from __future__ import annotations

from django.utils import timezone

from telemetry.costing import call_row, call_values
from telemetry.idempotency import StoredKeys
from telemetry.ingest import call_keys, known_sessions
from telemetry.ingest.writers.steps import (
    Submission,
    Written,
    decide,
    refresh_sessions,
    sessions_of,
    touched,
    write_last,
)
from telemetry.models import LLMCall, Turn
from telemetry.provider_events import record_provider_events
from telemetry.rollups import add_calls_statement
from telemetry.validation import ItemResult


def store(sub: Submission) -> Written:
    """Store the one record of `sub` (see the module's note)."""
    (v,) = sub.valid
    record = v.record
    now = timezone.now()
    remembers = sub.locked is None and known_sessions.applies()
    if remembers:
        one = known_sessions.store_one(
            sub.profile, v, policy=sub.policy, catalogue=sub.catalogue, now=now
        )
        if one is not None:
            item = ItemResult(
                v.index, "created", session_id=record.session_id, turn=record.turn, call=record.call
            )
            return Written([one.session], [item], {(one.session.pk, record.turn): one.calls})
    sessions = sessions_of(sub)
    pk_of = {external_id: session.pk for external_id, session in sessions.items()}
    pricer = sub.catalogue.pricer(record.model)
    row = call_values(pk_of[record.session_id], v, pricer, now)
    stored, went_in, changed = call_keys.insert_and_derive(
        LLMCall, Turn, row, turn=record.turn, call=record.call, request_id=record.request_id
    )
    keys = StoredKeys.of_rows(stored)
    decided, created = decide(keys, [v], pk_of)
    if went_in != bool(created):
        # the statement and `decide` judge a record new by the same keys: never apart
        raise AssertionError(f"a {decided[0].status} record, inserted: {went_in}")
    if created and v.provided.events:
        record_provider_events(
            [(call_row(sessions[record.session_id], v, pricer, now), v.provided.events)]
        )
    rows = [row] if created else []
    turn_calls = keys.calls_by_turn(touched(decided, pk_of))
    result = refresh_sessions(
        sub, sessions, {pk_of[record.session_id]} if created else set(), changed
    )
    version = write_last(result, add_calls_statement(sub.profile.pk, rows), version=remembers)
    if remembers and len(result) == 1:
        # the row as written, for the session's next record, with its last turn's calls when
        # this record was that turn's first
        session = result[0]
        calls = known_sessions.first_of_turn(session, decided[0], turn_calls, rows)
        known_sessions.remember(sub.profile.pk, known_sessions.copy_row(session), version, calls)
    return Written(result, decided, turn_calls)
