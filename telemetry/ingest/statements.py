"""How ingest's own statements run on PostgreSQL: prepared, pipelined, counted, in which
transaction; and `Statement`, a write not yet sent, which `run_together` sends with others.

Why raw: an ingest batch must cost a constant number of statements whatever its size, which the
ORM's bulk paths do not give (docs/performance.md, P1 and P2); every other backend uses the ORM
equivalent, so SQLite (and the tests on it) exercise the same callers with the same results.
`set_wise` says which of the two paths a database takes.

Prepared: on PostgreSQL these statements (but COPY) run through `run`, which binds their values
server-side and prepares them once per connection (`DB_PREPARED_STATEMENTS`, on by default), so
PostgreSQL does not parse and plan again a text it has seen (docs/performance.md). They go
through libpq directly (`telemetry.ingest.pg_prepared`, `DB_PIPELINE`), with the transaction's
BEGIN, and a single record's COMMIT, in their own round trip. Only these statements: their
values travel as one array per column or a bounded number of rows, never near the protocol's
65,535 parameters, which Django's own statements can exceed (hence `DB_SERVER_SIDE_BINDING`
stays off).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence, Sized
from typing import Any, NamedTuple

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import pq

from telemetry.ingest import pg_prepared

# A statement over a few rows or keys (a single record's, an agent's step) is prepared as it
# is. One over more is prepared only with `by_index` (`run`): its text must not change with
# the number of rows (one array per column, not a VALUES list, whose text changes with its
# length: a text seen once gains nothing from being kept), and its plan is made with
# sequential scans off (`pg_prepared.SEQSCAN_OFF`), so the generic plan PostgreSQL switches
# to after five runs, made without the arrays' sizes, probes the indexes per key whatever
# the tables' sizes were when it was made. Parsing and planning the batch statements again on
# every batch was a visible share of a batch's backend CPU (docs/performance.md, P1).
PREPARED_ROWS = 8


def few(items: Sized) -> bool:
    """Whether a statement over `items` is small enough to be prepared as it is (see `run`);
    a larger one is prepared `by_index`."""
    return len(items) <= PREPARED_ROWS


# PostgreSQL's wire protocol carries at most this many bound values in one statement.
_MAX_BOUND = 65_535


_NEVER = 2**62


def run(
    sql: str,
    params: Sequence[Any],
    *,
    prepare: bool = True,
    commit: bool = False,
    by_index: bool = False,
) -> list[tuple[Any, ...]]:
    """Execute one of ingest's statements on PostgreSQL and return its rows (none when it
    returns none): values bound server-side and, with `prepare` and `DB_PREPARED_STATEMENTS`,
    the statement prepared once per connection (psycopg keeps the 100 latest).

    Django's own cursors bind client-side (`console.settings`); this takes a server-binding
    psycopg cursor on the same connection, so the statement joins the caller's transaction.
    Its text goes with PostgreSQL's own `$n` placeholders, numbered once per text
    (`numbered`): psycopg re-parses a text of over 4,096 bytes or 50 values on every run. Errors
    come out as Django's, and the statement is counted like Django counts its own.

    A prepared statement runs through `telemetry.ingest.pg_prepared` (less driver work, its `BEGIN`
    in the same round trip; `DB_PIPELINE`); psycopg itself prepares nothing then, so it never
    deallocates them.
    `commit`: commit the transaction in the same round trip; for the last statement of the
    outermost `atomic` block only (`commit_with_last`), whose own commit then finds nothing
    to do.
    `by_index`: a statement over many keys, whose text does not change with their number:
    prepared only through `pg_prepared`, which plans it with sequential scans off (see
    `PREPARED_ROWS`); through a cursor (`DB_PIPELINE` off) it is planned on every run.
    """
    db = connections[DEFAULT_DB_ALIAS]  # one lookup: each `connection.x` is a context-local one
    db.ensure_connection()
    db.validate_no_broken_transaction()
    prepared = prepare and settings.DB_PREPARED_STATEMENTS and len(params) <= _MAX_BOUND
    started = time.monotonic()
    raw = db.connection
    text = numbered(sql) if len(params) <= _MAX_BOUND else None
    # `pg_prepared` runs them (DB_PIPELINE) unless DB_SERVER_SIDE_BINDING set psycopg a threshold
    # of its own: psycopg would then prepare Django's statements and deallocate every statement
    # after a rollback, ours too; it prepares these itself there.
    pipeline = settings.DB_PIPELINE and raw.prepare_threshold in (None, _NEVER)
    if prepared and text is not None and pipeline:
        with db.wrap_database_errors:
            done = pg_prepared.execute(raw, text, params, commit=commit, by_index=by_index)
            rows = pg_prepared.rows(raw, done)
        log_statement(sql, started, db)
        return rows
    prepared = prepared and not by_index
    if prepared and not pipeline and raw.prepare_threshold is None:
        # Django turns psycopg's preparing off unless asked (None); a threshold no count
        # reaches turns it back on for the statements passed `prepare=True` only.
        raw.prepare_threshold = _NEVER
    with db.wrap_database_errors:  # `commit` aside: the caller's `atomic` commits as usual
        cursor: psycopg.Cursor[Any]
        if text is not None:
            cursor = psycopg.RawCursor(raw)
        elif len(params) > _MAX_BOUND:  # values written into the text, as Django's cursor does
            cursor = psycopg.ClientCursor(raw)
        else:
            cursor = psycopg.Cursor(raw)
        with cursor:
            cursor.execute(sql if text is None else text, params, prepare=prepared and not pipeline)
            # not `description`: it builds a column object per returned column, a visible
            # share of a single-record ingest's CPU for the session and turn rows
            result = cursor.pgresult
            returns = result is not None and result.status == pq.ExecStatus.TUPLES_OK
            rows = cursor.fetchall() if returns else []
    log_statement(sql, started, db)
    return rows


_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> bytes | None:
    """`sql` with its `%s` placeholders as `$1`, `$2`, … and `%%` as `%`, encoded; None when it
    holds any other `%` form (`%(name)s`, `%b`, a lone `%`), which psycopg's own parsing keeps.

    Like psycopg, it does not skip quoted text: a `%s` in a literal is a placeholder to both.
    A statement's text depends on its shape, not its values (arrays per column, or a bounded
    number of rows), so the cache holds few texts."""
    count = 0
    failed = False

    def replace(match: re.Match[str]) -> str:
        nonlocal count, failed
        kind = match.group(1)
        if kind == "%":
            return "%"
        if kind != "s":
            failed = True
            return ""
        count += 1
        return f"${count}"

    text = _PLACEHOLDER.sub(replace, sql)
    if failed or text.count("%") != sql.count("%%"):  # a lone % at the very end
        return None
    return text.encode()


class Statement(NamedTuple):
    """A write of ingest's not yet sent, for `run_together`."""

    sql: str
    params: list[Any]
    prepare: bool
    by_index: bool = False


