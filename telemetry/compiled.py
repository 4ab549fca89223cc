"""Read statements the ORM would rebuild on every request, compiled once and run as raw SQL.

Some of the console's reads are a fixed statement whose only changing values are times (the
range's start and end, "pending since before", a period's bucket starts): built through the ORM
they cost more CPU to compile (dozens of subqueries, cases and sums) than PostgreSQL spends
running them. `CompiledRead` compiles such a queryset once per key (whatever else shapes it: the
thresholds, the zone, the database) with stand-ins in place of those times, and puts the real
times into the parameters on each run. The statement is the ORM's own text and its rows go
through the ORM's own converters (a sum of integers is an int, a sum of money an exact
`Decimal`, a truncated day an aware datetime), so what it reads is by construction what the
queryset reads, on the database the routers pick for a read of its model (a replica where one
serves reads).

A value is a time, a tuple of times (one parameter holding them all, e.g. the bucket starts
of `BucketNumber`: an array on PostgreSQL, JSON text elsewhere, so the statement keeps one shape
whatever their number) or an integer (a row's id).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Expression, F, IntegerField, Model, QuerySet
from django.db.models.sql.compiler import SQLCompiler

from telemetry.ingest import pg_prepared
from telemetry.ingest.statements import log_statement, numbered

# A time no row holds: the stand-in compiled into a statement's parameters for the time it takes
# (the n-th value's stand-in is `n` microseconds later, so each is told apart).
STANDIN: Final = datetime(1, 1, 1, 0, 0, 0, 4242, tzinfo=UTC)
# The same for an integer (a row's id): no row has a negative id.
INT_STANDIN: Final = -4_242_000_000

Time = datetime | tuple[datetime, ...] | int

# A parameter's place in a statement Django wrote (`%s`) or a percent sign written as text (`%%`)
_PLACEHOLDER: Final = re.compile(r"%[%s]")


def binds_client_side(connection: BaseDatabaseWrapper) -> bool:
    """Whether `connection` merges the parameters into the statement's text before sending it
    (psycopg's client-side binding, Django's default on PostgreSQL)."""
    return connection.vendor == "postgresql" and not connection.settings_dict.get(
        "OPTIONS", {}
    ).get("server_side_binding")


def inline_fixed(
    connection: BaseDatabaseWrapper,
    sql: str,
    params: Sequence[Any],
    kept: frozenset[int],
) -> tuple[str, tuple[Any, ...], dict[int, int]]:
    """`sql` with every parameter but those at the positions `kept` written into its text as
    the literal psycopg's client-side binding writes for it (`compose_sql`, its own `mogrify`),
    the parameters at `kept`, and each kept position's new position. With client-side binding
    the text PostgreSQL receives is the same (tests/db/test_overview_compiled.py), but psycopg
    splits and adapts only the kept parameters on each run: a statement with a case per
    profile carries hundreds of fixed thresholds, and a text over 4 KB is split anew on every
    run, not cached."""
    ops: Any = connection.ops  # PostgreSQL's: `compose_sql` is psycopg's client-side mogrify
    parts: list[str] = []
    left: list[Any] = []
    moved: dict[int, int] = {}
    position = 0
    last = 0
    for match in _PLACEHOLDER.finditer(sql):
        parts.append(sql[last : match.start()])
        last = match.end()
        if match.group(0) == "%%":
            parts.append("%%")
            continue
        if position in kept:
            moved[position] = len(left)
            left.append(params[position])
            parts.append("%s")
        else:
            literal = ops.compose_sql("%s", [params[position]])
            parts.append(literal.replace("%", "%%"))
        position += 1
    parts.append(sql[last:])
    assert position == len(params), "a parameter without its placeholder"
    return "".join(parts), tuple(left), moved


def adapt_times(connection: BaseDatabaseWrapper, times: Sequence[datetime]) -> Any:
    """`times` as one parameter of `connection`: a list (an array) on PostgreSQL, else the JSON
    text of a list of the times as the backend stores them (SQLite compares them as text)."""
    adapted = [connection.ops.adapt_datetimefield_value(at) for at in times]
    if connection.vendor == "postgresql":
        return adapted
    return json.dumps(adapted)


def _adapt(connection: BaseDatabaseWrapper, value: Time) -> Any:
    if isinstance(value, int):
        return value
    if isinstance(value, tuple):
        return adapt_times(connection, value)
    return connection.ops.adapt_datetimefield_value(value)


def _standin(n: int, value: Time) -> Time:
    if isinstance(value, int):
        return INT_STANDIN - n
    at = STANDIN + timedelta(microseconds=n)
    return (at,) if isinstance(value, tuple) else at


@dataclass(frozen=True)
class _Statement:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, int], ...]  # (position in params, index of the value it takes)
    compiler: SQLCompiler
    converters: dict[int, tuple[list[Any], Any]]


class CompiledRead:
    """One read of `model`'s table, compiled once per key (one key held at a time: the latest).
    The key must name everything the statement depends on but the times."""

    def __init__(self, model: type[Model]) -> None:
        self.model = model
        self._held: tuple[Hashable, _Statement] | None = None

    def _compiled(
        self, alias: str, key: Hashable, values: Sequence[Time], build: Callable[..., QuerySet[Any]]
    ) -> _Statement:
        connection = connections[alias]
        full_key = (alias, connection.vendor, connection.settings_dict["NAME"], len(values), key)
        if self._held is not None and self._held[0] == full_key:
            return self._held[1]
        standins = [_standin(n, value) for n, value in enumerate(values)]
        compiler = build(*standins).query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        # the stand-ins as the backend takes them (SQLite: text), found among the parameters
        adapted = [_adapt(connection, standin) for standin in standins]
        slots = tuple(
            (position, adapted.index(param))
            for position, param in enumerate(params)
            if any(param == a for a in adapted)
        )
        assert {n for _, n in slots} == set(range(len(values))), "a value is not a parameter"
        if binds_client_side(connection):
            sql, params, moved = inline_fixed(
                connection, sql, params, frozenset(position for position, _ in slots)
            )
            slots = tuple((moved[position], n) for position, n in slots)
        select = [column[0] for column in compiler.select[: compiler.col_count]]
        statement = _Statement(sql, tuple(params), slots, compiler, compiler.get_converters(select))
        self._held = (full_key, statement)
        return statement

    def read(
        self, key: Hashable, values: Sequence[Time], build: Callable[..., QuerySet[Any]]
    ) -> Read:
        """The statement `build(*values)` with these values, not yet run (`run_reads` runs it,
        with others in the same round trip); `build(*stand-ins)` is compiled only when `key`
        (or the database) is not the one held."""
        alias = router.db_for_read(self.model) or "default"
        compiled = self._compiled(alias, key, values, build)
        params = list(compiled.params)
        connection = connections[alias]
        for position, n in compiled.slots:
            params[position] = _adapt(connection, values[n])
        return Read(alias, compiled.sql, tuple(params), compiled)

    def statement(
        self, key: Hashable, values: Sequence[Time], build: Callable[..., QuerySet[Any]]
    ) -> tuple[str, str, tuple[Any, ...]]:
        """The database alias, SQL and parameters of `build(*values)` (`read`)."""
        found = self.read(key, values, build)
        return found.alias, found.sql, found.params

    def tuples(
        self, key: Hashable, values: Sequence[Time], build: Callable[..., QuerySet[Any]]
    ) -> list[list[Any]]:
        """The statement's rows as lists, each column converted as the ORM converts it."""
        (result,) = run_reads([self.read(key, values, build)])
        return result.tuples()

    def rows(
        self, key: Hashable, at: datetime | Sequence[Time], build: Callable[..., QuerySet[Any]]
    ) -> list[dict[str, Any]]:
        """The statement's rows, as dicts by column name (converted as the ORM converts them).
        `at`: the one time `build` takes, or the values it takes in order."""
        values: Sequence[Time] = (at,) if isinstance(at, datetime) else at
        (result,) = run_reads([self.read(key, values, build)])
        return result.dicts()


