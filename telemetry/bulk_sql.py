"""The raw SQL of telemetry, in one place: the two bulk writes of an ingest batch on PostgreSQL.

Why raw: an ingest batch must cost a constant number of statements whatever its size, and the
ORM's two bulk paths were the measured bottlenecks (`make bench`, P1 and P2). COPY sends rows as
they are instead of preparing and quoting values field by field; `UPDATE … FROM (VALUES …)`
replaces bulk_update's CASE per field and row. Every other backend uses the ORM equivalent, so
SQLite (and the tests on it) exercise the same callers with the same results.

The rate counter (`count_request`) is raw for another reason: it must be one atomic statement
across processes, and the ORM has no upsert that returns the new value.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone


def insert_rows(model: type[models.Model], rows: Sequence[models.Model]) -> None:
    """Insert new rows of `model` in one statement: COPY on PostgreSQL, a bulk INSERT elsewhere.

    The caller has already checked the unique keys under its locks, so COPY meets no conflict
    that bulk_create would not also have raised. `received_at` (auto_now_add) is stamped here.
    """
    if connection.vendor != "postgresql" or not rows:
        model._default_manager.bulk_create(rows)
        return
    from psycopg.types.json import Jsonb

    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    received = timezone.now()  # what auto_now_add would set
    quote = connection.ops.quote_name
    sql = (
        f"COPY {quote(model._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    )
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            if hasattr(row, "received_at"):
                row.received_at = received
            copy.write_row(
                [
                    Jsonb(getattr(row, f.attname))
                    if f.attname in json_fields
                    else getattr(row, f.attname)
                    for f in fields
                ]
            )
    _log_statement(sql, started)


def update_rows(model: type[models.Model], rows: Sequence[models.Model], names: list[str]) -> None:
    """Write the fields `names` of `rows` (already saved) in one statement.

    On PostgreSQL an `UPDATE … FROM (VALUES …)`: Django's bulk_update builds a CASE per field
    and row and cost ~13 ms for a single session (make bench, P2). Elsewhere bulk_update.
    """
    if connection.vendor != "postgresql" or not rows:
        model._default_manager.bulk_update(rows, names)
        return
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
        + f" FROM (VALUES {', '.join([row] * len(rows))}) AS v ({', '.join(columns)})"
        + f" WHERE t.{columns[0]} = v.{columns[0]}"
    )
    params: list[Any] = []
    for instance in rows:
        params.append(instance.pk)
        params.extend(f.get_db_prep_save(getattr(instance, f.attname), connection) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def count_request(model: type[models.Model], key_id: int, window: int) -> int:
    """Add one to the (key, window) counter row and return its new value, atomically.

    `INSERT … ON CONFLICT DO UPDATE … RETURNING` is one statement on PostgreSQL and on SQLite
    (3.35+): two processes counting at once can never read the same value.
    """
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({quote('key_id')}, {quote('window')}, {quote('count')}) "
        f"VALUES (%s, %s, 1) ON CONFLICT ({quote('key_id')}, {quote('window')}) "
        f"DO UPDATE SET {quote('count')} = {table}.{quote('count')} + 1 "
        f"RETURNING {quote('count')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_id, window])
        row = cursor.fetchone()
    return int(row[0])


def _log_statement(sql: str, started: float) -> None:
    """Count a statement run on the raw driver cursor like Django counts its own."""
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


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
    meta = model._meta
    by_attname = {f.attname: f for f in meta.concrete_fields}
    fields = [by_attname[name] for name in names]
    updates = [f for f in fields if f.attname not in unique]
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(
            [model(**dict(zip(names, row, strict=True))) for row in rows],
            update_conflicts=True,
            unique_fields=[by_attname[name].name for name in unique],
            update_fields=[f.name for f in updates],
        )
        return
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in fields]
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "
        f"SELECT * FROM unnest({arrays}) "
        f"ON CONFLICT ({', '.join(quote(by_attname[name].column) for name in unique)}) "
        f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in map(quote, (f.column for f in updates)))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(column) for column in zip(*rows, strict=True)])


def upsert_locked(
    model: type[models.Model], new: Sequence[models.Model], unique: list[str]
) -> list[Any] | None:
    """Insert the rows of `new` that do not exist yet (by the `unique` attributes) and lock all of
    them, existing or new, until the end of the transaction; returns every row as stored.

    On PostgreSQL one `INSERT … ON CONFLICT DO UPDATE SET <a unique column> = itself RETURNING *`:
    the no-op update takes a row lock that excludes every other writer and `SELECT … FOR UPDATE`,
    in the order of `new` (the caller sorts it, so concurrent callers cannot deadlock), and
    returns the stored row: one round trip instead of an insert and a locking read (make bench
    P2, the single-record path). Elsewhere None: the caller inserts and locks with the ORM.
    """
    if connection.vendor != "postgresql":
        return None
    if not new:
        return []
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    by_attname = {f.attname: f for f in meta.concrete_fields}
    quote = connection.ops.quote_name
    params: list[Any] = []
    for row in new:
        params.extend(f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields)
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    touch = quote(by_attname[unique[-1]].column)
    returned = [pk, *fields]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([placeholders] * len(new))} "
        f"ON CONFLICT ({', '.join(quote(by_attname[name].column) for name in unique)}) "
        f"DO UPDATE SET {touch} = excluded.{touch} "
        f"RETURNING {', '.join(quote(f.column) for f in returned)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    columns = [f.get_col(meta.db_table) for f in returned]
    converters = [
        [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
        for col in columns
    ]
    names = [f.attname for f in returned]
    out = []
    for values in rows:
        converted = []
        for value, col, funcs in zip(values, columns, converters, strict=True):
            for convert in funcs:
                value = convert(value, col, connection)
            converted.append(value)
        out.append(model.from_db(connection.alias, names, converted))
    return out


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
    index: the ORM's window-aggregate query compiled for ~6 ms of CPU on every single-record
    ingest (make bench P2), longer than PostgreSQL took to run it.
    """
    if connection.vendor != "postgresql":
        return None
    if not ids:
        return []
    sql, names = _latest_with_totals_sql(model, partition, latest, tuple(totals))
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(ids)])
        rows = cursor.fetchall()
    width = len(names)
    out = []
    for values in rows:
        instance = model.from_db(connection.alias, names, values[:width])
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
        f"FROM {quote(meta.db_table)} WHERE {group} = ANY(%s) GROUP BY {group}) AS a "
        f"JOIN {quote(meta.db_table)} AS t ON t.{group} = a.{group} AND t.{last} = a.latest_value"
    )
    return sql, [f.attname for f in meta.concrete_fields]
