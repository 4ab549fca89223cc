"""The raw SQL of telemetry, in one place: the two bulk writes of an ingest batch on PostgreSQL.

Why raw: an ingest batch must cost a constant number of statements whatever its size, and the
ORM's two bulk paths were the measured bottlenecks (`make bench`, P1 and P2). COPY sends rows as
they are instead of preparing and quoting values field by field; `UPDATE … FROM (VALUES …)`
replaces bulk_update's CASE per field and row; a batch's turns are derived by the database from
the rows it has just copied (`derive_turns`). Every other backend uses the ORM equivalent (and
`telemetry.accounting` for the turns), so SQLite (and the tests on it) exercise the same callers
with the same results.

The rate counter (`count_request`) is raw for another reason: it must be one atomic statement
across processes, and the ORM has no upsert that returns the new value.

Prepared: on PostgreSQL these statements (but COPY) run through `run`, which binds their values
server-side and prepares them once per connection (`DB_PREPARED_STATEMENTS`, on by default), so
PostgreSQL skips parsing and planning texts it has seen, a third of their backend CPU on a
single-record ingest (docs/performance.md). They go through libpq directly
(`telemetry.ingest.pg_prepared`, `DB_PIPELINE`), with the transaction's BEGIN, and a single record's
COMMIT, in their own round trip. Only these statements: their values travel
as one array per column or a bounded number of rows, never near the protocol's 65,535
parameters, which Django's own statements can exceed (hence `DB_SERVER_SIDE_BINDING` stays off).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Sequence, Sized
from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import Any, NamedTuple

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone
from psycopg import pq

from telemetry.ingest import pg_prepared
from telemetry.usage import context_sql

# Only statements of a few rows or keys are prepared (a single record's, an agent's step). A
# VALUES list's text changes with its length, and a text seen once gains nothing from being
# kept; and after five runs of a prepared statement PostgreSQL may switch to a generic plan,
# made without the arrays' sizes, which for a 1,000-record batch's keys read and turn
# derivation cost more than planning each time (make bench P1 fell from 0.18 to 0.09 x B_copy
# when batches were prepared too). Batches keep one-off plans made for their values.
_PREPARED_ROWS = 8


def few(items: Sized) -> bool:
    """Whether a statement over `items` is small enough to be prepared (see `run`)."""
    return len(items) <= _PREPARED_ROWS


# PostgreSQL's wire protocol carries at most this many bound values in one statement.
_MAX_BOUND = 65_535
_NEVER = 2**62


def run(
    sql: str, params: Sequence[Any], *, prepare: bool = True, commit: bool = False
) -> list[tuple[Any, ...]]:
    """Execute one statement of this module on PostgreSQL and return its rows (none when it
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
            done = pg_prepared.execute(raw, text, params, commit=commit)
            rows = pg_prepared.rows(raw, done)
        _log_statement(sql, started, db)
        return rows
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
    _log_statement(sql, started, db)
    return rows


def run_all(statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]] | None:
    """Several prepared statements in one round trip, in order, each on its own snapshot (taken
    once the one before it has finished); their rows. None, running nothing, where that cannot
    be done (not PostgreSQL, `DB_PIPELINE` or `DB_PREPARED_STATEMENTS` off, a text `numbered`
    cannot take): the caller runs them one by one."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or not (settings.DB_PIPELINE and settings.DB_PREPARED_STATEMENTS):
        return None
    texts = [numbered(sql) if len(params) <= _MAX_BOUND else None for sql, params in statements]
    db.ensure_connection()
    raw = db.connection
    numbered_texts = [text for text in texts if text is not None]
    if len(numbered_texts) < len(texts) or raw.prepare_threshold not in (None, _NEVER):
        return None
    db.validate_no_broken_transaction()
    started = time.monotonic()
    with db.wrap_database_errors:
        results = pg_prepared.execute_all(
            raw,
            [(text, params) for text, (_, params) in zip(numbered_texts, statements, strict=True)],
        )
        out = [pg_prepared.rows(raw, result) for result in results]
    for sql, _ in statements:
        _log_statement(sql, started, db)
    return out


def restart_transaction() -> None:
    """Roll back the open transaction of the default connection at the driver, under Django's
    `atomic` block, which goes on: the next statement of `run` starts a new transaction. Only
    for a caller whose transaction so far holds nothing but statements it is about to send
    again (`telemetry.ingest.pipeline`'s pipelined single record, when its guess of the session id was
    wrong)."""
    pg_prepared.rollback(connections[DEFAULT_DB_ALIAS].connection)


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


def insert_rows(model: type[models.Model], rows: Sequence[models.Model]) -> None:
    """Insert new rows of `model` in one statement: COPY on PostgreSQL, a bulk INSERT elsewhere.

    The caller has already checked the unique keys under its locks, so COPY meets no conflict
    that bulk_create would not also have raised. `received_at` (auto_now_add) is stamped here.
    """
    if vendor() != "postgresql" or not rows:
        model._default_manager.bulk_create(rows)
        return
    sql, values_of, json_columns = _copy_sql(model)
    received = timezone.now()  # what auto_now_add would set
    stamp = hasattr(rows[0], "received_at")
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            if stamp:
                row.__dict__["received_at"] = received
            # one C call picks the row's values in column order; only the JSON ones are redone
            values = list(values_of(row.__dict__))
            for i in json_columns:
                values[i] = json_text(values[i])
            copy.write_row(values)
    _log_statement(sql, started)


def json_text(value: Any) -> str:
    """A JSON field's value as the text COPY hands to jsonb: what psycopg's Jsonb adapter sent
    (None is JSON null there too), without an adapter object and its lookup per value."""
    if value is None:
        return "null"
    if value == []:
        return "[]"
    if type(value) is dict and _ENCODE_JSON is not None:
        return "".join(_ENCODE_JSON(value, 0))
    return json.dumps(value)


# `json.dumps(value)` builds this C encoder (its default encoder's options) on every call; made
# once, a call's raw usage encodes in about half the time, the same text. Without the
# circular-reference markers a decoded document cannot need.
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without the C `_json`
_ESCAPE_ASCII = getattr(json.encoder, "c_encode_basestring_ascii", None)
_DEFAULT = json.JSONEncoder()  # what `json.dumps` without options encodes with
_ENCODE_JSON = (
    None
    if _MAKE_ENCODER is None or _ESCAPE_ASCII is None
    else _MAKE_ENCODER(
        None,
        _DEFAULT.default,
        _ESCAPE_ASCII,
        _DEFAULT.indent,
        _DEFAULT.key_separator,
        _DEFAULT.item_separator,
        _DEFAULT.sort_keys,
        _DEFAULT.skipkeys,
        _DEFAULT.allow_nan,
    )
)


@functools.cache
def vendor() -> str:
    """The default database's vendor (`connection.vendor`), fixed for a process by its settings:
    asked ~30 times a single-record ingest, each through Django's connection proxy and its
    thread-local lookup, it was ~3% of that request's Python (make bench P2)."""
    return connections[DEFAULT_DB_ALIAS].vendor


