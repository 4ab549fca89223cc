"""New rows in one statement: COPY on PostgreSQL (`copy_rows` of tuples, `insert_rows` of
instances), the ORM's bulk insert elsewhere; `insert_parts`, the INSERT a single record's
statements build on (`call_keys`, `known_sessions`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import psycopg
from django.db import connection, models
from django.utils import timezone
from psycopg import pq

from telemetry.ingest.statements import log_statement, vendor
from telemetry.ingest.values import json_text
from telemetry.packing import stored_table


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
            # one C call picks the row's values in column order; only the JSON ones are redone:
            # what the field saves as SQL NULL (None; a `FlagList`'s no flags) goes as NULL
            values = list(values_of(row.__dict__))
            for i, field in json_columns:
                if field.get_db_prep_save(values[i], connection) is None:
                    values[i] = None
                else:
                    values[i] = json_text(values[i])
            copy.write_row(values)
    log_statement(sql, started)


@functools.cache
def _copy_sql(
    model: type[models.Model],
) -> tuple[
    str, Callable[[dict[str, Any]], tuple[Any, ...]], tuple[tuple[int, models.Field[Any, Any]], ...]
]:
    """COPY's statement, a getter of a row's values in its column order (always a tuple: the
    model has more than one column), and the positions of its JSON columns."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    json_columns = tuple(
        (i, f) for i, f in enumerate(fields) if f.get_internal_type() == "JSONField"
    )
    quote = connection.ops.quote_name
    sql = (
        f"COPY {quote(stored_table(model))} "
        f"({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    )
    return sql, itemgetter(*(f.attname for f in fields)), json_columns


def copy_rows(model: type[models.Model], rows: Sequence[Sequence[Any]]) -> None:
    """COPY `rows` into `model`'s table: each a tuple of every concrete field but the primary
    key, in the model's field order, JSON fields as JSON text (what psycopg's Jsonb adapter
    sends) and `received_at` included. PostgreSQL only (`set_wise`).

    Tuples, not instances: building an unsaved model instance per call was a large share of
    a batch's CPU (docs/performance.md, P1), and COPY takes the values as they are.
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
        hexed = _bytea_columns(model)
        if not shared and not hexed:
            copy.set_types(types)
            write = copy.write_row
            for row in rows:
                write(row)
        else:
            # A datetime every row holds (a batch's `received_at`, and `at` when no record has
            # one) goes as the text its dumper gives, made once instead of once per row, the
            # bytes sent the same (a timestamp holds nothing COPY escapes). A bytea value goes
            # as `bytea_text` of it, the text the driver's bytea dumper gives, without that
            # dumper: a Python one, called per value, which the driver's C row formatting
            # calls at several times the cost of a text value (docs/performance.md, P1).
            copy.set_types(
                ["text" if i in shared or i in hexed else kind for i, kind in enumerate(types)]
            )
            write = copy.write_row
            fill = list(shared.items())
            for row in rows:
                values = list(row)
                for i, text in fill:
                    values[i] = text
                for i in hexed:
                    value = values[i]
                    if value is not None:
                        values[i] = bytea_text(value)
                write(values)
    log_statement(sql, started)


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
    "bytea": "bytea",
}


@functools.cache
def _copy_types(model: type[models.Model]) -> tuple[str, list[str]]:
    """`copy_rows`' statement and the type each of its columns is dumped as (a KeyError for a
    column type this table does not have yet: add it above)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    types = [_COPY_DUMPERS[str(f.db_type(connection)).split("(")[0]] for f in fields]
    return _copy_sql(model)[0], types


@functools.cache
def _bytea_columns(model: type[models.Model]) -> tuple[int, ...]:
    """The positions of `model`'s bytea columns in `copy_rows`' rows."""
    return tuple(i for i, kind in enumerate(_copy_types(model)[1]) if kind == "bytea")


def bytea_text(value: bytes) -> str:
    """The text of a bytea value in COPY's rows: its hex form, `\\x` and two lowercase digits a
    byte, what the driver's bytea dumper gives (`PQescapeByteaConn`, with
    `standard_conforming_strings` on: PostgreSQL's default); tests/db/test_copy_rows.py holds
    the two equal over drawn bytes, and a copied row's bytes equal to the driver's."""
    return "\\x" + value.hex()


def insert_parts(model: type[models.Model]) -> tuple[str, str]:
    """`INSERT INTO <table> (<every column but the key>)` and one row's placeholders, each cast
    to its column's type (COPY took the JSON columns' text as jsonb; the cast does the same)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    into = (
        f"INSERT INTO {quote(stored_table(model))} ({', '.join(quote(f.column) for f in fields)})"
    )
    return into, ", ".join(f"%s::{f.db_type(connection)}" for f in fields)