def run_together(
    statements: Sequence[Statement | None], *, commit: bool = False, version: bool = False
) -> str | None:
    """Run writes that return nothing as one statement, one round trip: each is a data-modifying
    `WITH` query of a `SELECT` that reads none of them. PostgreSQL runs every such query once
    and to completion, on one snapshot, so they must not touch the same rows (the ingest's last
    two writes, the session figures and the hour rollups: docs/performance.md P2, whose driver
    work per statement is most of a single record's Python). None entries are skipped. `commit`: as
    `run`'s (`commit_with_last`). `version`: the first statement is an UPDATE of one row; its
    new row version's `xmin` comes back, as text (None when it updated nothing), for
    `telemetry.ingest.known_sessions`."""
    todo = [s for s in statements if s is not None]
    if not todo:
        return None
    if version:
        first = todo[0]
        todo[0] = first._replace(sql=f"{first.sql} RETURNING xmin::text")
    if len(todo) == 1:
        one = todo[0]
        rows = run(one.sql, one.params, prepare=one.prepare, commit=commit, by_index=one.by_index)
    else:
        parts = ", ".join(f"write_{i} AS ({s.sql})" for i, s in enumerate(todo))
        params = [value for s in todo for value in s.params]
        final = "SELECT (SELECT xmin FROM write_0)" if version else "SELECT NULL WHERE false"
        rows = run(
            f"WITH {parts} {final}",
            params,
            prepare=all(s.prepare for s in todo),
            commit=commit,
            by_index=any(s.by_index for s in todo),
        )
    return rows[0][0] if version and rows else None


def own_transaction() -> bool:
    """Whether the caller's `atomic` block is the outermost one, with no savepoint, and will
    commit on exit: its transaction holds nothing but what the caller did in it."""
    db = connections[DEFAULT_DB_ALIAS]
    return (
        db.in_atomic_block
        and len(db.atomic_blocks) == 1
        and not db.savepoint_ids
        and db.commit_on_exit
        and not db.needs_rollback
    )


def commit_with_last() -> bool:
    """Whether the statement about to run may commit its transaction in the same round trip
    (`run`'s `commit`): the caller runs in the outermost `atomic` block, which has no savepoint
    and will commit on exit, and has nothing left to write. Django's commit at the block's end
    then finds the transaction over and only runs the `on_commit` hooks; should the caller raise
    after the statement, the rollback finds nothing to undo (the writes stay, as they would
    have had the error come after the block). Inside any outer block (a test's, OTLP's) no."""
    return own_transaction()


def log_statement(sql: str, started: float, db: BaseDatabaseWrapper | None = None) -> None:
    """Count a statement run on the raw driver cursor like Django counts its own (on `db`,
    default the default connection)."""
    db = connection if db is None else db
    if db.queries_logged:
        db.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


@functools.cache
def vendor() -> str:
    """The default database's vendor (`connection.vendor`), fixed for a process by its settings:
    asked many times per single-record ingest, so it is looked up once instead of each time
    through Django's connection proxy and its thread-local lookup (docs/performance.md, P2)."""
    return connections[DEFAULT_DB_ALIAS].vendor


def set_wise() -> bool:
    """Whether this database takes the set-wise ingest path (PostgreSQL): new calls as
    COPY rows, their turns derived by the database from the copied rows. Elsewhere the callers
    build model instances and derive in Python (the same figures)."""
    return vendor() == "postgresql"
