"""Retention of raw calls and turns, per profile (`call_retention_days`; 0 keeps them forever).

A turn whose last call is older than its profile's retention is removed with its calls; what
the console's figures are read from stays: the hour rollups (the overview), the session row's
totals (the sessions list and the session's figures), compaction runs and context events (an
event's link to a removed call becomes empty). So the figures over any period are unchanged
while the raw rows are gone. A session's removed turns leave their totals in its
`retired_totals`, which every re-derivation of its figures from the kept turns joins back in
(`derivation.derive_session_figures`). Each session's latest turn is always kept: the projection of its
next request reads it. Turn keys stay too, so a replayed span still lands in its old turn.

The rule is `expired_turns`, once. Where sessions pack (PostgreSQL, `telemetry.packing`) it
is read from the two places a turn is stored, never from the view over both (whose filter on
`last_at` reaches no packed turn without unnesting every one):

- the hot table, by its BRIN index on `last_at` (`turn_last_at_brin`): sessions not packed;
- the packed chunks whose `expires_at` is before their profile's cut-off (`packing.Expiry`,
  an index range per profile), unnested: only those can hold an expired turn.

Removal is set-wise and bounded: at most `BATCH_TURNS` turns and their calls a run; the
periodic job runs it again while there is more (`telemetry.tasks.apply_retention`). Hot turns
go first, their sessions locked for the one short transaction that records and removes them,
skipping any a writer holds (SKIP LOCKED: retention never waits for ingest; a skipped session
is left for the next run). Then packed sessions,
in one transaction: at most `BATCH_SESSIONS` of them locked, skipping any a writer holds
(SKIP LOCKED), unpacked, their expired turns and calls removed, packed again. An export of
the period first (`manage.py export_sessions --before`) can restore it later (docs/export.md).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast

from django.db import connection, transaction
from django.db.models import SET_NULL, F, Model, Q, QuerySet
from django.db.models.sql.datastructures import BaseTable
from django.utils import timezone

from telemetry import packing
from telemetry.models import AgentProfile, AgentSession, LLMCall, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy
from telemetry.session_totals import TurnSums, joined, of_turns, totals_as_json, totals_from_json

BATCH_TURNS: Final = 1000
# Packed sessions one run unpacks at most (each holds at least one expired turn).
BATCH_SESSIONS: Final = 100


RetentionField = Literal["call_retention_days", "log_retention_days"]


def cutoffs(
    policies: Mapping[int, PolicyValues],
    now: datetime,
    field: RetentionField = "call_retention_days",
) -> dict[int, datetime]:
    """By profile id: the time before which what `field` keeps goes (raw calls and turns, or
    the text of log messages: `compaction.log_retention`); profiles keeping it forever (0)
    are left out."""
    return {
        pk: now - timedelta(days=getattr(policy, field))
        for pk, policy in policies.items()
        if getattr(policy, field) > 0
    }


def expired_turns(by_profile: Mapping[int, datetime]) -> Q:
    """The turns retention removes (a `Turn` filter): ended before their profile's cut-off, and
    not their session's latest. Matches nothing for no cut-off."""
    if not by_profile:
        return Q(pk__in=[])
    older = functools.reduce(
        operator.or_,
        (Q(session__profile_id=pk, last_at__lt=cutoff) for pk, cutoff in by_profile.items()),
    )
    return older & ~Q(turn=F("session__last_turn"))


class _Source(BaseTable):
    """The FROM of a `Turn` query read from a relation of the same columns (the hot table, the
    candidate chunks unnested) under the query's own alias, so every column reference the
    rule compiled to reads it unchanged."""

    def __init__(self, alias: str, sql: str, params: Sequence[Any]) -> None:
        super().__init__(alias, alias)
        self.sql = sql
        self.params = list(params)

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return f"({self.sql}) {connection.ops.quote_name(self.table_alias)}", self.params


def _over(queryset: QuerySet[Any, Any], sql: str, params: Sequence[Any]) -> tuple[str, list[Any]]:
    """`queryset` (of `Turn`) compiled to read its turns from `sql` instead of the model's."""
    query = queryset.query.clone()
    query.alias_map[query.get_initial_alias()] = _Source(query.base_table, sql, params)
    compiled, compiled_params = query.sql_with_params()
    return compiled, list(compiled_params)


def _hot() -> tuple[str, list[Any]]:
    return f"SELECT * FROM {connection.ops.quote_name(packing.stored_table(Turn))}", []


