"""A single record in one round trip, for a session this process wrote last (docs/performance.md, P2).

Why: a single record took two round trips (the session's lock with the insert and the turn's
derivation; then the session's figures with the hour rows and the COMMIT), because the figures
are computed in Python from what the derivation answered. A round trip costs CPU on both
sides whatever it carries, a fixed cost that is a large share of what a single record costs
beside a no-op request (`python -m bench.inprocess --ab` measures it with an extra `SELECT 1`;
docs/performance.md).

How: after it writes a session, the process remembers the row as written, its version (the
row's `xmin`, the transaction that wrote it) and, when it knows them all, the calls of the
session's last turn. The next record of that session for a later turn, or for the last turn
under a call number not among those calls, is then derived here, before anything is sent: the
call's row, its turn's figures (`telemetry.accounting.summarize_turn` over the calls as stored,
`as_stored`), what that changed (`telemetry.session_totals.change_of`) and the session's
figures and projection, exactly as the two-trip path computes them from the database's answer.
One statement sends it all (BEGIN and COMMIT in the same round trip,
`telemetry.ingest.pg_prepared`):

- `guard` locks the session row if, and only if, it is still the version remembered. Every
  write of a session's calls writes its figures in the same transaction, and every other change
  of the row (compaction, relief, a learned window, an edit) writes a new version, so the same
  version means the same row, the same calls and the same last turn as remembered;
- `ins` adds the call unless a stored call holds its position or request id (a retry);
- the turn, the session's figures and the hour rows are written only if the call went in.

The answer is the session row's new version, or nothing: then nothing was written, the empty
transaction committed, and the caller takes the two-trip path, which answers the duplicate,
conflict or concurrent writer as it always did. A remembered state that is wrong can only cost
that detour, never a wrong row, since the version check runs under the row's lock.

PostgreSQL only, with `DB_PIPELINE` and `DB_PREPARED_STATEMENTS`; a record carrying provider
events, or whose projection would read the transcript log, takes the usual path.
This is the ingest's one store of remembered sessions (one bound: `_KNOWN`; one invalidation
rule: the row's version). tests/db/test_known_sessions.py holds the one-trip and two-trip
writes to the same stored rows and answers, tests/db/test_writers_equal.py both to the
portable writer's.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from django.conf import settings
from django.db import connection

from telemetry import session_state
from telemetry.accounting import (
    CallFigures,
    TurnFigures,
    as_stored,
    calls_before,
    summarize_turn,
)
from telemetry.costing import CallRow, call_values
from telemetry.derivation import (
    TURN_UPDATE_FIELDS,
    advance_session_figures,
    call_figures,
    turn_values,
)
from telemetry.ingest import new_rows, statements
from telemetry.ingest.values import from_row
from telemetry.models import AgentProfile, AgentSession, LLMCall, Turn
from telemetry.packing import stored_table
from telemetry.policy_rules import PolicyValues
from telemetry.recent import Recent
from telemetry.rollups import add_calls_statement
from telemetry.session_totals import change_of
from telemetry.validation import ItemResult, ValidRecord
from telemetry.window_resolution import resolve_window


@dataclass(frozen=True, slots=True)
class Known:
    """A session as this process last wrote it: the row (never changed: copied for each use),
    its version, and the calls of its last turn when this process knows them all."""

    session: AgentSession
    xmin: str
    calls: tuple[CallFigures, ...] | None


# At most 10,000 sessions (~2 KB each), each for an hour: a 32-bit `xmin` could only come round
# again after billions of transactions, far beyond an hour's.
_KNOWN: Recent[tuple[int, str], Known] = Recent(3_600.0, entries=10_000)


def remember(
    profile_id: int,
    session: AgentSession,
    xmin: str | None,
    calls: tuple[CallFigures, ...] | None,
) -> None:
    """The row of `session` as just written (version `xmin`; None forgets it), and the calls of
    its last turn when they are all known. The caller must not change `session` after."""
    key = (profile_id, session.external_id)
    if xmin is None:
        _KNOWN.discard(key)
    else:
        _KNOWN.put(key, Known(session, xmin, calls), time.monotonic())


def forget_all() -> None:
    """Forget every remembered session of this process (tests)."""
    _KNOWN.clear()


@dataclass(frozen=True, slots=True)
class Written:
    """What `store_one` wrote: the session with its new figures, the call's turn as stored
    now, and the call numbers of that turn."""

    session: AgentSession
    turn: Turn
    calls: list[int]


def applies() -> bool:
    """Whether the one-trip path can run here: PostgreSQL's pipeline, prepared statements, and
    the caller's `atomic` block the outermost (its COMMIT goes with the statement)."""
    return (
        statements.set_wise()
        and settings.DB_PIPELINE
        and settings.DB_PREPARED_STATEMENTS
        and statements.own_transaction()
    )


