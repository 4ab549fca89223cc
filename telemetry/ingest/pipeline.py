"""The one write path of usage records: a batch of call records in, per-item outcomes out.

This module is orchestration only; each step has its own module, reusable by every on-ramp
(the JSON API, OTLP, transcript imports):

1. `telemetry.validation`   validate and normalise each record on its own
2. `telemetry.idempotency`  created / duplicate / conflict, by a canonical payload hash
3. `telemetry.costing`      price new calls (the catalogue read once per submission)
4. `telemetry.derivation`   re-derive the touched turns and sessions from their rows
5. `telemetry.window_resolution` the window in force for each session (rule: `telemetry.windows`)
6. `telemetry.session_state` projection, pressure, needs-relief, and the session write
   (the other modules of `telemetry.ingest` hold the raw SQL of the writes, and why it is raw)

A batch costs a constant number of SQL statements whatever its size: sessions are upserted and
locked in one (two elsewhere), existing calls read in one, new calls inserted in one, their hour
rollups added in one, affected turns re-derived and upserted in one (two elsewhere), and session
figures brought forward from that upsert's answer and written in one (re-derived from all their
turns in one more read where they cannot be, and always elsewhere). On PostgreSQL the last two
writes, session figures and hour rollups, travel together as one statement
(`statements.run_together`). A single record there reads its stored keys, goes in unless they
hold it, and has its turn re-derived in one statement (`call_keys.insert_and_derive`, under the
session lock): 5 statements with the lock, the figures, BEGIN and COMMIT, in 3 round trips
(BEGIN travels with the lock, COMMIT with the figures: `telemetry.ingest.pg_prepared`), 2 once the
process has locked the session before (the insert travels with the lock: `_lock_and_insert`),
and 1 once this process wrote the session last and knows what the record adds to: its call,
turn, figures and hour rows are computed here and sent as one statement that writes only if
the session row is still the version written (`telemetry.ingest.known_sessions`).

On PostgreSQL (`telemetry.ingest.statements.set_wise`) new calls go to COPY as tuples (a few
rows: one prepared INSERT) and the database derives their turns from the stored rows; elsewhere
the calls are model instances and the same figures are derived in Python
(`telemetry.accounting`). Hour rollups are summed in Python on
both (`telemetry.rollups`): a handful of rows, cheaper than a second read of the calls.

`store_records` is the entry point for code that already knows the profile (OTLP, imports);
`ingest_records` is the API's, keyed by the agent key.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from telemetry import session_state
from telemetry.accounting import CallFigures
from telemetry.catalogue import OnceCatalogue, key_prices
from telemetry.costing import CallRow, call_row, call_values
from telemetry.derivation import (
    advance_session_figures,
    call_figures,
    derive_session_figures,
    rederive_turns,
)
from telemetry.idempotency import StoredKeys, payload_hash
from telemetry.ingest import call_keys, known_sessions, new_rows, statements, turn_derivation
from telemetry.models import AgentKey, AgentProfile, AgentSession, LLMCall, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy, key_policy
from telemetry.pressure import round_signal
from telemetry.provider_context import ProviderEvent
from telemetry.provider_events import record_provider_events
from telemetry.rollups import add_calls as add_to_hourly_usage
from telemetry.rollups import add_calls_statement
from telemetry.session_state import (
    needs_relief,
    refresh_projection,
    session_band,
    session_projection,
)
from telemetry.validation import ItemResult, Status, ValidRecord, validate_items
from telemetry.window_resolution import resolve_window

# Names other modules import from here; each lives in the module of its step.
__all__ = [
    "IngestResult",
    "ItemResult",
    "Status",
    "ingest_records",
    "needs_relief",
    "payload_hash",
    "refresh_projection",
    "resolve_window",
    "session_band",
    "session_projection",
    "store_records",
    "validate_items",
]


@dataclass
class IngestResult:
    items: list[ItemResult]
    sessions: list[AgentSession] = field(default_factory=list)
    policy: PolicyValues | None = None
    # Sessions whose pressure reached the prune threshold; the caller may enqueue relief.
    over_threshold: list[int] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for item in self.items if item.status == status)


def ingest_records(
    *,
    key: AgentKey,
    raw_items: Sequence[object],
    batch: bool,
    on_commit: Callable[[list[int]], None] | None = None,
    locked: dict[str, AgentSession] | None = None,
) -> IngestResult:
    """The API's entry point: `store_records` for the calling key's profile, with the policy and
    catalogue remembered beside the key check (a second at most, `telemetry.policy_store`)."""
    return store_records(
        profile=key.profile,
        raw_items=raw_items,
        batch=batch,
        on_commit=on_commit,
        policy=key_policy(key.pk, key.profile),
        catalogue=key_prices(key.pk),
        locked=locked,
    )


def latest_accepted_at() -> datetime | None:
    """The latest `at` a record may carry: the clock plus TELEMETRY_CLOCK_SKEW_SECONDS (None: a
    skew past year 9999 bounds nothing). Later, one record dated 9999 would sit at the top of
    every "last seen" for ever."""
    try:
        return timezone.now() + timedelta(seconds=settings.TELEMETRY_CLOCK_SKEW_SECONDS)
    except OverflowError:
        return None


def store_records(
    *,
    profile: AgentProfile,
    raw_items: Sequence[object],
    batch: bool = True,
    on_commit: Callable[[list[int]], None] | None = None,
    policy: PolicyValues | None = None,
    catalogue: OnceCatalogue | None = None,
    locked: dict[str, AgentSession] | None = None,
) -> IngestResult:
    """Store the valid, new usage records of one submission for `profile` and re-derive the
    figures they touch. Each item is a JSON object in the shape of `telemetry.schemas.RecordIn`
    (it names its own `session_id`); one bad item never drops the others.

    Idempotent on (session, turn, call) — or on `request_id` when given: the same payload again
    is a `duplicate` and changes nothing; different content under a taken key is a `conflict`.
    `batch` prefixes field names with `records.<index>.`. `on_commit` receives the ids of
    sessions that need relief (D4), after commit. `policy` and `catalogue` default to fresh reads.
    `locked`: sessions the caller has already locked in its open transaction
    (`session_state.lock_sessions`, as OTLP does to number turns first), by external id; the
    records' sessions are taken from it instead of being locked a second time.
    """
    if policy is None:
        policy = effective_policy(profile)
    outcomes, valid = validate_items(
        raw_items, policy=policy, batch=batch, latest_at=latest_accepted_at()
    )
    result = IngestResult(items=[], policy=policy)
    if valid:
        with transaction.atomic():
            wanted = {v.record.session_id for v in valid}
            catalogue = OnceCatalogue() if catalogue is None else catalogue
            one_trip = locked is None and len(valid) == 1 and known_sessions.applies()
            if one_trip:
                v = valid[0]
                written = known_sessions.store_one(
                    profile, v, policy=policy, catalogue=catalogue, now=timezone.now()
                )
                if written is not None:
                    record = v.record
                    item = ItemResult(
                        v.index,
                        "created",
                        session_id=record.session_id,
                        turn=record.turn,
                        call=record.call,
                    )
                    result.sessions = [written.session]
                    turn_calls = {(written.session.pk, record.turn): written.calls}
                    _conclude(result, outcomes, [item], turn_calls, policy, on_commit)
                    result.items = [item for item in outcomes if item is not None]
                    return result
            sent = None
            if locked is not None and wanted <= locked.keys():
                sessions = {eid: locked[eid] for eid in wanted}
            else:
                sent = _lock_and_insert(profile, valid, catalogue)
                if sent is None:
                    sessions = session_state.lock_sessions(profile, wanted)
                else:
                    sessions = sent.sessions
                if len(valid) == 1:
                    _remember_sessions(profile, sessions)
            created_ids, decided, turn_calls, add_hours, changed, rows = _store_calls(
                profile, sessions, valid, catalogue, sent
            )
            result.sessions = _refresh_sessions(
                profile, policy, sessions, created_ids, catalogue, changed
            )
            # Last before the commit: every batch of the profile adds to the same hour rows, and
            # each holds their row locks until it commits (4 concurrent batches queued on them).
            # On PostgreSQL the session figures and the hour rows go in one statement.
            figures = session_state.figures_statement(result.sessions)
            if figures is None:
                session_state.write_figures(result.sessions)
            # the transaction's last write: on PostgreSQL its COMMIT goes in the same round trip
            # when this is the outermost block (`statements.commit_with_last`;
            # docs/performance.md, P2)
            version = statements.run_together(
                [figures, add_hours()], commit=statements.commit_with_last(), version=one_trip
            )
            if one_trip and len(result.sessions) == 1:
                # the row as written, for the session's next record (`known_sessions`), with
                # its last turn's calls when this record was that turn's first
                session = result.sessions[0]
                calls = known_sessions.first_of_turn(session, decided[0], turn_calls, rows)
                known_sessions.remember(
                    profile.pk, known_sessions.copy_row(session), version, calls
                )
            pk_of = {external_id: session.pk for external_id, session in sessions.items()}
            _conclude(result, outcomes, decided, turn_calls, policy, on_commit, pk_of)
    result.items = [item for item in outcomes if item is not None]
    return result


def _conclude(
    result: IngestResult,
    outcomes: list[ItemResult | None],
    decided: list[ItemResult],
    turn_calls: dict[tuple[int, int], list[int]],
    policy: PolicyValues,
    on_commit: Callable[[list[int]], None] | None,
    pk_of: dict[str, int] | None = None,
) -> None:
    """The items' outcomes with D8's round signals, and the relief the sessions need (asked
    for after commit)."""
    pk_of = pk_of or {s.external_id: s.pk for s in result.sessions}
    for item in decided:
        calls = turn_calls.get((pk_of[item.session_id or ""], item.turn or 0))
        if calls is not None and item.status in ("created", "duplicate"):
            # D8: the rounds this call completes (its own position in the turn), so a batch of
            # calls 30-45 flags only those at or past the limits.
            rounds = bisect_right(calls, item.call or 0)
            signal = round_signal(rounds, policy.round_soft_limit, policy.round_hard_cap)
            item.nudge = policy.nudge_text if signal in ("nudge", "stop") else None
            item.stop = signal == "stop"
        outcomes[item.index] = item
    result.over_threshold = [s.pk for s in result.sessions if needs_relief(s, policy)]
    if on_commit is not None and result.over_threshold:
        ids = list(result.over_threshold)
        transaction.on_commit(lambda: on_commit(ids))


@dataclass
class _Sent:
    """A single record's session lock and `insert_and_derive`, already answered in one round
    trip (`_lock_and_insert`)."""

    sessions: dict[str, AgentSession]
    row: CallRow
    now: datetime
    answer: tuple[list[tuple[Any, ...]], bool, dict[int, tuple[Turn, dict[str, Any]]]]


# The id of each session this process has locked for a single record, by (profile, external
# id): sessions are never deleted under a writer, so the next record of the session can be
# sent with its lock (`_lock_and_insert`). A wrong id (a session created by a transaction that
# rolled back) is caught by the lock's answer and costs a restart.
_SESSION_IDS: dict[tuple[int, str], int] = {}
_SESSION_IDS_KEPT = 100_000


def _remember_sessions(profile: AgentProfile, sessions: dict[str, AgentSession]) -> None:
    if len(_SESSION_IDS) >= _SESSION_IDS_KEPT:
        _SESSION_IDS.clear()
    for external_id, session in sessions.items():
        _SESSION_IDS[(profile.pk, external_id)] = session.pk


def _lock_and_insert(
    profile: AgentProfile, valid: list[ValidRecord], catalogue: OnceCatalogue
) -> _Sent | None:
    """PostgreSQL, one record of a session this process has locked before, in a transaction of
    its own: the session's lock and the record's `insert_and_derive` go in one round trip (make
    bench P2: 3 round trips a record → 2). The lock finishes before the insert starts, which
    reads on a snapshot taken then, as when they were sent apart. The session is locked by the
    id remembered (`SELECT … FOR UPDATE`: the upsert `lock_sessions` sends would write a new
    version of the row, which the figures' update writes again anyway) and the insert sent with
    it; if the lock finds no such session (it was rolled back, or deleted), the transaction,
    which holds nothing else, is rolled back and the caller locks and inserts apart. None when
    this does not apply or the pipeline is off."""
    if len(valid) != 1 or not statements.set_wise() or not statements.own_transaction():
        return None
    v = valid[0]
    record = v.record
    remembered = _SESSION_IDS.get((profile.pk, record.session_id))
    if remembered is None:
        return None
    now = timezone.now()
    row = call_values(remembered, v, catalogue.pricer(record.model), now)
    insert = call_keys.insert_and_derive_statement(
        LLMCall, Turn, row, turn=record.turn, call=record.call, request_id=record.request_id
    )
    answers = statements.run_all([session_state.lock_id_statement(remembered), insert])
    if answers is None:
        return None
    sessions = session_state.locked_sessions(profile, answers[0])
    session = sessions.get(record.session_id)
    if session is None or session.profile_id != profile.pk or len(sessions) != 1:
        _SESSION_IDS.pop((profile.pk, record.session_id), None)  # another thread may have too
        statements.restart_transaction()
        return None
    return _Sent(sessions, row, now, call_keys.inserted_and_derived(LLMCall, Turn, answers[1]))


def _store_calls(
    profile: AgentProfile,
    sessions: dict[str, AgentSession],
    valid: list[ValidRecord],
    catalogue: OnceCatalogue,
    sent: _Sent | None = None,
) -> tuple[
    set[int],
    list[ItemResult],
    dict[tuple[int, int], list[int]],
    Callable[[], statements.Statement | None],
    dict[int, tuple[Turn, dict[str, Any]]] | None,
    list[CallRow],
]:
    """Decide, insert and turn-derive the calls of `valid`; returns the sessions given new calls,
    each item's outcome, each touched turn's call numbers, the hour rollups' write for the
    caller to run last (on PostgreSQL it returns the statement, which the caller sends with the
    session figures; elsewhere it writes), and on PostgreSQL what the turn derivation changed
    per session."""
    # each session's id once: `.pk` is a property call, asked several times per record of a
    # batch otherwise (docs/performance.md, P1)
    pk_of = {external_id: session.pk for external_id, session in sessions.items()}
    set_wise = statements.set_wise()
    now = timezone.now() if sent is None else sent.now
    # PostgreSQL, one record: its row is priced first and goes in with the read of the stored
    # keys, unless they hold it, and its turn is re-derived, in one statement
    # (`call_keys.insert_and_derive`).
    inserted: CallRow | None = None
    speculative = set_wise and len(valid) == 1
    derived: dict[int, tuple[Turn, dict[str, Any]]] = {}
    if speculative:
        one = valid[0].record
        if sent is not None:  # sent with the session's lock
            inserted = sent.row
            stored, went_in, derived = sent.answer
        else:
            inserted = call_values(
                pk_of[one.session_id], valid[0], catalogue.pricer(one.model), now
            )
            stored, went_in, derived = call_keys.insert_and_derive(
                LLMCall, Turn, inserted, turn=one.turn, call=one.call, request_id=one.request_id
            )
        keys = StoredKeys.of_rows(stored)
        if not went_in:
            inserted = None
    else:
        keys = StoredKeys(
            {(pk_of[v.record.session_id], v.record.turn) for v in valid},
            {
                (pk_of[v.record.session_id], v.record.request_id)
                for v in valid
                if v.record.request_id is not None
            },
        )
    rows: list[CallRow] = []  # PostgreSQL: the new calls' COPY rows
    new_keys: list[tuple[int, int, int]] = []  # and their (session, turn, call)
    new_calls: list[LLMCall] = []  # elsewhere: their unsaved instances
    events: list[tuple[LLMCall, Sequence[ProviderEvent]]] = []
    decided: list[ItemResult] = []
    created_sessions: set[int] = set()
    for v in valid:
        record = v.record
        session_pk = pk_of[record.session_id]
        status, name, detail = keys.decide(session_pk, record, v.payload_hash)
        decided.append(
            ItemResult(
                v.index,
                status,
                session_id=record.session_id,
                turn=record.turn,
                call=record.call,
                field=name,
                detail=detail,
            )
        )
        if status == "created":
            pricer = catalogue.pricer(record.model)
            call = None
            if set_wise:
                rows.append(inserted or call_values(session_pk, v, pricer, now))
                new_keys.append((session_pk, record.turn, record.call))
            else:
                call = call_row(sessions[record.session_id], v, pricer, now)
                new_calls.append(call)
            if v.provided.events:
                session = sessions[record.session_id]
                events.append((call or call_row(session, v, pricer, now), v.provided.events))
            created_sessions.add(session_pk)

    touched = {
        (pk_of[d.session_id or ""], d.turn or 0)
        for d in decided
        if d.status in ("created", "duplicate")
    }
    if set_wise:
        # The database derives the turns from the rows it has just copied.
        if speculative:
            if (inserted is not None) != (decided[0].status == "created"):
                # the statement and `decide` judge a record new by the same keys: never apart
                raise AssertionError(f"a {decided[0].status} record, inserted: {inserted}")
        elif statements.few(rows):
            new_rows.insert_few(LLMCall, rows)
        else:
            new_rows.copy_rows(LLMCall, rows)
        record_provider_events(events)
        changed = (
            derived
            if speculative
            else turn_derivation.derive_turns(
                Turn, LLMCall, sorted({(sid, turn) for sid, turn, _ in new_keys})
            )
        )
        turn_calls = keys.calls_by_turn(touched)
        return (
            created_sessions,
            decided,
            turn_calls,
            lambda: add_calls_statement(profile.pk, rows),
            changed,
            rows,
        )
    new_rows.insert_rows(LLMCall, new_calls)
    record_provider_events(events)
    new_figures: dict[tuple[int, int], list[CallFigures]] = defaultdict(list)
    for c in new_calls:
        new_figures[(c.session_id, c.turn)].append(call_figures(c))
    turn_calls = rederive_turns(
        touched, write=set(new_figures), stored=keys.stored_turns, new=new_figures
    )
    # the overview's hour rollups
    return (
        created_sessions,
        decided,
        turn_calls,
        lambda: add_to_hourly_usage(profile.pk, new_calls),  # written at once: nothing to run
        None,
        [],
    )


def _refresh_sessions(
    profile: AgentProfile,
    policy: PolicyValues,
    sessions: dict[str, AgentSession],
    created_in: set[int],
    catalogue: OnceCatalogue,
    changed: dict[int, tuple[Turn, dict[str, Any]]] | None,
) -> list[AgentSession]:
    """Bring the stored figures of `sessions` up to date: from what the turn derivation changed
    where it can (PostgreSQL, `advance_session_figures`: no read of the session's other turns),
    else re-derived from all their turns (one more read). The caller writes them (one statement,
    beside the hour rollups on PostgreSQL)."""
    rows = list(sessions.values())
    by_pk = {s.pk: s for s in rows}
    last_turns, rest = advance_session_figures(rows, changed) if changed else ({}, rows)
    if rest:
        last_turns.update(derive_session_figures(rest))
    for pk, last in last_turns.items():
        session_state.apply_usage_report(
            by_pk[pk],
            last,
            window=resolve_window(profile, last, catalogue.price, by_pk[pk]),
            new_report=pk in created_in,
            policy=policy,
        )
    return rows