def _packed(
    by_profile: Mapping[int, datetime], sessions: Sequence[int] | None = None
) -> tuple[str, list[Any]]:
    """The turns of the packed chunks that can hold one `expired_turns(by_profile)` matches
    (`packing.Expiry`), unnested; only `sessions`' when given."""
    chunks, params = _candidate_chunks(by_profile, "p.*")
    if sessions is not None:
        chunks = f"SELECT * FROM ({chunks}) AS c WHERE c.session_id = ANY(%s)"
        params.append(list(sessions))
    return f"SELECT u.* FROM ({chunks}) AS p CROSS JOIN LATERAL unnest(p.stored) AS u", params


def _candidate_chunks(by_profile: Mapping[int, datetime], columns: str) -> tuple[str, list[Any]]:
    """`columns` of the packed chunks of turns whose `expires_at` is before their profile's
    cut-off: one range of the index a profile."""
    table = connection.ops.quote_name(f"{Turn._meta.db_table}_packed")
    ranges = " UNION ALL ".join(
        f"SELECT {columns} FROM {table} AS p WHERE p.profile_id = %s AND p.expires_at < %s"
        for _ in by_profile
    )
    return ranges, [value for item in by_profile.items() for value in item]


def expiring(rule: Q, by_profile: Mapping[int, datetime]) -> tuple[int, int]:
    """(turns, calls) of `Turn.objects.filter(rule)`, where `rule` implies
    `expired_turns(by_profile)`: read from the hot table and the candidate chunks alone."""
    turns = calls = 0
    if not by_profile:
        return turns, calls
    for sql, params in _sources(by_profile):
        query = Turn.objects.filter(rule).order_by().values_list("calls")
        if sql is None:
            rows_sql, found_params = query.query.sql_with_params()
            rows_params = list(found_params)
        else:
            rows_sql, rows_params = _over(query, sql, params)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), COALESCE(sum(t.calls), 0) FROM ({rows_sql}) AS t", rows_params
            )
            found, their_calls = cursor.fetchone()
        turns += int(found)
        calls += int(their_calls)
    return turns, calls


def _sources(by_profile: Mapping[int, datetime]) -> list[tuple[str | None, list[Any]]]:
    """Where expired turns are read: the model's table (None) where nothing packs, else the
    hot table and the candidate chunks."""
    if not packing.installed():
        return [(None, [])]
    return [_hot(), _packed(by_profile)]


@dataclass(frozen=True)
class Removed:
    calls: int
    turns: int
    has_more: bool


Doomed = list[tuple[int, int, int]]  # (turn id, session id, turn)


def remove_expired_calls(*, batch_turns: int = BATCH_TURNS, now: datetime | None = None) -> Removed:
    """Delete at most `batch_turns` expired turns (`expired_turns`) and their calls: the hot
    ones first, then those of packed sessions with the rest of the batch."""
    now = now or timezone.now()
    policies = {profile.pk: effective_policy(profile) for profile in AgentProfile.objects.all()}
    found = cutoffs(policies, now)
    if not found:
        return Removed(0, 0, False)
    rule = expired_turns(found)
    query = Turn.objects.filter(rule).order_by().values_list("pk", "session_id", "turn")
    if packing.installed():
        sql, params = _over(query[: batch_turns + 1], *_hot())
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            doomed: Doomed = [tuple(row) for row in cursor.fetchall()]
    else:
        doomed = list(query[: batch_turns + 1])
    has_more = len(doomed) > batch_turns
    doomed = doomed[:batch_turns]
    calls = turns = 0
    if doomed:
        with transaction.atomic():
            kept = _retire(doomed)
            # a session a writer holds keeps its turns for the next run
            has_more = has_more or len(kept) < len(doomed)
            calls, turns = _delete(kept) if kept else (0, 0)
    if has_more or not packing.installed():
        return Removed(calls, turns, has_more)
    packed = _remove_packed(rule, found, batch_turns - len(doomed))
    return Removed(calls + packed.calls, turns + packed.turns, packed.has_more)


def _remove_packed(rule: Q, found: Mapping[int, datetime], budget: int) -> Removed:
    """Up to `budget` expired turns of packed sessions and their calls, in one transaction:
    the candidate sessions locked (any a writer holds skipped), unpacked, their expired turns
    removed, packed again."""
    if budget <= 0:
        return Removed(0, 0, True)
    sessions = connection.ops.quote_name(AgentSession._meta.db_table)
    limit = min(budget, BATCH_SESSIONS)
    chunks, params = _candidate_chunks(found, "p.session_id")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT s.id FROM {sessions} AS s WHERE s.packed AND s.id IN ("
                f"SELECT c.session_id FROM ({chunks}) AS c LIMIT %s) "
                "ORDER BY s.id FOR UPDATE OF s SKIP LOCKED",
                [*params, limit],
            )
            locked = [row[0] for row in cursor.fetchall()]
        if not locked:
            return Removed(0, 0, False)
        query = (
            Turn.objects.filter(rule)
            .order_by("session_id", "turn")
            .values_list("pk", "session_id", "turn")[: budget + 1]
        )
        sql, params = _over(query, *_packed(found, locked))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            doomed: Doomed = [tuple(row) for row in cursor.fetchall()]
        has_more = len(doomed) > budget or len(locked) == limit
        if len(doomed) > budget:
            # the listing stops inside the batch: sessions it does not reach stay as they are
            doomed = doomed[:budget]
            reached = {session for _, session, _ in doomed}
            touched = [s for s in locked if s in reached]
        else:
            # every expired turn of these sessions is listed; one with none (its chunks'
            # `expires_at` older than its turns now say) is packed again, which resets it
            touched = locked
        packing.unpack_sessions(touched)
        calls, turns = _delete(_retire(doomed)) if doomed else (0, 0)
        packing.pack_sessions(touched)
    return Removed(calls, turns, has_more)


