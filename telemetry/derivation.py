"""Ingest step 4: turn and session figures, derived from their rows.

A turn's figures come from all its calls (`telemetry.accounting.summarize_turn`), a session's
from all its turns, so a retry or a concurrent batch cannot leave them off by one. Each costs a
constant number of statements whatever the batch size: turns in two, sessions in two reads.
On PostgreSQL the ingest derives new calls' turns in the database instead
(`telemetry.ingest.turn_derivation.derive_turns`, the same figures as `summarize_turn`);
`rederive_turns` is the other backends' path.

On PostgreSQL a session's totals are then brought forward rather than re-read
(`advance_session_figures`, `telemetry.session_totals`): the statement that re-derives the
touched turns also reads them as they were, under the session's lock, so the difference it
returns is exactly what changed; a session's other turns are not read, so a record into a
10,000-turn session costs about what one into a short session does (docs/performance.md). Where
that does not apply (no new calls, or a late call to an earlier turn than the last) and on the
other backends, `derive_session_figures` reads all the session's turns as before; the tests hold
the two equal after every submission (tests/db/test_set_wise_derivation.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import fields
from operator import attrgetter
from types import SimpleNamespace
from typing import Any

from django.db.models import Aggregate, Count, F, Max, Sum, Window

from telemetry.accounting import CallFigures, summarize_turn
from telemetry.costing import CallRow
from telemetry.figures import SESSION_AGGREGATES, SESSION_TOTALS, TURN_FIGURE_NAMES
from telemetry.figures import turn_values as turn_values  # the turn's row, for other writers
from telemetry.ingest.latest_rows import latest_with_totals
from telemetry.ingest.upserts import upsert_rows
from telemetry.models import AgentSession, LLMCall, Turn
from telemetry.session_totals import Change, Totals, advance, joined, totals_from_json
from telemetry.usage import BUCKETS

# A stored call's fields its turn's figures read (`CallFigures`), by name.
_CALL_FIELDS = (
    "session_id",
    "turn",
    "call",
    "at",
    "model",
    *BUCKETS,
    "reasoning_output",
    "reported_cache",
    "appended_chars",
    "window_tokens",
    "surface_version",
    *(f"cost_{bucket}" for bucket in BUCKETS),
    "no_cache_cost_usd",
)
# `CallFigures`' fields read from the call's of the same name, in their order; its last two
# (its cost buckets and no-cache cost) are read apart
_FIGURE_FIELDS = tuple(f.name for f in fields(CallFigures))[:-2]
assert tuple(f.name for f in fields(CallFigures))[-2:] == ("cost_buckets", "no_cache_cost")
_FIGURES = attrgetter(*_FIGURE_FIELDS)
_COSTS = attrgetter(*(f"cost_{bucket}" for bucket in BUCKETS))


def _figures_of(row: dict[str, Any]) -> CallFigures:
    return call_figures(SimpleNamespace(**row))  # type: ignore[arg-type]


def call_figures(call: LLMCall | CallRow) -> CallFigures:
    """What a new (unsaved or just inserted) call contributes to its turn: its instance, or its
    row for COPY (`telemetry.costing.CallRow` reads by the same names)."""
    buckets = _COSTS(call)
    # positional, in the order of `CallFigures`' own fields: this runs once per stored call
    values = (*_FIGURES(call), None if buckets[0] is None else buckets, call.no_cache_cost_usd)
    return CallFigures(*values)


def rederive_turns(
    touched: set[tuple[int, int]],
    *,
    write: set[tuple[int, int]],
    stored: set[tuple[int, int]] | None = None,
    new: dict[tuple[int, int], list[CallFigures]] | None = None,
) -> dict[tuple[int, int], list[int]]:
    """Re-derive the figures of `touched` turns from all their calls; upsert those in `write`.

    `stored` names the touched turns that held calls before this submission (the idempotency
    read saw them) and `new` the calls this submission added, by turn. A turn with no stored
    call is summarised from its new calls alone, which are then all of its calls (the session
    lock keeps other writers out); only the others are read back. Without `stored`, every
    touched turn is read back. Returns each touched turn's call numbers, sorted.
    """
    if not touched:
        return {}
    new = new or {}
    read_back = touched if stored is None else touched & stored
    grouped: dict[tuple[int, int], list[CallFigures]] = defaultdict(list)
    if read_back:
        rows = LLMCall.objects.filter(
            session_id__in={sid for sid, _ in read_back},
            turn__in={turn for _, turn in read_back},
        ).values_list(*_CALL_FIELDS)
        for row in rows:
            pair = (row[0], row[1])
            if pair in read_back:
                grouped[pair].append(_figures_of(dict(zip(_CALL_FIELDS, row, strict=True))))
    for pair in touched - read_back:
        grouped[pair] = list(new.get(pair, ()))
    figures = {pair: summarize_turn(calls) for pair, calls in grouped.items() if calls}
    pairs = sorted(write)
    upsert_rows(
        Turn,
        ["session_id", "turn", *TURN_UPDATE_FIELDS],
        [turn_values(sid, turn, figures[(sid, turn)]) for sid, turn in pairs],
        unique=["session_id", "turn"],
    )
    return {pair: sorted(c.call for c in calls) for pair, calls in grouped.items() if calls}


# A turn's derived columns (`telemetry.figures.TURN_FIGURES`), each written by its name.
TURN_UPDATE_FIELDS = list(TURN_FIGURE_NAMES)


def _per_session(aggregate: Aggregate) -> Window:
    return Window(aggregate, partition_by=[F("session_id")])


_AGGREGATES = {"COUNT": Count, "SUM": Sum, "MAX": Max}


def _latest_turns(session_ids: list[int]) -> list[tuple[Turn, dict[str, Any]]]:
    """Each session's latest turn and its totals over all its turns, in one statement."""
    found = latest_with_totals(
        Turn, session_ids, partition="session_id", latest="turn", totals=SESSION_AGGREGATES
    )
    if found is not None:
        return found
    # Elsewhere the ORM: window aggregates over each session's turns, kept on the row of its
    # latest turn (Django filters on a window in an outer query).
    rows = (
        Turn.objects.filter(session_id__in=session_ids)
        .annotate(
            last_turn_no=_per_session(Max("turn")),
            **{
                name: _per_session(_AGGREGATES[function](attname))
                for name, function, attname in SESSION_AGGREGATES
            },
        )
        .filter(turn=F("last_turn_no"))
    )
    return [
        (turn, {name: getattr(turn, name) for name, _, _ in SESSION_AGGREGATES}) for turn in rows
    ]