# Fields whose `get_db_prep_save` gives a value of this exact type back as it is.
_PLAIN_TYPES: tuple[tuple[type[models.Field[Any, Any]], type], ...] = (
    (models.BooleanField, bool),
    (models.IntegerField, int),
    (models.CharField, str),
    (models.FloatField, float),
)


@functools.cache
def _plain_type(field: models.Field[Any, Any]) -> type | None:
    if isinstance(field, models.ForeignKey):  # its `get_db_prep_save` is its target field's
        return _plain_type(field.target_field)
    for field_class, kind in _PLAIN_TYPES:
        if isinstance(field, field_class):
            return kind
    return None


def prepare(field: models.Field[Any, Any], value: Any) -> Any:
    """`field.get_db_prep_save(value)`, skipped where it would change nothing (an int of an
    integer field, a NULL of a plain field): asked per value and statement, it was a tenth of a
    single ingest's CPU (make bench P2). On PostgreSQL a finite Decimal of a decimal field and
    an aware datetime of a datetime field come back as they are too (`to_python` and the
    backend's `adapt_*` return them unchanged): ~18 Decimals per single record went through
    Django's two `to_python` calls, 6% of its CPU. Not on SQLite, which writes them as text."""
    kind = _plain_type(field)
    if kind is not None and (value is None or type(value) is kind):
        return value
    if vendor() != "postgresql":  # the hour rollups prepare their values on SQLite
        return field.get_db_prep_save(value, connection)  # too, which stores datetimes as text
    if type(value) is Decimal and isinstance(field, models.DecimalField) and value.is_finite():
        return value
    if (
        type(value) is datetime
        and value.tzinfo is not None
        and isinstance(field, models.DateTimeField)
    ):
        return value
    return field.get_db_prep_save(value, connection)


# The statements below are built once per model (and shape) and process: building them asked
# every field for its column type on every request, a tenth of a single ingest's CPU. Those
# whose text grows with the row count keep the most recent shapes only (a 1,000-row text is
# ~0.5 MB).
_SHAPES = 32


@functools.cache
def _copy_sql(
    model: type[models.Model],
) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]], tuple[int, ...]]:
    """COPY's statement, a getter of a row's values in its column order (always a tuple: the
    model has more than one column), and the positions of its JSON columns."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    json_columns = tuple(i for i, f in enumerate(fields) if f.get_internal_type() == "JSONField")
    quote = connection.ops.quote_name
    sql = (
        f"COPY {quote(model._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    )
    return sql, itemgetter(*(f.attname for f in fields)), json_columns


class Statement(NamedTuple):
    """A write of this module not yet sent, for `run_together`."""

    sql: str
    params: list[Any]
    prepare: bool


def run_together(
    statements: Sequence[Statement | None], *, commit: bool = False, version: bool = False
) -> str | None:
    """Run writes that return nothing as one statement, one round trip: each is a data-modifying
    `WITH` query of a `SELECT` that reads none of them. PostgreSQL runs every such query once
    and to completion, on one snapshot, so they must not touch the same rows (the ingest's last
    two writes, the session figures and the hour rollups: make bench P2, whose driver work per
    statement is most of a single record's Python). None entries are skipped. `commit`: as
    `run`'s (`commit_with_last`). `version`: the first statement is an UPDATE of one row; its
    new row version's `xmin` comes back, as text (None when it updated nothing), for
    `telemetry.ingest.known_sessions`."""
    todo = [s for s in statements if s is not None]
    if not todo:
        return None
    if version:
        first = todo[0]
        todo[0] = Statement(f"{first.sql} RETURNING xmin::text", first.params, first.prepare)
    if len(todo) == 1:
        rows = run(todo[0].sql, todo[0].params, prepare=todo[0].prepare, commit=commit)
    else:
        parts = ", ".join(f"write_{i} AS ({s.sql})" for i, s in enumerate(todo))
        params = [value for s in todo for value in s.params]
        final = "SELECT (SELECT xmin FROM write_0)" if version else "SELECT NULL WHERE false"
        rows = run(
            f"WITH {parts} {final}",
            params,
            prepare=all(s.prepare for s in todo),
            commit=commit,
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


def update_rows(model: type[models.Model], rows: Sequence[models.Model], names: list[str]) -> None:
    """Write the fields `names` of `rows` (already saved) in one statement.

    On PostgreSQL an `UPDATE … FROM (VALUES …)` (`update_statement`): Django's bulk_update builds
    a CASE per field and row, costly even for a single session (make bench, P2). Elsewhere
    bulk_update.
    """
    statement = update_statement(model, rows, names)
    if statement is None:
        model._default_manager.bulk_update(rows, names)
        return
    run(statement.sql, statement.params, prepare=statement.prepare)


def update_statement(
    model: type[models.Model], rows: Sequence[models.Model], names: list[str]
) -> Statement | None:
    """`update_rows`' statement on PostgreSQL, not yet run; None elsewhere or for no rows."""
    if vendor() != "postgresql" or not rows:
        return None
    sql, fields = _update_sql(model, tuple(names), len(rows))
    params: list[Any] = []
    for instance in rows:
        params.append(instance.pk)
        params.extend(prepare(f, getattr(instance, f.attname)) for f in fields)
    return Statement(sql, params, few(rows))


@functools.lru_cache(maxsize=_SHAPES)
def _update_sql(
    model: type[models.Model], names: tuple[str, ...], count: int
) -> tuple[str, list[models.Field[Any, Any]]]:
    meta = model._meta
    by_name = {f.name: f for f in meta.concrete_fields}
    fields = [by_name[name] for name in names]
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    casts = [f"%s::{pk.db_type(connection)}"] + [f"%s::{f.db_type(connection)}" for f in fields]
    row = f"({', '.join(casts)})"
    columns = [quote(pk.column)] + [quote(f.column) for f in fields]
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in columns[1:])
        + f" FROM (VALUES {', '.join([row] * count)}) AS v ({', '.join(columns)})"
        + f" WHERE t.{columns[0]} = v.{columns[0]}"
    )
    return sql, fields