def store_one(
    profile: AgentProfile,
    v: ValidRecord,
    *,
    policy: PolicyValues,
    catalogue: Any,
    now: datetime,
) -> Written | None:
    """Store the new call of `v` with its turn, session figures and hour rows in one round
    trip, committing the caller's transaction (see the module's note); None, having written
    nothing, when it does not apply or the session is not as remembered."""
    record = v.record
    if v.provided.events:
        return None
    known = _KNOWN.get((profile.pk, record.session_id), time.monotonic())
    if known is None:
        return None
    stored = known.session
    before = calls_before(stored.last_turn, known.calls, record.turn, record.call)
    if before is None:
        return None
    row = call_values(stored.pk, v, catalogue.pricer(record.model), now)
    figures = as_stored(call_figures(row))
    if figures is None:
        return None
    calls = (*before, figures)
    after = summarize_turn(calls)
    if (
        stored.surface_estimate_tokens is None
        and after.last_call_appended_chars is None
        and after.surface_version is not None
    ):
        return None  # the projection reads the transcript log: under the lock, as usual
    old: TurnFigures | None = summarize_turn(before) if before else None
    session = copy_row(stored)
    session.profile = profile  # as the caller has it now (its name, its windows)
    turn = from_row(Turn, _TURN_NAMES, (None, *turn_values(session.pk, record.turn, after)))
    found, rest = advance_session_figures(
        [session], {session.pk: (turn, asdict(change_of([(old, after)])))}
    )
    assert found and not rest, "a later turn or a new call of the last advances the figures"
    session_state.apply_usage_report(
        session,
        turn,
        window=resolve_window(profile, turn, catalogue.price, session),
        new_report=True,
        policy=policy,
    )
    sql, params = _statement(profile, session, known.xmin, row, turn)
    answer = statements.run(sql, params, commit=True)
    xmin = answer[0][0] if answer else None
    if xmin is None:
        _KNOWN.discard((profile.pk, record.session_id))
        return None
    remember(profile.pk, session, xmin, calls)
    return Written(copy_row(session), turn, sorted(c.call for c in calls))


def first_of_turn(
    session: AgentSession,
    item: ItemResult,
    turn_calls: dict[tuple[int, int], list[int]],
    rows: list[CallRow],
) -> tuple[CallFigures, ...] | None:
    """The calls of the session's last turn when the two-trip path's one record was its first
    (the stored turn holds that call alone), as stored; else None (not known)."""
    if item.status != "created" or len(rows) != 1 or item.turn is None:
        return None
    if item.turn != session.last_turn:
        return None
    if turn_calls.get((session.pk, item.turn)) != [item.call]:
        return None
    stored = as_stored(call_figures(rows[0]))
    return None if stored is None else (stored,)


def copy_row(session: AgentSession) -> AgentSession:
    """A separate instance of the same row (the remembered one is shared between threads)."""
    copy = AgentSession.__new__(AgentSession)
    copy.__dict__.update(session.__dict__)
    state = session._state
    copy._state = type(state)()
    copy._state.adding, copy._state.db = state.adding, state.db
    copy._state.fields_cache = dict(state.fields_cache)
    return copy


_TURN_NAMES: Final = ("id", "session_id", "turn", *TURN_UPDATE_FIELDS)


def _statement(
    profile: AgentProfile, session: AgentSession, xmin: str, row: CallRow, turn: Turn
) -> tuple[str, list[Any]]:
    figures = session_state.figures_statement([session])
    hours = add_calls_statement(profile.pk, [row], only_if="EXISTS (SELECT FROM ins)")
    assert figures is not None and hours is not None
    head = _head_sql()
    sql = (
        f"{head}, fig AS ({figures.sql} AND EXISTS (SELECT FROM ins) RETURNING xmin::text), "
        f"hrs AS ({hours.sql}) SELECT (SELECT xmin FROM fig)"
    )
    turn_params = [getattr(turn, name) for name in _TURN_NAMES[1:]]
    return sql, [session.pk, xmin, *row, *turn_params, *figures.params, *hours.params]


@functools.cache
def _head_sql() -> str:
    """The statement's `guard`, `ins` and `trn` queries (see the module's note)."""
    quote = connection.ops.quote_name
    sessions = quote(AgentSession._meta.db_table)
    turns = quote(stored_table(Turn))
    into, values = new_rows.insert_parts(LLMCall)
    by_name = {f.attname: f for f in Turn._meta.concrete_fields}
    names = _TURN_NAMES[1:]
    columns = ", ".join(quote(by_name[n].column) for n in names)
    typed = ", ".join(f"%s::{by_name[n].db_type(connection)}" for n in names)
    updates = ", ".join(
        f"{quote(by_name[n].column)} = excluded.{quote(by_name[n].column)}" for n in names[2:]
    )
    keys = ", ".join(quote(by_name[n].column) for n in ("session_id", "turn"))
    return (
        f"WITH guard AS (SELECT s.id FROM {sessions} AS s "
        "WHERE s.id = %s::bigint AND s.xmin = %s::text::xid FOR UPDATE), "
        f"ins AS ({into} SELECT {values} WHERE EXISTS (SELECT FROM guard) "
        "ON CONFLICT DO NOTHING RETURNING 1), "
        f"trn AS (INSERT INTO {turns} ({columns}) SELECT {typed} "
        f"WHERE EXISTS (SELECT FROM ins) ON CONFLICT ({keys}) DO UPDATE SET {updates})"
    )
