"""Store what an OTLP export mapped to, through the one ingest path.

The mapping (`telemetry.otlp.mapping`) leaves two numbers open that only the database knows:
the turn (a trace id or a Claude Code prompt id is numbered the first time its session sees it,
`TurnKey`) and the call's position in its turn (the next free one, in start-time order; a call
already stored keeps its own, so a replayed export builds byte-identical records). The records
then go to `telemetry.ingest.pipeline.ingest_records` like any JSON API batch: the same validation,
normalisation, pricing, idempotency and figures. A record whose fields the mapping made from
typed protobuf values and that keep `RecordIn`'s rules goes as a `validation.Typed`, its fields
not validated again (`validation.typed`; tests/db/test_typed_records.py holds the outcome equal
to the JSON record's); every other check is the same. Context events go to
`telemetry.events.record_context_event`.

One provider request reported by several sources is stored once (`telemetry.otlp.same_request`):
of the reports that arrive together the richer goes in and the others count as duplicates, and
a report of a request the session already holds is a duplicate too, before any turn is numbered
for it: a stored call's figures are never rewritten; only the reporter's own cost, which no total
holds, is filled in when the stored call lacks it.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from telemetry.events import record_context_event
from telemetry.idempotency import StoredCall
from telemetry.ingest.call_keys import requests_arrays
from telemetry.ingest.new_rows import copy_rows
from telemetry.ingest.pipeline import ingest_records
from telemetry.ingest.statements import run, vendor
from telemetry.ingest.values import text_array
from telemetry.models import AgentKey, AgentSession, LLMCall, Turn, TurnKey
from telemetry.otlp.mapping import CallDraft, EventDraft, Mapped, Rejection
from telemetry.otlp.same_request import keep_richer
from telemetry.packing import stored_table
from telemetry.session_state import (
    discard_unused_sessions,
    lock_sessions,
    merge_metadata,
    write_merged,
)
from telemetry.usage import CLAUDE_CODE
from telemetry.validation import Typed, typed

CHUNK = 1_000  # records per store_records call (the JSON API's batch limit)


@dataclass
class Stored:
    """The outcome of one export: counts for the OTLP response and the tests."""

    created: int = 0
    duplicates: int = 0
    events_created: int = 0
    events_duplicates: int = 0
    ignored: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    unknown_events: dict[str, int] = field(default_factory=dict)

    def message(self, noun: str) -> str:
        """The partial-success message: what was rejected and why, and what was ignored."""
        parts: list[str] = []
        if self.rejected:
            reasons = "; ".join(str(r) for r in self.rejected[:5])
            more = f" (and {len(self.rejected) - 5} more)" if len(self.rejected) > 5 else ""
            parts.append(f"rejected {len(self.rejected)} {noun}: {reasons}{more}")
        if self.ignored:
            what = "LLM calls" if noun == "spans" else "Claude Code events we read"
            parts.append(f"ignored {self.ignored} {noun} that are not {what}")
        if self.unknown_events:
            names = ", ".join(f"{k} x{v}" for k, v in sorted(self.unknown_events.items())[:10])
            parts.append(f"unknown events: {names}")
        return "; ".join(parts)


def store_mapped(
    key: AgentKey,
    mapped: Mapped,
    *,
    on_commit: Callable[[list[int]], None] | None = None,
) -> Stored:
    """Number, then ingest the calls of one export and record its context events."""
    stored = Stored(
        ignored=mapped.ignored,
        rejected=list(mapped.rejected),
        unknown_events=dict(mapped.unknown_events),
    )
    if not mapped.calls and not mapped.events:
        return stored
    profile = key.profile
    calls, dropped = keep_richer(mapped.calls)
    stored.duplicates += len(dropped)
    wanted = {c.session_id for c in calls} | {e.session_id for e in mapped.events}
    with transaction.atomic():
        known = _stored_sessions(profile.pk, wanted)
        sessions = lock_sessions(profile, wanted)
        read = _read_stored(sessions, calls, mapped.events)
        stored_at = _stored_positions(sessions, calls, read)
        held = _held_requests(sessions, calls, stored_at)
        if held:
            skipped = {id(c) for c in held}
            calls = [c for c in calls if id(c) not in skipped]
            stored.duplicates += len(held)
            _fill_in_reported_costs(sessions, held)
        turns, next_call = _number_turns(sessions, calls, mapped.events, read)
        records, drafts = _records(sessions, turns, next_call, calls, stored_at)
        # The stored calls under the records' identities, read above with the sessions locked:
        # the ingest reads only those at the records' positions. Not for a second chunk, which
        # must see the calls the first one stored.
        read_requests = read.calls if read is not None and len(records) <= CHUNK else None
        # What the spans said about their sessions, merged now: the ingest writes it with the
        # sessions' figures where it can (`session_state.figures_statement`), the rest after.
        metadata = _merged_metadata(sessions, calls)
        for start in range(0, len(records), CHUNK):
            # The key's policy and catalogue, remembered per process like the JSON API's.
            result = ingest_records(
                key=key,
                raw_items=records[start : start + CHUNK],
                batch=True,
                on_commit=on_commit,
                locked=sessions,  # locked above, in this transaction
                read_requests=read_requests,
                metadata=frozenset(metadata),
            )
            for pk in result.metadata:
                del metadata[pk]
            for item in result.items:
                draft = drafts[start + item.index]
                if item.status == "created":
                    stored.created += 1
                elif item.status == "duplicate":
                    stored.duplicates += 1
                else:
                    reason = item.detail or item.status
                    field_name = (item.field or "record").removeprefix(f"records.{item.index}.")
                    stored.rejected.append(
                        Rejection(draft.index, field_name, reason.split(": ", 1)[-1])
                    )
        _record_events(sessions, turns, mapped.events, stored)
        write_merged(metadata)
        # A session this export opened but none of whose records were kept is not left behind.
        opened = [s.pk for eid, s in sessions.items() if eid not in known]
        if opened and stored.rejected:
            discard_unused_sessions(opened)
    stored.rejected.sort(key=lambda r: r.index)
    return stored


def _stored_sessions(profile_id: int, external_ids: set[str]) -> set[str]:
    """Which of `external_ids` the profile's sessions hold already: on PostgreSQL one fixed
    statement with the ids as one array (no ORM compiles it per export), elsewhere the ORM's
    `__in` (tests/db/test_otlp.py holds the two equal)."""
    if vendor() == "postgresql":
        found = run(
            _stored_sessions_sql(), [text_array(sorted(external_ids)), profile_id], by_index=True
        )
        return {external_id for (external_id,) in found}
    return set(
        AgentSession.objects.filter(
            profile_id=profile_id, external_id__in=external_ids
        ).values_list("external_id", flat=True)
    )


@functools.cache
def _stored_sessions_sql() -> str:
    quote = connection.ops.quote_name
    by_attname = {f.attname: f for f in AgentSession._meta.concrete_fields}
    profile, external_id = (quote(by_attname[a].column) for a in ("profile_id", "external_id"))
    # Each id probed through the (profile, external id) unique index: the first id from it
    # in the index's order, which is the id when the profile holds it (LATERAL, kept from being
    # flattened by `LIMIT`). As `external_id = ANY(…)` beside `profile = …`, or as an equality
    # probe of each id, the planner without statistics took another index on the profile as
    # readily (the two cost alike while the table is small) and filtered every session of the
    # profile per id, a read that grew with each export; the order asked for is the unique
    # index's alone (tests/db/test_otlp.py holds the probe).
    return (
        f"SELECT k.eid FROM unnest(%s::text[]) AS k (eid) CROSS JOIN LATERAL "
        f"(SELECT {external_id} FROM {quote(AgentSession._meta.db_table)} "
        f"WHERE {profile} = %s::bigint AND {external_id} >= k.eid "
        f"ORDER BY {profile}, {external_id} LIMIT 1) AS s WHERE s.{external_id} = k.eid"
    )


def _merged_metadata(
    sessions: dict[str, AgentSession], calls: list[CallDraft]
) -> dict[int, dict[str, Any]]:
    """What the calls' spans and resources said about their sessions (`session_meta`), merged
    into them in memory, not yet written (`session_state.merge_metadata`)."""
    found: dict[int, dict[str, str]] = {}
    # (session pk, id of a metadata dict) merged already: the calls of one resource share its
    # dict (`mapping.ResourceMetadata`), merged once per session, not copied per call
    merged: set[tuple[int, int]] = set()
    for call in calls:
        if call.metadata:
            pk = sessions[call.session_id].id
            if (pk, id(call.metadata)) in merged:
                continue
            merged.add((pk, id(call.metadata)))
            have = found.setdefault(pk, {})
            for name, value in call.metadata.items():
                have.setdefault(name, value)  # the first call's values win
    if not found:
        return {}
    return merge_metadata({s.pk: s for s in sessions.values()}, found, "otlp")


KeyRow = tuple[int, str, int, int | None]  # session pk, turn key, its turn, the turn's last call


@dataclass(frozen=True, slots=True)
class StoredRead:
    """What an export reads of its locked sessions before it numbers anything, in one statement
    on PostgreSQL (`_read_stored`): the stored calls under its drafts' identities (`StoredCall`:
    what `call_keys.stored_call_keys` reads of them, tests/db/test_otlp.py holds the two
    equal), the stored keys of its turn
    keys with their turns' last calls (`KeyRow`), and each session's last turn (`last_turns`).
    Each was a statement of its own, and the ingest read the identities again."""

    calls: list[StoredCall]
    keys: list[KeyRow]
    ends: dict[int, int | None]


def _read_stored(
    sessions: dict[str, AgentSession], calls: list[CallDraft], events: list[EventDraft]
) -> StoredRead | None:
    """`_stored_read` of every draft's identity and turn key (held requests' included: read
    before they are known), and of their sessions; None elsewhere than on PostgreSQL."""
    requests = sorted({(sessions[c.session_id].id, c.request_id) for c in calls})
    pairs = {(sessions[c.session_id].id, c.turn_key) for c in calls}
    pairs.update((sessions[e.session_id].id, e.turn_key) for e in events if e.turn_key is not None)
    return _stored_read(pairs, requests)


def _stored_read(pairs: set[tuple[int, str]], requests: list[tuple[int, str]]) -> StoredRead | None:
    """The `StoredRead` of the calls under `requests`, the stored turn keys of `pairs`
    ((session pk, key)) and those sessions' last turns: one statement on PostgreSQL whose text
    never varies (no ORM compiles it per export), None elsewhere (the ORM's reads:
    `_stored_positions`, `_turn_keys_orm` and `last_turns`; tests/db/test_otlp.py holds them
    equal). Each probe is an index probe or a `LIMIT 1` walk down the end of a unique index."""
    if vendor() != "postgresql":
        return None
    if not requests and not pairs:
        return StoredRead([], [], {})
    keys = sorted(pairs)
    ids = sorted({sid for sid, _ in keys})
    asked = sorted({sid for sid, _ in requests})
    found = run(
        _stored_read_sql(),
        [*requests_arrays(keys), ids, *requests_arrays(requests), asked],
        by_index=True,
    )
    read = StoredRead([], [], {})
    for kind, sid, text, turn, number, digest in found:
        if kind == _KEY:
            read.keys.append((sid, text, turn, number))
        elif kind == _END:  # its last derived turn and its last key's turn
            read.ends[sid] = _last_turn(turn, number)
        else:
            read.calls.append((sid, turn, number, text, digest))
    return read


# `_stored_read_sql`'s rows: a turn key, a session's end, a stored call.
_KEY, _END, _CALL = 0, 1, 2


@functools.cache
def _stored_read_sql() -> str:
    quote = connection.ops.quote_name

    def names(model: type[Any], *attnames: str) -> list[str]:
        by_attname = {f.attname: f for f in model._meta.concrete_fields}
        return [quote(stored_table(model)), *(quote(by_attname[a].column) for a in attnames)]

    keys, k_session, k_key, k_turn = names(TurnKey, "session_id", "key", "turn")
    calls, c_session, c_turn, c_call, c_request, c_digest = names(
        LLMCall, "session_id", "turn", "call", "request_id", "payload_hash"
    )
    turns, t_session, t_turn = names(Turn, "session_id", "turn")
    # The calls under the requests: `call_keys.stored_call_keys`' probe of each identity
    # through its unique index (LATERAL, kept from being flattened by `OFFSET 0`), asked only
    # of the sessions that hold a call (one `LIMIT 1` probe each): an export's sessions are
    # often new, holding nothing any of their identities' probes could find.
    holding = (
        f"SELECT s.sid FROM unnest(%s::bigint[]) AS s (sid) "
        f"WHERE EXISTS (SELECT FROM {calls} AS c WHERE c.{c_session} = s.sid)"
    )
    # Each (session, key) pair probed through the keys' (session, key) unique index, the
    # first key from it in the index's order, which is the key when the session holds it (as
    # `_stored_sessions_sql`: an equality probe the planner without statistics took through
    # the (session, turn) index as readily, and as `session = ANY(…) AND key = ANY(…)` it read
    # every key of the table).
    # (kind, session, key or request id, turn, the key's turn's last call / the session's last
    # key's turn / the call, the call's payload hash)
    return (
        f"SELECT {_KEY}, k.{k_session}, k.{k_key}, k.{k_turn}, (SELECT c.{c_call} FROM {calls} "
        f"AS c WHERE c.{c_session} = k.{k_session} AND c.{c_turn} = k.{k_turn} "
        f"ORDER BY c.{c_call} DESC LIMIT 1), NULL::bytea "
        f"FROM unnest(%s::bigint[], %s::text[]) AS p (sid, key) CROSS JOIN LATERAL "
        f"(SELECT {k_session}, {k_key}, {k_turn} FROM {keys} WHERE {k_session} = p.sid "
        f"AND {k_key} >= p.key ORDER BY {k_session}, {k_key} LIMIT 1) AS k "
        f"WHERE k.{k_key} = p.key "
        f"UNION ALL SELECT {_END}, s.sid, NULL, (SELECT t.{t_turn} FROM {turns} AS t "
        f"WHERE t.{t_session} = s.sid ORDER BY t.{t_turn} DESC LIMIT 1), "
        f"(SELECT k.{k_turn} FROM {keys} AS k WHERE k.{k_session} = s.sid "
        f"ORDER BY k.{k_turn} DESC LIMIT 1), NULL FROM unnest(%s::bigint[]) AS s (sid) "
        f"UNION ALL SELECT {_CALL}, c.{c_session}, c.{c_request}, c.{c_turn}, c.{c_call}, "
        f"c.{c_digest} FROM unnest(%s::bigint[], %s::text[]) AS k (sid, rid) CROSS JOIN "
        f"LATERAL (SELECT c.{c_session}, c.{c_request}, c.{c_turn}, c.{c_call}, c.{c_digest} "
        f"FROM {calls} AS c WHERE c.{c_session} = k.sid "
        f"AND c.{c_request} = k.rid OFFSET 0) AS c WHERE k.sid IN ({holding})"
    )


def _stored_positions(
    sessions: dict[str, AgentSession], calls: list[CallDraft], read: StoredRead | None
) -> dict[tuple[int, str], tuple[int, int]]:
    """(session pk, request id) -> (turn, call) of the drafts' identities already stored: from
    `read` on PostgreSQL, else the ORM's read."""
    if read is not None:
        return {(sid, rid or ""): (turn, call) for sid, turn, call, rid, _ in read.calls}
    if not calls:
        return {}
    return {
        (sid, rid or ""): (turn, call)
        for sid, rid, turn, call in LLMCall.objects.filter(
            session_id__any_of={sessions[c.session_id].id for c in calls},
            request_id__any_of={c.request_id for c in calls},
        ).values_list("session_id", "request_id", "turn", "call")
    }