def count_request(model: type[models.Model], key_id: int, window: int, step: int = 1) -> int:
    """Add `step` to the (key, window) counter row and return its new value, atomically.

    `INSERT … ON CONFLICT DO UPDATE … RETURNING` is one statement on PostgreSQL and on SQLite
    (3.35+): two processes counting at once can never read the same value.

    On PostgreSQL in autocommit (an API request), the statement runs in its own transaction
    with `synchronous_commit` off, all in one round trip: its commit does not wait for the WAL
    to reach the disk (a second flush per request beside the ingest's own, on a slow disk
    longer than the request's own work, make bench P2). What that risks is the last fraction
    of a second of counts if PostgreSQL itself crashes, a budget briefly undercounted; never a
    stored record. Inside a caller's transaction the statement joins it as it is.
    """
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({quote('key_id')}, {quote('window')}, {quote('count')}) "
        f"VALUES (%s, %s, %s) ON CONFLICT ({quote('key_id')}, {quote('window')}) "
        f"DO UPDATE SET {quote('count')} = {table}.{quote('count')} + excluded.{quote('count')} "
        f"RETURNING {quote('count')}"
    )
    if vendor() == "postgresql" and not connection.in_atomic_block and connection.get_autocommit():
        from psycopg.pq import TransactionStatus

        # Literal integers instead of parameters: several statements in one string go by the
        # simple query protocol, which takes no parameters.
        counted = sql.replace("%s", "{}").format(int(key_id), int(window), int(step))
        started = time.monotonic()
        # The raw driver cursor's errors are Django's as for any statement (a database that is
        # away must still answer 503, `console.middleware`).
        with connection.cursor() as cursor, connection.wrap_database_errors:
            raw = cursor.cursor
            try:
                raw.execute(f"BEGIN; SET LOCAL synchronous_commit TO OFF; {counted}; COMMIT")
                found = None
                while True:  # BEGIN, SET, the counter's row, COMMIT
                    if raw.description is not None:
                        found = raw.fetchone()
                    if not raw.nextset():
                        break
            except Exception:
                # A failed statement leaves the explicit transaction open: end it, so the
                # connection is back in autocommit as Django believes it is.
                if raw.connection.info.transaction_status != TransactionStatus.IDLE:
                    raw.connection.execute("ROLLBACK")
                raise
        _log_statement(counted, started)
        assert found is not None
        return int(found[0])
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_id, window, step])
        row = cursor.fetchone()
    return int(row[0])


def _log_statement(sql: str, started: float, db: BaseDatabaseWrapper | None = None) -> None:
    """Count a statement run on the raw driver cursor like Django counts its own (on `db`,
    default the default connection)."""
    db = connection if db is None else db
    if db.queries_logged:
        db.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


def upsert_rows(
    model: type[models.Model],
    names: list[str],
    rows: Sequence[Sequence[Any]],
    *,
    unique: list[str],
) -> None:
    """Insert `rows` (plain tuples of the attributes `names`), or update the row holding the same
    `unique` values, in one statement.

    On PostgreSQL an `INSERT … SELECT FROM unnest(<one array per column>) ON CONFLICT DO
    UPDATE`: bulk_create(update_conflicts=True) prepared every value of every row through its
    field (~45 % of a 1,000-record batch's CPU with the turn re-derivation, make bench P1);
    one typed array per column is adapted by the driver in one go. Elsewhere bulk_create.
    """
    if not rows:
        return
    if vendor() != "postgresql":
        meta = model._meta
        by_attname = {f.attname: f for f in meta.concrete_fields}
        model._default_manager.bulk_create(
            [model(**dict(zip(names, row, strict=True))) for row in rows],
            update_conflicts=True,
            unique_fields=[by_attname[name].name for name in unique],
            update_fields=[by_attname[name].name for name in names if name not in unique],
        )
        return
    sql = _upsert_sql(model, tuple(names), tuple(unique))
    run(sql, [_array(column) for column in zip(*rows, strict=True)], prepare=few(rows))