def derive_session_figures(sessions: list[AgentSession]) -> dict[int, Turn]:
    """Set the figures of `sessions` (in memory) from their turns; returns each one's last turn.

    A session without turns is left as it is and absent from the result.
    """
    by_pk = {s.pk: s for s in sessions}
    found: dict[int, Turn] = {}
    for last, row in _latest_turns(list(by_pk)):
        session = by_pk.get(last.session_id)
        if session is None:
            continue
        # NULL sums (no turn reported its cache) are 0; a NULL cost is unknown, never 0
        totals: dict[str, Any] = {
            t.name: row[f"total_{t.name}"]
            if t.kind in ("max", "money")
            else row[f"total_{t.name}"] or 0
            for t in SESSION_TOTALS
        }
        # joined with what retention removed: the kept turns alone are not all the session's
        retired = totals_from_json(session.retired_totals)
        _set_figures(session, last, joined(retired, Totals(**totals)))
        found[session.pk] = last
    return found


def advance_session_figures(
    sessions: list[AgentSession], changed: dict[int, tuple[Turn, dict[str, Any]]]
) -> tuple[dict[int, Turn], list[AgentSession]]:
    """Set the figures of the `sessions` whose turns `changed` (`turn_derivation.derive_turns`) from
    their stored figures and that change alone (`telemetry.session_totals`), when the highest
    touched turn is the session's last; returns their last turns, and the sessions left for
    `derive_session_figures` (no new calls, or a late call to an earlier turn)."""
    found: dict[int, Turn] = {}
    rest: list[AgentSession] = []
    for session in sessions:
        entry = changed.get(session.pk)
        if entry is None or (session.turns_count and entry[0].turn < (session.last_turn or 0)):
            rest.append(session)
            continue
        top, change = entry
        stored = Totals()
        if session.turns_count:
            stored = Totals(
                turns=session.turns_count,
                calls=session.calls_count,
                max_rounds=session.max_turn_rounds,
                peak=session.peak_context_tokens,
                read=session.cache_read_tokens,
                denominator=session.cache_denominator_tokens,
                reported=session.cache_reported_calls,
                cost=session.cost_usd,
                no_cache=session.no_cache_cost_usd,
                unpriced=session.unpriced_calls,
                last_seen=session.last_seen_at,
            )
        _set_figures(session, top, advance(stored, Change(**change)))
        found[session.pk] = top
    return found, rest


def _set_figures(session: AgentSession, last: Turn, totals: Totals) -> None:
    session.model = last.model
    session.turns_count = totals.turns
    session.calls_count = totals.calls
    session.last_turn = last.turn
    session.last_turn_rounds = last.calls
    session.max_turn_rounds = totals.max_rounds or 0  # None only for a session without turns
    session.current_context_tokens = last.last_call_context_tokens
    session.peak_context_tokens = totals.peak
    session.cache_read_tokens = totals.read
    session.cache_denominator_tokens = totals.denominator
    session.cache_reported_calls = totals.reported
    session.last_turn_cache_hit_ratio = last.cache_hit_ratio
    session.cost_usd = totals.cost
    session.no_cache_cost_usd = totals.no_cache
    session.unpriced_calls = totals.unpriced
    session.last_seen_at = totals.last_seen
