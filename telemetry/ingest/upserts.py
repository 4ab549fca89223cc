"""Writes of rows by key in one statement: `update_rows` (UPDATE … FROM VALUES), `upsert_rows`
(INSERT … ON CONFLICT DO UPDATE from one array per column), and `lock_keys` (insert the missing
keys and lock every row, existing or new, in one upsert), with their not-yet-run statements.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone

from telemetry.ingest.statements import Statement, few, run, vendor
from telemetry.ingest.values import column_array, from_row, prepare
from telemetry.packing import locking_set, stored_table

# The statements below are built once per model (and shape) and process: building them asked
# every field for its column type on every request, a visible share of a single ingest's CPU
# (docs/performance.md, P2). Those whose text grows with the row count keep the most recent
# shapes only (a 1,000-row text is about half a megabyte).
_SHAPES = 32


def update_rows(model: type[models.Model], rows: Sequence[models.Model], names: list[str]) -> None:
    """Write the fields `names` of `rows` (already saved) in one statement.

    On PostgreSQL an `UPDATE … FROM (VALUES …)` (`update_statement`): Django's bulk_update builds
    a CASE per field and row, costly even for a single session (docs/performance.md, P2). Elsewhere
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
    """`update_rows`' statement on PostgreSQL, not yet run; None elsewhere or for no rows.

    A few rows as a VALUES list, more as one array per column (`_update_sql`): a text
    for any number of rows, prepared `by_index` (`statements.PREPARED_ROWS`)."""
    if vendor() != "postgresql" or not rows:
        return None
    if not few(rows):
        sql, fields = _update_sql(model, tuple(names), None)
        columns = [tuple(instance.pk for instance in rows)]
        for f in fields:
            attname = f.attname
            columns.append(tuple(prepare(f, getattr(instance, attname)) for instance in rows))
        return Statement(sql, [column_array(column) for column in columns], True, by_index=True)
    sql, fields = _update_sql(model, tuple(names), len(rows))
    params: list[Any] = []
    for instance in rows:
        params.append(instance.pk)
        params.extend(prepare(f, getattr(instance, f.attname)) for f in fields)
    return Statement(sql, params, True)


@functools.lru_cache(maxsize=_SHAPES)
def _update_sql(
    model: type[models.Model], names: tuple[str, ...], count: int | None
) -> tuple[str, list[models.Field[Any, Any]]]:
    """The UPDATE of `names` for rows given by primary key: `count` rows as a VALUES list, or
    (`count` None) one array per column, each cast to its column's type (`unnest`)."""
    meta = model._meta
    by_name = {f.name: f for f in meta.concrete_fields}
    fields = [by_name[name] for name in names]
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    types = [pk.db_type(connection)] + [f.db_type(connection) for f in fields]
    if count is None:
        source = f"unnest({', '.join(f'%s::{t}[]' for t in types)})"
    else:
        row = f"({', '.join(f'%s::{t}' for t in types)})"
        source = f"(VALUES {', '.join([row] * count)})"
    columns = [quote(pk.column)] + [quote(f.column) for f in fields]
    sql = (
        f"UPDATE {quote(stored_table(model))} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in columns[1:])
        + f" FROM {source} AS v ({', '.join(columns)})"
        + f" WHERE t.{columns[0]} = v.{columns[0]}"
    )
    return sql, fields


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
    field, per value in Python (docs/performance.md, P1); one typed array per column is
    adapted by the driver in one go. Elsewhere bulk_create.
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
    run(
        sql,
        [column_array(column) for column in zip(*rows, strict=True)],
        by_index=not few(rows),
    )


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
        f"INSERT INTO {quote(stored_table(model))} ({', '.join(columns)}) "
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
    the stored row: one round trip instead of an insert and a locking read
    (docs/performance.md, P2).

    The defaults are prepared once per model and process: building an instance per key and
    preparing its values for an upsert that almost always finds the row would cost a
    single-record ingest Python on every request (docs/performance.md, P2).
    """
    if vendor() != "postgresql":
        return None
    if not keys:
        return []
    sql, params = lock_keys_statement(model, keys, unique)
    rows = run(sql, params, by_index=not few(keys))
    return locked_rows(model, len(keys), unique, rows)


def lock_keys_statement(
    model: type[models.Model], keys: Sequence[tuple[Any, ...]], unique: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """`lock_keys`' statement and values, not yet run (PostgreSQL; `locked_rows` reads them):
    a few keys' rows as a VALUES list, more as one array per column (one text for any number
    of keys, prepared `by_index`: `statements.PREPARED_ROWS`)."""
    base, key_slots, now_slots, default_slots = _blank_row(model, unique)
    now = timezone.now()
    if not few(keys):
        sql, fields = _upsert_locked_arrays_sql(model, unique)
        count = len(keys)
        columns: list[tuple[Any, ...]] = [(value,) * count for value in base]
        for position, slot in enumerate(key_slots):
            field = fields[slot]
            columns[slot] = tuple(prepare(field, key[position]) for key in keys)
        for slot in now_slots:
            columns[slot] = (now,) * count
        for slot in default_slots:
            field = fields[slot]
            columns[slot] = tuple(prepare(field, field.get_default()) for _ in keys)
        return sql, [column_array(column) for column in columns]
    sql, fields, _, _, _ = _upsert_locked_sql(model, unique, len(keys))
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


@functools.cache
def _upsert_locked_arrays_sql(
    model: type[models.Model], unique: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """`_upsert_locked_sql`'s statement with the rows as one array per column (each cast to its
    column's type), inserted in the arrays' order, so the rows are locked in the keys' order."""
    into, conflict, fields = _upsert_locked_parts(model, unique)
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
    return f"{into} SELECT * FROM unnest({arrays}) {conflict}", fields


@functools.cache
def _upsert_locked_parts(
    model: type[models.Model], unique: tuple[str, ...]
) -> tuple[str, str, list[Any]]:
    """`INSERT INTO <table> (<every column but the key>)`, the `ON CONFLICT … RETURNING …` that
    locks and returns each row, and the inserted fields, in their columns' order."""
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    by_attname = {f.attname: f for f in meta.concrete_fields}
    quote = connection.ops.quote_name
    touch = quote(by_attname[unique[-1]].column)
    into = (
        f"INSERT INTO {quote(stored_table(model))} ({', '.join(quote(f.column) for f in fields)})"
    )
    conflict = (
        f"ON CONFLICT ({', '.join(quote(by_attname[name].column) for name in unique)}) "
        f"DO UPDATE SET {locking_set(model) or f'{touch} = excluded.{touch}'} "
        f"RETURNING {', '.join(quote(f.column) for f in [pk, *fields])}"
    )
    return into, conflict, fields


@functools.lru_cache(maxsize=_SHAPES)
def _upsert_locked_sql(
    model: type[models.Model], unique: tuple[str, ...], count: int
) -> tuple[str, list[Any], list[str], list[Any], list[list[Any]]]:
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    into, conflict, fields = _upsert_locked_parts(model, unique)
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    returned = [pk, *fields]
    sql = f"{into} VALUES {', '.join([placeholders] * count)} {conflict}"
    columns = [f.get_col(meta.db_table) for f in returned]
    converters = [
        [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
        for col in columns
    ]
    return sql, fields, [f.attname for f in returned], columns, converters