def _array(column: tuple[Any, ...]) -> str | list[Any]:
    """A column of numbers (or NULLs) as PostgreSQL's array literal text, which the statement
    casts to the column's array type; any other column as a list for the driver to adapt.

    The driver adapts a list element by element in Python: for the turns of a 1,000-record
    batch, 31 columns × 500 turns, that was a seventh of the batch's CPU (make bench P1).
    `str()` of an int or a Decimal is its exact literal (a Decimal never prints a NaN here:
    costs are finite), so the values stored are the same.
    """
    for value in column:
        kind = type(value)
        if kind is not int and kind is not Decimal and value is not None:
            return list(column)
    return "{" + ",".join("NULL" if v is None else str(v) for v in column) + "}"


@functools.cache
def _upsert_sql(model: type[models.Model], names: tuple[str, ...], unique: tuple[str, ...]) -> str:
    meta = model._meta
    by_attname = {f.attname: f for f in meta.concrete_fields}
    fields = [by_attname[name] for name in names]
    updates = [f for f in fields if f.attname not in unique]
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in fields]
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
    return (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
        f"SELECT * FROM unnest({arrays}) "
        f"ON CONFLICT ({', '.join(quote(by_attname[name].column) for name in unique)}) "
        f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in map(quote, (f.column for f in updates)))}"
    )


def lock_keys(
    model: type[models.Model], keys: Sequence[tuple[Any, ...]], unique: tuple[str, ...]
) -> list[Any] | None:
    """Insert the rows of `keys` that do not exist yet and lock all of them, existing or new,
    until the end of the transaction; returns every row as stored (None elsewhere than on
    PostgreSQL: the caller inserts and locks with the ORM). `keys` holds each row's `unique`
    values in that order; a new row gets every other field's default (`auto_now(_add)`: now).

    One `INSERT … ON CONFLICT DO UPDATE SET <a unique column> = itself RETURNING *`: the no-op
    update takes a row lock that excludes every other writer and `SELECT … FOR UPDATE`, in the
    order of `keys` (the caller sorts them, so concurrent callers cannot deadlock), and returns
    the stored row: one round trip instead of an insert and a locking read (make bench P2).

    The defaults are prepared once per model and process: building an instance per key and
    preparing its 30 values for an upsert that almost always finds the row was ~7% of a
    single-record ingest's Python (make bench P2).
    """
    if vendor() != "postgresql":
        return None
    if not keys:
        return []
    sql, params = lock_keys_statement(model, keys, unique)
    return locked_rows(model, len(keys), unique, run(sql, params, prepare=few(keys)))


