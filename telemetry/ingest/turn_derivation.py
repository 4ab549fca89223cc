"""Turns derived by the database from their stored calls (`derive_turns`, PostgreSQL): one
upsert of the touched turns that also answers what it changed per session. The same figures as
`telemetry.accounting.summarize_turn`, the path of every other backend.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection, models

from telemetry.figures import (
    SESSION_CHANGE_READS,
    TURN_FIGURE_NAMES,
    TURN_FIGURES,
    session_change_sql,
)
from telemetry.ingest.statements import few, run
from telemetry.ingest.values import from_row, pairs_arrays
from telemetry.packing import stored_table


def derive_turns(
    turn_model: type[models.Model], call_model: type[models.Model], pairs: Sequence[tuple[int, int]]
) -> dict[int, tuple[Any, dict[str, Any]]]:
    """Re-derive the turns `pairs` ((session id, turn), without repeats) from all their stored
    calls and upsert them, in one `INSERT … SELECT … GROUP BY … ON CONFLICT DO UPDATE`.

    The same figures as `telemetry.accounting.summarize_turn` over the same calls (the SQLite
    path; tests/db/test_set_wise_turns.py holds the two equal): the peak call's context, sums,
    cache figures over the calls that reported their cache, costs over the priced calls (NULL
    when none was), and the highest call number's model, reply and sizes. PostgreSQL only:
    summarising in Python and sending 31 arrays back was a large share of a batch's CPU
    (docs/performance.md, P1); the database reads the rows it has just copied by their unique index.

    Returns, per session, its highest touched turn as stored now and what the statement changed
    in its touched turns, summed (`telemetry.session_totals.Change`'s fields): the same
    statement reads the touched turns as they were before it (its snapshot), so a session's
    totals move forward without reading its other turns (`telemetry.ingest.pipeline`).
    """
    if not pairs:
        return {}
    single = len(pairs) == 1
    sql, names, change = _derive_turns_sql(turn_model, call_model, single=single)
    keys = list(pairs[0]) if single else pairs_arrays(sorted(pairs))
    rows = run(sql, [*keys, *keys], by_index=not few(pairs))
    return derived_turns(turn_model, rows, names, change)


def derived_turns(
    turn_model: type[models.Model],
    rows: Sequence[Sequence[Any]],
    names: list[str],
    change: list[str],
) -> dict[int, tuple[Any, dict[str, Any]]]:
    """Per session, its highest touched turn (a model instance) and what the upsert changed."""
    width, session_at = len(names), names.index("session_id")
    out: dict[int, tuple[Any, dict[str, Any]]] = {}
    for values in rows:
        turn = from_row(turn_model, names, values[:width])
        out[values[session_at]] = (turn, dict(zip(change, values[width:], strict=True)))
    return out


_KEY_COLUMNS = ("session_id", "turn")


# The keys a statement reads, as a relation `k (session_id, turn)`: many as arrays, one as
# scalars. A prepared statement runs a generic plan after five runs, made without its values:
# over arrays PostgreSQL assumes ten keys of each, and while the calls table is small (a new
# install, the bench's first seconds) it hash-joins them to a scan of the whole table, a plan the
# connection then keeps as the table grows (single-record ingest's backend CPU more than doubled
# over 5,000 records). One key as scalars is a FROM-less subquery the planner
# pulls up into `c.session_id = $1 AND c.turn = $2`: an index probe in every plan.
_MANY_KEYS = "unnest(%s::bigint[], %s::integer[]) AS k (session_id, turn)"


_ONE_KEY = "(SELECT %s::bigint AS session_id, %s::integer AS turn) AS k"


@functools.cache
def _derive_turns_sql(
    turn_model: type[models.Model], call_model: type[models.Model], *, single: bool = False
) -> tuple[str, list[str], list[str]]:
    ctes, final, names, change = derive_turns_parts(turn_model, call_model, single=single)
    return f"WITH {ctes} {final}", names, change


def derive_turns_parts(
    turn_model: type[models.Model],
    call_model: type[models.Model],
    *,
    single: bool,
    calls: str | None = None,
    only_if: str = "",
) -> tuple[str, str, list[str], list[str]]:
    """`_derive_turns_sql`'s WITH queries and final SELECT, apart, for statements that add
    queries of their own: `calls` names the relation the calls are read from (the table by
    default), and the turns are written only when the condition `only_if` (SQL) holds."""
    keys = _ONE_KEY if single else _MANY_KEYS
    quote = connection.ops.quote_name
    turns = quote(stored_table(turn_model))
    calls = calls or quote(stored_table(call_model))
    # each figure computed `AS` its name and read back by its name (`telemetry.figures`)
    grouped = ", ".join(f"{f.sql} AS {quote(f.name)}" for f in TURN_FIGURES if not f.of_last)
    last = ", ".join(f"{f.sql} AS {quote(f.name)}" for f in TURN_FIGURES if f.of_last)
    selected = ", ".join(f"{'z' if f.of_last else 'a'}.{quote(f.name)}" for f in TURN_FIGURES)
    columns = ", ".join(quote(name) for name in (*_KEY_COLUMNS, *TURN_FIGURE_NAMES))
    updates = ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in TURN_FIGURE_NAMES)
    meta = turn_model._meta
    names = [f.attname for f in meta.concrete_fields]
    returned = ", ".join(quote(f.column) for f in meta.concrete_fields)
    # Rows go in (session, turn) order, so two writers of the same turns lock them alike.
    upsert = (
        f"INSERT INTO {turns} ({columns}) SELECT k.session_id, k.turn, {selected} FROM {keys} "
        f"CROSS JOIN LATERAL (SELECT {grouped} FROM {calls} AS c "
        "WHERE c.session_id = k.session_id AND c.turn = k.turn) AS a "
        f"CROSS JOIN LATERAL (SELECT {last} FROM {calls} AS l "
        "WHERE l.session_id = k.session_id AND l.turn = k.turn ORDER BY l.call DESC LIMIT 1) AS z "
        f"{f'WHERE {only_if} ' if only_if else ''}ORDER BY k.session_id, k.turn "
        f"ON CONFLICT (session_id, turn) DO UPDATE SET {updates} RETURNING {returned}"
    )
    # What the upsert changed, per session (`telemetry.session_totals.Change`): `old` reads the
    # touched turns in the statement's snapshot, before the upsert's writes.
    change = session_change_sql()
    kept = ", ".join(f"t.{name}" for name in ("session_id", "turn", *SESSION_CHANGE_READS))
    ctes = (
        f"old AS (SELECT {kept} FROM {keys} CROSS JOIN LATERAL (SELECT * FROM {turns} AS t "
        "WHERE t.session_id = k.session_id AND t.turn = k.turn OFFSET 0) AS t), "
        f"new AS ({upsert}), "
        "d AS (SELECT n.session_id, "
        + ", ".join(f"{expression} AS {key}" for key, expression in change.items())
        + " FROM new AS n LEFT JOIN old AS o ON o.session_id = n.session_id AND o.turn = n.turn "
        "GROUP BY n.session_id), "
        "top AS (SELECT DISTINCT ON (session_id) * FROM new ORDER BY session_id, turn DESC)"
    )
    final = (
        f"SELECT {', '.join(f'top.{quote(f.column)}' for f in meta.concrete_fields)}, "
        + ", ".join(f"d.{key}" for key in change)
        + " FROM top JOIN d ON d.session_id = top.session_id"
    )
    return ctes, final, names, list(change)