def _held_requests(
    sessions: dict[str, AgentSession],
    calls: list[CallDraft],
    stored_at: dict[tuple[int, str], tuple[int, int]],
) -> list[CallDraft]:
    """The drafts of a provider request their session already holds (reported before, by this
    source or another): duplicates, whatever they carry."""
    return [
        c
        for c in calls
        if c.provider_request and (sessions[c.session_id].id, c.request_id) in stored_at
    ]


def _fill_in_reported_costs(sessions: dict[str, AgentSession], held: list[CallDraft]) -> None:
    """A stored call that lacks its reporter's own cost takes it from a later report of the same
    request (Claude Code's event after its span): that figure is only shown beside ours
    (`telemetry.otlp.costs`), in no total, so adding it rewrites nothing derived. Every other
    figure of a stored call stays as first stored."""
    costs = {
        (sessions[c.session_id].id, c.request_id): c.usage["cost_usd"]
        for c in held
        if "cost_usd" in c.usage
    }
    if not costs:
        return
    lacking = list(
        LLMCall.objects.filter(
            session_id__in={sid for sid, _ in costs}, request_id__in={rid for _, rid in costs}
        ).exclude(raw_usage__has_key="cost_usd")
    )
    for call in lacking:
        cost = costs.get((call.session_id, call.request_id or ""))
        if cost is not None:
            call.raw_usage = {**call.usage_as_sent, "cost_usd": cost}
    LLMCall.objects.bulk_update(lacking, ["raw_usage"])