def lock_keys_statement(
    model: type[models.Model], keys: Sequence[tuple[Any, ...]], unique: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """`lock_keys`' statement and values, not yet run (PostgreSQL; `locked_rows` reads them)."""
    sql, fields, _, _, _ = _upsert_locked_sql(model, unique, len(keys))
    base, key_slots, now_slots, default_slots = _blank_row(model, unique)
    now = timezone.now()
    params: list[Any] = []
    for key in keys:
        row = base.copy()
        for slot, value in zip(key_slots, key, strict=True):
            row[slot] = prepare(fields[slot], value)
        for slot in now_slots:
            row[slot] = now
        for slot in default_slots:
            row[slot] = prepare(fields[slot], fields[slot].get_default())
        params.extend(row)
    return sql, params


def lock_pk_statement(
    model: type[models.Model], pk: Any, unique: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """The row `pk` of `model`, locked `FOR UPDATE` until the end of the transaction, with the
    columns of `lock_keys_statement` for one key (`locked_rows(model, 1, unique, rows)` reads
    it; no row when there is none). For a row the caller knows exists: the lock excludes every
    writer the upsert's no-op update excludes, without the upsert's new row version (a single
    record's lock, make bench P2). PostgreSQL."""
    return _lock_pk_sql(model, unique), [pk]


@functools.cache
def _lock_pk_sql(model: type[models.Model], unique: tuple[str, ...]) -> str:
    meta = model._meta
    assert meta.pk is not None
    quote = connection.ops.quote_name
    returned = _upsert_locked_sql(model, unique, 1)[1]
    return (
        f"SELECT {quote(meta.pk.column)}, {', '.join(quote(f.column) for f in returned)} "
        f"FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} = "
        f"%s::{meta.pk.db_type(connection)} FOR UPDATE"
    )


def locked_rows(
    model: type[models.Model], count: int, unique: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> list[Any]:
    """The instances of what `lock_keys_statement` for `count` keys returned."""
    _, _, names, columns, converters = _upsert_locked_sql(model, unique, count)
    return _instances(model, rows, names, columns, converters)


@functools.cache
def _blank_row(
    model: type[models.Model], unique: tuple[str, ...]
) -> tuple[list[Any], list[int], list[int], list[int]]:
    """A new row's prepared values in `_upsert_locked_sql`'s field order (constant defaults), and
    the positions filled per row: the key's fields, the `auto_now(_add)` ones (the time) and
    those whose default is made by a callable (made again per row)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    base: list[Any] = []
    now_slots, default_slots = [], []
    for i, f in enumerate(fields):
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            now_slots.append(i)
            base.append(None)
        elif f.has_default() and callable(f.default):
            default_slots.append(i)
            base.append(None)
        else:
            base.append(None if f.attname in unique else prepare(f, f.get_default()))
    by_attname = {f.attname: i for i, f in enumerate(fields)}
    return base, [by_attname[name] for name in unique], now_slots, default_slots


def _instances(
    model: type[models.Model],
    rows: list[tuple[Any, ...]],
    names: list[str],
    columns: list[Any],
    converters: list[list[Any]],
) -> list[Any]:
    out = []
    for values in rows:
        converted = []
        for value, col, funcs in zip(values, columns, converters, strict=True):
            for convert in funcs:
                value = convert(value, col, connection)
            converted.append(value)
        out.append(from_row(model, names, converted))
    return out


def from_row(model: type[models.Model], names: Sequence[str], values: Sequence[Any]) -> Any:
    """`model.from_db(<default alias>, names, values)`: the stored instance of a row.

    A row of every concrete field in order (`names` their attnames) is set on a bare instance,
    as `Model.__init__` would set each, without it (its per-field loop and signals, for the
    session row a single-record ingest locks, make bench P2), unless something listens to
    the model's `pre_init` or `post_init`. Any other row goes to `from_db`.
    """
    alias = connections[DEFAULT_DB_ALIAS].alias
    if (
        tuple(names) != _attnames(model)
        or pre_init.has_listeners(model)
        or post_init.has_listeners(model)
    ):
        return model.from_db(alias, names, values)
    instance = model.__new__(model)
    state = ModelState()
    state.adding = False
    state.db = alias
    attributes = dict(zip(names, values, strict=True))
    attributes["_state"] = state
    instance.__dict__.update(attributes)
    return instance


@functools.cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in model._meta.concrete_fields)


def latest_with_totals(
    model: type[models.Model],
    ids: Sequence[int],
    *,
    partition: str,
    latest: str,
    totals: Sequence[tuple[str, str, str]],
) -> list[tuple[Any, dict[str, Any]]] | None:
    """For each `partition` value in `ids`: its row with the highest `latest`, and the
    aggregates `totals` ((name, function, attribute) such as ("n_calls", "SUM", "calls")) over
    all its rows. One statement; None elsewhere than on PostgreSQL (the caller uses the ORM).

    On PostgreSQL a GROUP BY joined back to the latest row on the unique (partition, latest)
    index: compiling the ORM's window-aggregate query on every single-record ingest took
    longer than PostgreSQL took to run it (make bench P2).
    """
    if vendor() != "postgresql":
        return None
    if not ids:
        return []
    sql, names = _latest_with_totals_sql(model, partition, latest, tuple(totals))
    rows = run(sql, [_array(tuple(ids))], prepare=few(ids))
    width = len(names)
    out = []
    for values in rows:
        instance = from_row(model, names, values[:width])
        out.append((instance, dict(zip((t[0] for t in totals), values[width:], strict=True))))
    return out


@functools.cache
def _latest_with_totals_sql(
    model: type[models.Model],
    partition: str,
    latest: str,
    totals: tuple[tuple[str, str, str], ...],
) -> tuple[str, list[str]]:
    meta = model._meta
    quote = connection.ops.quote_name
    by_attname = {f.attname: f for f in meta.concrete_fields}
    group, last = quote(by_attname[partition].column), quote(by_attname[latest].column)
    # A SUM is cast back to its column's type, as the ORM reads it (PostgreSQL sums bigints
    # into numeric).
    aggregates = ", ".join(
        f"{function}({quote(by_attname[attname].column)})"
        + (f"::{by_attname[attname].db_type(connection)}" if function == "SUM" else "")
        + f" AS {quote(name)}"
        for name, function, attname in totals
    )
    sql = (
        f"SELECT {', '.join(f't.{quote(f.column)}' for f in meta.concrete_fields)}, "
        f"{', '.join(f'a.{quote(name)}' for name, _, _ in totals)} "
        f"FROM (SELECT {group}, MAX({last}) AS latest_value, {aggregates} "
        f"FROM {quote(meta.db_table)} WHERE {group} = ANY(%s::bigint[]) GROUP BY {group}) AS a "
        f"JOIN {quote(meta.db_table)} AS t ON t.{group} = a.{group} AND t.{last} = a.latest_value"
    )
    return sql, [f.attname for f in meta.concrete_fields]


def stored_call_keys(
    model: type[models.Model],
    positions: Sequence[tuple[int, int]],
    requests: Sequence[tuple[int, str]],
) -> list[tuple[Any, ...]] | None:
    """(session_id, turn, call, request_id, payload_hash) of the stored calls at the (session,
    turn) pairs `positions` or under the (session, request id) pairs `requests`; one statement
    on PostgreSQL, None elsewhere (the caller uses the ORM). Its text never varies, so no ORM
    compiles it on every ingest.

    Each pair is probed through its unique index (LATERAL, kept from being flattened into a
    join by `OFFSET 0`): with every session's calls read and filtered by turn, a batch into a
    session of 100,000 calls read all of them, and a set join could be planned as a scan of the
    whole table while its statistics did not yet know the rows it had just copied."""
    if vendor() != "postgresql":
        return None
    if len(positions) == 1 and len(requests) <= 1:
        # A single record: scalar values, so the prepared statement's generic plan probes the
        # two unique indexes whatever the table's size was when it was planned (see `_ONE_KEY`).
        (session_id, turn), request_id = positions[0], requests[0][1] if requests else None
        one = [session_id, turn, session_id, request_id]
        return run(_stored_call_keys_sql(model, single=True), one)
    sql = _stored_call_keys_sql(model, single=False)
    params = [*_pairs_arrays(positions), *_requests_arrays(requests)]
    return run(sql, params, prepare=few(positions) and few(requests))


def insert_and_derive(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    row: Sequence[Any],
    *,
    turn: int,
    call: int,
    request_id: str | None,
) -> tuple[list[tuple[Any, ...]], bool, dict[int, tuple[Any, dict[str, Any]]]]:
    """One record's `stored_call_keys`, `insert_few` and `derive_turns` in one statement: the
    stored calls of its turn and under its request id; its `row` inserted unless one of them
    holds its position (`turn`, `call`) or its `request_id` (exactly when `StoredKeys.decide`
    finds it new); and, when it went in, its turn re-derived from the turn's stored calls and
    the new one. Returns those stored keys, whether the row went in, and `derive_turns`' answer
    (empty when it did not). PostgreSQL only.

    Each was a round trip of its own (web CPU and a wake-up each, make bench P2).
    Reading and writing in one statement is safe because the caller holds the session's row
    lock (`session_state.lock_sessions`, an earlier statement): no other writer can store a
    call of this session meanwhile, and the statement's snapshot, taken once that lock is held,
    sees every call committed before it. The statement's queries share that snapshot, so the
    derivation reads the new call from the insert's RETURNING, beside the stored ones.
    """
    sql, params = insert_and_derive_statement(
        call_model, turn_model, row, turn=turn, call=call, request_id=request_id
    )
    return inserted_and_derived(call_model, turn_model, run(sql, params))


def insert_and_derive_statement(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    row: Sequence[Any],
    *,
    turn: int,
    call: int,
    request_id: str | None,
) -> tuple[str, list[Any]]:
    """`insert_and_derive`'s statement and values, not yet run (`inserted_and_derived` reads
    its answer). The caller must hold the session's lock when it runs (an earlier statement)."""
    session_id = row[0]
    sql, _, _ = _insert_and_derive_sql(call_model, turn_model)
    keys = [session_id, turn]
    return sql, [*keys, session_id, request_id, *row, turn, call, request_id, *keys, *keys, *keys]


def inserted_and_derived(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    answer: list[tuple[Any, ...]],
) -> tuple[list[tuple[Any, ...]], bool, dict[int, tuple[Any, dict[str, Any]]]]:
    """`insert_and_derive`'s result from its statement's rows."""
    _, names, change = _insert_and_derive_sql(call_model, turn_model)
    (inserted, stored, *derived) = answer[0]
    found = [tuple(s) for s in json.loads(stored)] if stored is not None else []
    rows = [derived] if inserted else []
    return found, bool(inserted), _derived(turn_model, rows, names, change)


@functools.cache
def _insert_and_derive_sql(
    call_model: type[models.Model], turn_model: type[models.Model]
) -> tuple[str, list[str], list[str]]:
    fields = [f for f in call_model._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    table = quote(call_model._meta.db_table)
    by_attname = {f.attname: quote(f.column) for f in fields}
    session, turn, call, request_id, digest = (
        by_attname[name] for name in ("session_id", "turn", "call", "request_id", "payload_hash")
    )
    into, values = _insert_parts(call_model)
    guard = (
        f"SELECT FROM stored AS s WHERE (s.{turn} = %s::integer AND s.{call} = %s::integer) "
        f"OR s.{request_id} = %s::text"
    )
    ctes, final, names, change = _derive_turns_parts(
        turn_model, call_model, single=True, calls="src", only_if="EXISTS (SELECT FROM ins)"
    )
    stored_keys = ", ".join(f"s.{c}" for c in (session, turn, call, request_id, digest))
    sql = (
        f"WITH stored AS ({_stored_call_keys_sql(call_model, single=True)}), "
        f"ins AS ({into} SELECT {values} WHERE NOT EXISTS ({guard}) RETURNING *), "
        # the turn's calls: those stored (this snapshot cannot see `ins`' row) and the new one
        f"src AS (SELECT * FROM {table} WHERE {session} = %s::bigint AND {turn} = %s::integer "
        "UNION ALL SELECT * FROM ins), "
        f"{ctes} "
        "SELECT (SELECT count(*) FROM ins), "
        f"(SELECT json_agg(json_build_array({stored_keys}))::text FROM stored AS s), x.* "
        f"FROM (SELECT) AS one LEFT JOIN ({final}) AS x ON true"
    )
    return sql, names, change


def _requests_arrays(requests: Sequence[tuple[int, str]]) -> list[Any]:
    return [_array(tuple(sid for sid, _ in requests)), [rid for _, rid in requests]]


@functools.cache
def _stored_call_keys_sql(model: type[models.Model], *, single: bool) -> str:
    quote = connection.ops.quote_name
    by_attname = {f.attname: f for f in model._meta.concrete_fields}
    session, turn, call, request_id, digest = (
        quote(by_attname[name].column)
        for name in ("session_id", "turn", "call", "request_id", "payload_hash")
    )
    table = quote(model._meta.db_table)
    columns = f"{session}, {turn}, {call}, {request_id}, {digest}"
    if single:
        # Two probes, one per unique index: with `turn = $2 OR request_id = $3` a generic plan
        # probes the session alone and filters all its calls (a long session's thousands).
        select = f"SELECT {columns} FROM {table} WHERE "
        return (
            f"{select}{session} = %s::bigint AND {turn} = %s::integer "
            f"UNION {select}{session} = %s::bigint AND {request_id} = %s::text"
        )
    probe = f"CROSS JOIN LATERAL (SELECT {columns} FROM {table} AS c WHERE c.{session} = k.sid AND "
    return (
        f"SELECT c.* FROM unnest(%s::bigint[], %s::integer[]) AS k (sid, t) "
        f"{probe}c.{turn} = k.t OFFSET 0) AS c "
        f"UNION SELECT c.* FROM unnest(%s::bigint[], %s::text[]) AS k (sid, r) "
        f"{probe}c.{request_id} = k.r OFFSET 0) AS c"
    )


@functools.lru_cache(maxsize=_SHAPES)
def _upsert_locked_sql(
    model: type[models.Model], unique: tuple[str, ...], count: int
) -> tuple[str, list[Any], list[str], list[Any], list[list[Any]]]:
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    by_attname = {f.attname: f for f in meta.concrete_fields}
    quote = connection.ops.quote_name
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    touch = quote(by_attname[unique[-1]].column)
    returned = [pk, *fields]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([placeholders] * count)} "
        f"ON CONFLICT ({', '.join(quote(by_attname[name].column) for name in unique)}) "
        f"DO UPDATE SET {touch} = excluded.{touch} "
        f"RETURNING {', '.join(quote(f.column) for f in returned)}"
    )
    columns = [f.get_col(meta.db_table) for f in returned]
    converters = [
        [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
        for col in columns
    ]
    return sql, fields, [f.attname for f in returned], columns, converters


def set_wise() -> bool:
    """Whether this database takes the set-wise ingest path below (PostgreSQL): new calls as
    COPY rows, their turns derived by the database from the copied rows. Elsewhere the callers
    build model instances and derive in Python (the same figures)."""
    return vendor() == "postgresql"


def copy_rows(model: type[models.Model], rows: Sequence[Sequence[Any]]) -> None:
    """COPY `rows` into `model`'s table: each a tuple of every concrete field but the primary
    key, in the model's field order, JSON fields as JSON text (what psycopg's Jsonb adapter
    sends) and `received_at` included. PostgreSQL only (`set_wise`).

    Tuples, not instances: building an unsaved model instance per call was a large share of
    a batch's CPU (make bench P1), and COPY takes the values as they are.
    """
    if not rows:
        return
    sql, types = _copy_types(model)
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        # The dumper of each column is chosen once, by the column's type, instead of being
        # looked up by each value's Python type: the same text is sent for less Python per
        # row. Binary COPY costs more Python (its Decimal and JSON dumping) and saves no
        # backend CPU.
        shared = _shared_times(cursor.cursor, types, rows)
        if not shared:
            copy.set_types(types)
            write = copy.write_row
            for row in rows:
                write(row)
        else:
            # A datetime every row holds (a batch's `received_at`, and `at` when no record has
            # one) goes as the text its dumper gives, made once instead of once per row, the
            # bytes sent the same (a timestamp holds nothing COPY escapes).
            copy.set_types(["text" if i in shared else kind for i, kind in enumerate(types)])
            write = copy.write_row
            fill = list(shared.items())
            for row in rows:
                values = list(row)
                for i, text in fill:
                    values[i] = text
                write(values)
    _log_statement(sql, started)


def _shared_times(
    cursor: psycopg.Cursor[Any], types: list[str], rows: Sequence[Sequence[Any]]
) -> dict[int, str]:
    """The `timestamptz` columns of `copy_rows` whose rows all hold one and the same datetime
    object, each with that value's text from the dumper COPY would use for the column."""
    if len(rows) < 2:
        return {}
    shared = {}
    for i, kind in enumerate(types):
        if kind != "timestamptz":
            continue
        value = rows[0][i]
        if value is None or any(row[i] is not value for row in rows):
            continue
        oid = cursor.adapters.types[kind].oid
        dumper = cursor.adapters.get_dumper_by_oid(oid, pq.Format.TEXT)(type(value), cursor)
        dumped = dumper.dump(value)
        if dumped is not None:  # (a datetime is never NULL; were it, it is dumped per row)
            shared[i] = bytes(dumped).decode()
    return shared


# The text dumper COPY uses for a column of each type (`Field.db_type` without its modifiers).
# JSON columns get their values as JSON text already (`json_text`), sent as they are: jsonb's
# own dumper would encode them again.
_COPY_DUMPERS = {
    "bigint": "int8",
    "integer": "int4",
    "smallint": "int2",
    "boolean": "bool",
    "varchar": "text",
    "text": "text",
    "numeric": "numeric",
    "timestamp with time zone": "timestamptz",
    "jsonb": "text",
}


@functools.cache
def _copy_types(model: type[models.Model]) -> tuple[str, list[str]]:
    """`copy_rows`' statement and the type each of its columns is dumped as (a KeyError for a
    column type this table does not have yet: add it above)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    types = [_COPY_DUMPERS[str(f.db_type(connection)).split("(")[0]] for f in fields]
    return _copy_sql(model)[0], types


def insert_few(model: type[models.Model], rows: Sequence[Sequence[Any]]) -> None:
    """`copy_rows` for a few rows (`few`): one prepared `INSERT … VALUES`, typed per column.

    A COPY costs a round trip to start it and one to end it, and the server waits on the
    client in between: for a single record that was the largest wait of make bench P2
    (`Client:ClientRead` on the COPY) and more CPU on each side than the INSERT.
    """
    if not rows:
        return
    run(_insert_sql(model, len(rows)), [value for row in rows for value in row])


@functools.lru_cache(maxsize=_PREPARED_ROWS)
def _insert_sql(model: type[models.Model], count: int) -> str:
    into, values = _insert_parts(model)
    return f"{into} VALUES {', '.join([f'({values})'] * count)}"


@functools.cache
def _insert_parts(model: type[models.Model]) -> tuple[str, str]:
    """`INSERT INTO <table> (<every column but the key>)` and one row's placeholders, each cast
    to its column's type (COPY took the JSON columns' text as jsonb; the cast does the same)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    into = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
    )
    return into, ", ".join(f"%s::{f.db_type(connection)}" for f in fields)