# The columns of a turn a session's totals are over (`session_totals.TurnSums`).
_SUMS = tuple(f.name for f in dataclass_fields(TurnSums))


def _retire(doomed: Doomed) -> Doomed:
    """Lock the sessions of `doomed` (skipping any a writer holds: it never waits for ingest)
    (SQLite has no row locks; its writers are serialised) and add the turns about to go to each
    one's `retired_totals`, so the figures a later
    re-derivation from the kept turns gives are still the session's; returns the doomed turns
    of the sessions locked (the caller's transaction)."""
    wanted = sorted({session_id for _, session_id, _ in doomed})
    locked = {
        s.pk: s
        for s in AgentSession.objects.select_for_update(skip_locked=True)
        .filter(pk__in=wanted)
        .order_by("pk")
        .only("pk", "retired_totals")
    }
    kept = [d for d in doomed if d[1] in locked]
    by_session: dict[int, list[int]] = {}
    for _, session_id, turn in kept:
        by_session.setdefault(session_id, []).append(turn)
    if not by_session:
        return kept
    sums: dict[int, list[TurnSums]] = {}
    rows = Turn.objects.filter(
        Q(session_id__in=list(by_session))
        & functools.reduce(
            operator.or_, (Q(session_id=s, turn__in=t) for s, t in by_session.items())
        )
    ).values_list("session_id", *_SUMS)
    for session_id, *values in rows:
        sums.setdefault(session_id, []).append(TurnSums(**dict(zip(_SUMS, values, strict=True))))
    for session_id, removed in sums.items():
        session = locked[session_id]
        retired = joined(totals_from_json(session.retired_totals), of_turns(removed))
        AgentSession.objects.filter(pk=session_id).update(retired_totals=totals_as_json(retired))
    return kept


def _delete(doomed: Doomed) -> tuple[int, int]:
    """Delete the turns `doomed` and their calls (the caller's transaction): (calls, turns).

    Rows are named by session and turn, never by id, and their sessions listed apart: on
    PostgreSQL the view's packed side is keyed by session, and a filter it cannot probe that
    key by unnests every packed row."""
    by_session: dict[int, list[int]] = {}
    for _, session_id, turn in doomed:
        by_session.setdefault(session_id, []).append(turn)
    theirs = Q(session_id__in=list(by_session)) & functools.reduce(
        operator.or_, (Q(session_id=s, turn__in=turns) for s, turns in by_session.items())
    )
    calls = LLMCall.objects.filter(theirs)
    # what the ORM's delete does to the rows linking a call (a context event's row stays,
    # its `call` emptied), done by the calls' sessions and turns instead of their ids
    for relation in LLMCall._meta.related_objects:
        if relation.on_delete is not SET_NULL:
            raise NotImplementedError(f"retention cannot remove calls {relation} protects")
        name = relation.field.name
        cast(type[Model], relation.related_model)._default_manager.filter(
            **{f"{name}__in": calls.values("pk")}
        ).update(**{name: None})
    if not packing.installed():
        return calls._raw_delete(calls.db), Turn.objects.filter(theirs)._raw_delete(calls.db)
    # The rows are hot (their sessions unpacked, or never packed; one packed since the scan
    # keeps its rows for a later run): deleted from the hot tables in one statement each,
    # where the view's trigger would take one call a row.
    pairs = [[s for _, s, _ in doomed], [t for _, _, t in doomed]]
    removed = []
    with connection.cursor() as cursor:
        for model in (LLMCall, Turn):
            cursor.execute(
                f"DELETE FROM {connection.ops.quote_name(packing.stored_table(model))} AS h "
                "USING unnest(%s::bigint[], %s::integer[]) AS d(session_id, turn) "
                "WHERE h.session_id = d.session_id AND h.turn = d.turn",
                pairs,
            )
            removed.append(cursor.rowcount)
    return removed[0], removed[1]