def _number_turns(
    sessions: dict[str, AgentSession],
    calls: list[CallDraft],
    events: list[EventDraft],
    read: StoredRead | None,
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, int], int]]:
    """(session pk, turn key) -> turn number; new keys numbered after the session's last turn
    (from 0 in a session without turns, as on every door: docs/concepts.md), in the order of
    their earliest call (events without calls sort by their time).

    And (session pk, turn) -> the turn's next free call number, for the turns of keys already
    numbered that hold calls, read with the keys: a key numbered now names a turn after the
    session's last, which holds no call yet. The keys and the sessions' ends are `read`'s on
    PostgreSQL (a superset: of every draft, held ones included), else the ORM's reads."""
    earliest: dict[tuple[int, str], tuple[int, str]] = {}
    for call in calls:
        pair = (sessions[call.session_id].id, call.turn_key)
        if pair not in earliest or call.order < earliest[pair]:
            earliest[pair] = call.order
    for event in events:
        if event.turn_key is None:
            continue
        pair = (sessions[event.session_id].id, event.turn_key)
        micros = 0 if event.at is None else int(event.at.timestamp() * 1_000_000)
        earliest.setdefault(pair, (micros * 1000, event.source_key))
    if not earliest:
        return {}, {}
    session_ids = {sid for sid, _ in earliest}
    known: dict[tuple[int, str], int] = {}
    next_call: dict[tuple[int, int], int] = {}
    # elsewhere than on PostgreSQL the ORM's reads: the sessions' ends only when a key is new
    rows, ends = (
        (read.keys, read.ends)
        if read is not None
        else (_turn_keys_orm(session_ids, {k for _, k in earliest}), None)
    )
    for sid, key, turn, top in rows:
        known[(sid, key)] = turn
        if top is not None:
            next_call[(sid, turn)] = top + 1
    new = sorted((order, pair) for pair, order in earliest.items() if pair not in known)
    if new:
        last: dict[int, int] = defaultdict(lambda: -1)
        if ends is None:
            ends = last_turns(session_ids)
        last.update((sid, n) for sid, n in ends.items() if n is not None)
        created = []
        for _, (sid, turn_key) in new:
            last[sid] += 1
            known[(sid, turn_key)] = last[sid]
            created.append((sid, turn_key, last[sid]))
        _insert_turn_keys(created)
    return {pair: known[pair] for pair in earliest}, next_call