def _pairs_arrays(keys: Sequence[Sequence[int]]) -> list[str]:
    """One integer array literal per position of the `keys` tuples (see `_array`)."""
    return [_array(column) for column in zip(*keys, strict=True)]  # type: ignore[misc]


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
    (make bench P1); the database reads the rows it has just copied by their unique index.

    Returns, per session, its highest touched turn as stored now and what the statement changed
    in its touched turns, summed (`telemetry.session_totals.Change`'s fields): the same
    statement reads the touched turns as they were before it (its snapshot), so a session's
    totals move forward without reading its other turns (`telemetry.ingest.pipeline`).
    """
    if not pairs:
        return {}
    single = len(pairs) == 1
    sql, names, change = _derive_turns_sql(turn_model, call_model, single=single)
    keys = list(pairs[0]) if single else _pairs_arrays(sorted(pairs))
    rows = run(sql, [*keys, *keys], prepare=few(pairs))
    return _derived(turn_model, rows, names, change)


def _derived(
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


_TURN_COLUMNS = (
    "session_id",
    "turn",
    "calls",
    "context_tokens",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning_output",
    "cache_reported_calls",
    "cache_read_reported",
    "cache_denominator",
    "cost_uncached_input",
    "cost_cache_read",
    "cost_cache_write_5m",
    "cost_cache_write_1h",
    "cost_output",
    "cost_usd",
    "no_cache_cost_usd",
    "unpriced_calls",
    "first_at",
    "last_at",
    "last_call",
    "model",
    "last_call_context_tokens",
    "last_call_output",
    "last_call_reasoning_output",
    "last_call_appended_chars",
    "last_call_window_tokens",
    "surface_version",
)
# A call's context (`telemetry.usage.context_size`) of the calls' alias `c`.
_CONTEXT = context_sql("c")
_BUCKET_COSTS = (
    "cost_uncached_input",
    "cost_cache_read",
    "cost_cache_write_5m",
    "cost_cache_write_1h",
    "cost_output",
)


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
    ctes, final, names, change = _derive_turns_parts(turn_model, call_model, single=single)
    return f"WITH {ctes} {final}", names, change


def _derive_turns_parts(
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
    turns = quote(turn_model._meta.db_table)
    calls = calls or quote(call_model._meta.db_table)
    reported = "FILTER (WHERE c.reported_cache)"
    # a call is priced when it has cost buckets (`call_figures`: all five or none)
    priced = "FILTER (WHERE c.cost_uncached_input IS NOT NULL)"
    costs = [f"SUM(c.{name}) {priced}" for name in _BUCKET_COSTS]
    aggregates = [
        "COUNT(*)",
        f"MAX{_CONTEXT}",
        *(
            f"SUM(c.{name})::bigint"
            for name in ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h")
        ),
        "SUM(c.output)::bigint",
        "SUM(c.reasoning_output)::bigint",
        f"COUNT(*) {reported}",
        f"COALESCE(SUM(c.cache_read) {reported}, 0)::bigint",
        f"COALESCE(SUM{_CONTEXT} {reported}, 0)::bigint",
        *costs,
        " + ".join(costs),  # NULL when no call was priced
        "SUM(c.no_cache_cost_usd)",
        "COUNT(*) FILTER (WHERE c.cost_uncached_input IS NULL)",
        "MIN(c.at)",
        "MAX(c.at)",
        "MAX(c.call)",
    ]
    grouped = ", ".join(
        f"{expression} AS {quote(name)}"
        for expression, name in zip(aggregates, _TURN_COLUMNS[2 : 2 + len(aggregates)], strict=True)
    )
    last = ", ".join(
        [
            "l.model",
            _CONTEXT.replace("c.", "l."),
            "l.output",
            "l.reasoning_output",
            "l.appended_chars",
            "l.window_tokens",
            "l.surface_version",
        ]
    )
    columns = ", ".join(quote(name) for name in _TURN_COLUMNS)
    updates = ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in _TURN_COLUMNS[2:])
    meta = turn_model._meta
    names = [f.attname for f in meta.concrete_fields]
    returned = ", ".join(quote(f.column) for f in meta.concrete_fields)
    # Rows go in (session, turn) order, so two writers of the same turns lock them alike.
    upsert = (
        f"INSERT INTO {turns} ({columns}) SELECT k.session_id, k.turn, a.*, z.* FROM {keys} "
        f"CROSS JOIN LATERAL (SELECT {grouped} FROM {calls} AS c "
        "WHERE c.session_id = k.session_id AND c.turn = k.turn) AS a "
        f"CROSS JOIN LATERAL (SELECT {last} FROM {calls} AS l "
        "WHERE l.session_id = k.session_id AND l.turn = k.turn ORDER BY l.call DESC LIMIT 1) AS z "
        f"{f'WHERE {only_if} ' if only_if else ''}ORDER BY k.session_id, k.turn "
        f"ON CONFLICT (session_id, turn) DO UPDATE SET {updates} RETURNING {returned}"
    )
    # What the upsert changed, per session (`telemetry.session_totals.Change`): `old` reads the
    # touched turns in the statement's snapshot, before the upsert's writes.
    summed = ("calls", "cache_read_reported", "cache_denominator", "cache_reported_calls")
    change = {
        "new_turns": "COUNT(*) FILTER (WHERE o.turn IS NULL)",
        "calls": "SUM(n.calls - COALESCE(o.calls, 0))::bigint",
        "max_rounds": "MAX(n.calls)",
        "peak": "MAX(n.context_tokens)",
        **{
            key: f"SUM(n.{name} - COALESCE(o.{name}, 0))::bigint"
            for key, name in zip(("read", "denominator", "reported"), summed[1:], strict=True)
        },
        "cost": "COALESCE(SUM(COALESCE(n.cost_usd, 0) - COALESCE(o.cost_usd, 0)), 0)",
        "priced": "bool_or(n.cost_usd IS NOT NULL)",
        "no_cache": (
            "COALESCE(SUM(COALESCE(n.no_cache_cost_usd, 0) - COALESCE(o.no_cache_cost_usd, 0)), 0)"
        ),
        "no_cache_priced": "bool_or(n.no_cache_cost_usd IS NOT NULL)",
        "unpriced": "SUM(n.unpriced_calls - COALESCE(o.unpriced_calls, 0))::bigint",
        "last_seen": "MAX(n.last_at)",
    }
    kept = ", ".join(
        f"t.{name}"
        for name in (
            "session_id",
            "turn",
            *summed,
            "cost_usd",
            "no_cache_cost_usd",
            "unpriced_calls",
        )
    )
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