@dataclass(frozen=True)
class Read:
    """One run of a compiled statement: its database, its text and values, and how its rows
    convert."""

    alias: str
    sql: str
    params: tuple[Any, ...]
    statement: _Statement


@dataclass(frozen=True)
class Result:
    """A read's rows as the driver loaded them, with its columns' names."""

    read: Read
    names: tuple[str, ...]
    loaded: list[tuple[Any, ...]]

    def tuples(self) -> list[list[Any]]:
        """The rows as lists, each column converted as the ORM converts it."""
        compiled = self.read.statement
        if not compiled.converters:
            return [list(row) for row in self.loaded]
        return list(compiled.compiler.apply_converters(self.loaded, compiled.converters))

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts by column name, converted as the ORM converts them."""
        return [dict(zip(self.names, row, strict=True)) for row in self.tuples()]


def run_reads(reads: Sequence[Read]) -> list[Result]:
    """Every read's rows, in order.

    On PostgreSQL (`DB_PREPARED_STATEMENTS` and `DB_PIPELINE`, psycopg preparing nothing of
    its own) reads of one database go together in one round trip, each as a statement the
    connection prepared once (`telemetry.ingest.pg_prepared`, as ingest's statements run): the
    server neither parses nor plans again a text it has seen (the overview's band counts and
    relief counts took longer to plan than to run), and the reads do not each wait for the one
    before. Elsewhere, and behind a pooler that passes neither, each runs through a cursor.
    The rows are the same either way (tests/db/test_compiled_together.py)."""
    if not reads:
        return []
    alias = reads[0].alias
    db = connections[alias]
    db.ensure_connection()
    texts = [numbered(read.sql) for read in reads]
    if (
        all(read.alias == alias for read in reads)
        and all(text is not None for text in texts)
        and _prepares(db)
    ):
        raw = db.connection
        started = time.monotonic()
        with db.wrap_database_errors:
            done = pg_prepared.execute_all(
                raw, [(text, read.params) for text, read in zip(texts, reads, strict=True) if text]
            )
            results = [
                Result(
                    read,
                    tuple((result.fname(i) or b"").decode("utf-8") for i in range(result.nfields)),
                    pg_prepared.rows(raw, result),
                )
                for read, result in zip(reads, done, strict=True)
            ]
        if db.queries_logged:  # as Django logs its own: the text with its values in it
            ops: Any = db.ops  # PostgreSQL's: `compose_sql` is psycopg's client-side mogrify
            for read in reads:
                log_statement(ops.compose_sql(read.sql, read.params), started, db)
        return results
    return [_run_one(read) for read in reads]


def _prepares(db: BaseDatabaseWrapper) -> bool:
    """Whether `db` runs compiled reads prepared and pipelined (see `run_reads`)."""
    return (
        db.vendor == "postgresql"
        and bool(settings.DB_PREPARED_STATEMENTS)
        and bool(settings.DB_PIPELINE)
        # psycopg prepares Django's statements itself under DB_SERVER_SIDE_BINDING, and then
        # deallocates every prepared statement after a rollback, `pg_prepared`'s too
        and db.connection.prepare_threshold is None
    )


def _run_one(read: Read) -> Result:
    with connections[read.alias].cursor() as cursor:
        cursor.execute(read.sql, read.params)
        names = tuple(column[0] for column in cursor.description)
        loaded = cursor.fetchall()
    return Result(read, names, loaded)


class BucketNumber(Expression):
    """How many of `starts` (ascending times) are at or before the time `expression`: 0 before
    the first, `len(starts)` at or after the last. When `starts` are consecutive buckets' starts
    it is the number (from 1) of the bucket holding the time, so a statement can group rows by
    buckets a Python rule drew (`console.periods.Period.bucket_starts`) without the rule written
    again in SQL. The starts are one parameter (`adapt_times`): the statement's shape does not
    depend on how many there are."""

    def __init__(self, expression: Any, starts: Sequence[datetime]) -> None:
        super().__init__(output_field=IntegerField())
        self.expression = F(expression) if isinstance(expression, str) else expression
        self.starts = tuple(starts)

    def get_source_expressions(self) -> list[Any]:
        return [self.expression]

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        (self.expression,) = exprs

    def resolve_expression(
        self,
        query: Any = None,
        allow_joins: bool = True,
        reuse: Any = None,
        summarize: bool = False,
        for_save: bool = False,
    ) -> BucketNumber:
        copy = self.copy()
        copy.expression = self.expression.resolve_expression(
            query, allow_joins, reuse, summarize, for_save
        )
        return copy

    def as_sql(
        self, compiler: Any, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        sql, params = compiler.compile(self.expression)
        starts = adapt_times(connection, self.starts)
        return (
            f"(SELECT COUNT(*) FROM json_each(%s) AS s WHERE s.value <= {sql})",
            (starts, *params),
        )

    def as_postgresql(
        self, compiler: Any, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        sql, params = compiler.compile(self.expression)
        # width_bucket with an array of thresholds: how many are <= the operand
        return (
            f"width_bucket({sql}, %s::timestamptz[])",
            (*params, adapt_times(connection, self.starts)),
        )