# A new turn key's values, in the order of TurnKey's columns (tests/db/test_otlp.py holds it).
TURN_KEY_FIELDS = ("session_id", "key", "turn")


def _insert_turn_keys(rows: list[tuple[int, str, int]]) -> None:
    """New turn keys, each (session pk, key, turn) as `TURN_KEY_FIELDS`: on PostgreSQL COPY of
    the tuples (no model instance made per key), elsewhere the ORM's bulk insert."""
    if vendor() == "postgresql":
        copy_rows(TurnKey, rows)
        return
    TurnKey.objects.bulk_create(
        [TurnKey(**dict(zip(TURN_KEY_FIELDS, row, strict=True))) for row in rows]
    )


def _turn_keys_orm(session_ids: set[int], keys: set[str]) -> list[KeyRow]:
    """`StoredRead.keys` through the ORM (SQLite; `last_turns` the ends)."""
    # each key's turn's last call: a `LIMIT 1` walk down the calls' (session, turn, call) index
    top_call = LLMCall.objects.filter(
        session_id=OuterRef("session_id"), turn=OuterRef("turn")
    ).order_by("-call")
    return list(
        TurnKey.objects.filter(session_id__any_of=session_ids, key__any_of=keys)
        .annotate(top=Subquery(top_call.values("call")[:1]))
        .values_list("session_id", "key", "turn", "top")
    )


def _last_turn(turn: int | None, key: int | None) -> int | None:
    """A session's last turn of its last derived turn and its last key's turn (None: neither)."""
    return None if turn is None and key is None else max(turn or 0, key or 0)


def last_turns(session_ids: Iterable[int]) -> dict[int, int | None]:
    """Each session's last turn number, of its derived turns and its OTLP turn keys (None:
    neither).

    One statement; each session's two numbers are read by a `LIMIT 1` walk down the end of its
    (session, turn) unique index. A `MAX(turn) … GROUP BY session` read every turn of the
    session instead, on every export that opened a turn: a cost that grew with the session.
    """
    newest_turn = Turn.objects.filter(session_id=OuterRef("pk")).order_by("-turn")
    newest_key = TurnKey.objects.filter(session_id=OuterRef("pk")).order_by("-turn")
    rows = (
        AgentSession.objects.filter(pk__in=list(session_ids))
        .annotate(
            top_turn=Subquery(newest_turn.values("turn")[:1]),
            top_key=Subquery(newest_key.values("turn")[:1]),
        )
        .values_list("pk", "top_turn", "top_key")
    )
    return {pk: _last_turn(turn, key) for pk, turn, key in rows}


# The order in which an export's new calls take their positions: start time, then identity.
_ORDER = operator.attrgetter("order", "request_id")


def _records(
    sessions: dict[str, AgentSession],
    turns: dict[tuple[int, str], int],
    next_call: dict[tuple[int, int], int],
    calls: list[CallDraft],
    stored_at: dict[tuple[int, str], tuple[int, int]],
) -> tuple[list[dict[str, Any] | Typed], list[CallDraft]]:
    """The records of the call drafts (`validation.Typed` when `validation.typed` takes them,
    else JSON API records): stored calls keep their position (`stored_at`,
    `_stored_positions`); new ones take the next free positions of their turn (`next_call`, of
    `_number_turns`; 0 in a turn without calls), in start-time order."""
    next_call = dict(next_call)
    pk = {external_id: session.id for external_id, session in sessions.items()}
    positions: dict[tuple[int, str], tuple[int, int]] = dict(stored_at)  # stored: their own
    for draft in sorted(calls, key=_ORDER):
        sid = pk[draft.session_id]
        identity = (sid, draft.request_id)
        if identity in positions:
            continue
        turn = turns[(sid, draft.turn_key)]
        call = next_call.get((sid, turn), 0)
        next_call[(sid, turn)] = call + 1
        positions[identity] = (turn, call)
    records: list[dict[str, Any] | Typed] = []
    for draft in calls:
        turn, call = positions[(pk[draft.session_id], draft.request_id)]
        record: dict[str, Any] = {
            "session_id": draft.session_id,
            "turn": turn,
            "call": call,
            "model": draft.model,
            "provider": draft.provider,
            "usage": draft.usage,
            "request_id": draft.request_id,
        }
        if draft.source == CLAUDE_CODE:
            # its untiered cache writes are billed at the tier Claude Code writes with
            record["agent"] = CLAUDE_CODE
        if draft.window_tokens is not None:
            record["window_tokens"] = draft.window_tokens
        if draft.diagnostics:
            record.update(draft.diagnostics)
        built = typed(record, draft.at)  # the usual draft: no JSON round trip
        if built is not None:
            records.append(built)
            continue
        if draft.at is not None:
            record["at"] = draft.at.isoformat()
        records.append(record)
    return records, list(calls)


def _record_events(
    sessions: dict[str, AgentSession],
    turns: dict[tuple[int, str], int],
    events: Iterable[EventDraft],
    stored: Stored,
) -> None:
    events = list(events)
    if not events:
        return
    wanted = {e.call_request_id for e in events if e.call_request_id is not None}
    calls = {
        (c.session_id, c.request_id or ""): c
        for c in LLMCall.objects.filter(
            session_id__in={s.pk for s in sessions.values()}, request_id__in=wanted
        )
    }
    now: datetime = timezone.now()
    for event in events:
        session = sessions[event.session_id]
        turn = turns.get((session.pk, event.turn_key)) if event.turn_key else None
        call = calls.get((session.pk, event.call_request_id or ""))
        if turn is None and call is not None:
            turn = call.turn
        before, after = event.tokens_before, event.tokens_after
        if call is not None and before is None and after is None:
            before, after = _around(call)
        _, created = record_context_event(
            session,
            kind=event.kind,
            origin=event.origin,
            source=event.source,
            source_key=event.source_key[:200],
            at=event.at or now,
            trigger=event.trigger,
            turn=turn,
            call=call,
            tokens_before=before,
            tokens_after=after,
            summary=event.summary,
            detail=event.detail,
        )
        if created:
            stored.events_created += 1
        else:
            stored.events_duplicates += 1


def _around(call: LLMCall) -> tuple[int | None, int]:
    """A compacted call's context before (the session's previous call) and after (its own)."""
    previous = (
        LLMCall.objects.filter(session_id=call.session_id)
        .filter(Q(turn__lt=call.turn) | Q(turn=call.turn, call__lt=call.call))
        .order_by("-turn", "-call")
        .values_list("context_tokens", flat=True)
        .first()
    )
    return previous, call.context_tokens
