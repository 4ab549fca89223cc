"""Hour rollups of calls per (profile, model): kept at ingest, read by the console's overview.

`add_calls` runs inside the ingest transaction, after the new calls are inserted, and adds
their sums to their hour rows with one upsert (`INSERT … ON CONFLICT DO UPDATE SET x = x +
excluded.x`, on PostgreSQL and SQLite alike): a concurrent batch adds to the same row under its
row lock, never overwrites it. Calls are never updated, so increments stay equal to a
from-scratch rebuild (`rebuild_rollups`, which the migration and the bench use, and which the
tests compare against).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from operator import attrgetter
from typing import Any, Final, Protocol

from django.db import connection, transaction
from django.db.models import Count, DecimalField, F, Q, Sum, Value
from django.db.models.functions import Coalesce, TruncHour

from telemetry.ingest.statements import Statement, few, run, vendor
from telemetry.ingest.values import prepare
from telemetry.models import HourlyUsage, LLMCall
from telemetry.usage import BUCKETS, INPUT_BUCKETS, InputCounts

KEY_FIELDS: Final = ("profile_id", "model", "hour")


# An hour row's sums, in the upsert's column order: every bucket's tokens and cost come from
# `telemetry.usage.BUCKETS`, so a new bucket needs its columns (the model) and nothing here.
SUM_FIELDS: Final = (
    "calls",
    *BUCKETS,
    "cache_reported_calls",
    "cache_read_reported",
    "cache_denominator",
    "unpriced_calls",
    *(f"cost_{name}" for name in BUCKETS),
    "cost_usd",
    "no_cache_cost_usd",
)
MONEY_FIELDS: Final = tuple(name for name in SUM_FIELDS if "cost" in name)


def _no_tokens() -> dict[str, int]:
    return dict.fromkeys(BUCKETS, 0)


def _no_money() -> dict[str, Decimal]:
    return dict.fromkeys(MONEY_FIELDS, Decimal(0))


@dataclass(slots=True)
class HourFigures:
    """The sums one hour row holds: `tokens` by bucket, `costs` by column (`MONEY_FIELDS`);
    `figure` reads any of them by its column name (`SUM_FIELDS`)."""

    calls: int = 0
    tokens: dict[str, int] = field(default_factory=_no_tokens)
    cache_reported_calls: int = 0
    cache_read_reported: int = 0
    cache_denominator: int = 0
    unpriced_calls: int = 0
    costs: dict[str, Decimal] = field(default_factory=_no_money)

    def figure(self, name: str) -> int | Decimal:
        """The sum stored in the hour row's column `name`."""
        if name in self.tokens:
            return self.tokens[name]
        if name in self.costs:
            return self.costs[name]
        count: int = getattr(self, name)
        return count

    def figures(self) -> tuple[int | Decimal, ...]:
        """Every sum, in `SUM_FIELDS`' order."""
        return tuple(map(self.figure, SUM_FIELDS))


def hour_of(at: datetime) -> datetime:
    """The start of the UTC hour `at` falls in (naive times are taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def bucket_of(at: datetime, step: timedelta) -> datetime:
    """The start of the UTC hour, or with a step of a day or more the UTC day, `at` falls in:
    the bucket the overview draws `at` in."""
    hour = hour_of(at)
    return hour.replace(hour=0) if step >= timedelta(days=1) else hour


class CallSums(InputCounts, Protocol):
    """What `sum_by_hour` reads of a call: an `LLMCall`, or its COPY row
    (`telemetry.costing.CallRow`)."""

    @property
    def model(self) -> str: ...
    @property
    def at(self) -> datetime: ...
    @property
    def output(self) -> int: ...
    @property
    def reported_cache(self) -> bool: ...
    @property
    def cost_uncached_input(self) -> Decimal | None: ...
    @property
    def cost_cache_read(self) -> Decimal | None: ...
    @property
    def cost_cache_write_5m(self) -> Decimal | None: ...
    @property
    def cost_cache_write_1h(self) -> Decimal | None: ...
    @property
    def cost_output(self) -> Decimal | None: ...
    @property
    def cost_usd(self) -> Decimal | None: ...
    @property
    def no_cache_cost_usd(self) -> Decimal | None: ...


def _money(value: Decimal | None) -> Decimal:
    return Decimal(0) if value is None else value


def sum_by_hour(
    profile_id: int, calls: Iterable[CallSums]
) -> dict[tuple[int, str, datetime], HourFigures]:
    """The sums `calls` add to each (profile, model, hour). Pure arithmetic on the call rows.

    The cache figures count only calls that reported their cache (as a turn's do); costs only
    priced calls, the others counted as `unpriced_calls`.

    Calls are grouped by hour first and each figure summed over a group by `sum` in C: the same
    additions in the same order as adding call by call (Decimals from `Decimal(0)`, in the
    calls' order), for less CPU than a loop over the calls (docs/performance.md;
    tests/db/test_rollups.py holds the two equal).
    """
    # by (model, hours since the epoch): an aware subtraction and a floor division in C, where
    # `hour_of`'s `replace` per call was half of this function; the epoch plus those hours is
    # the hour `hour_of` gives (UTC, the same tzinfo)
    groups: dict[tuple[str, int], list[CallSums]] = {}
    for call in calls:
        at = call.at
        if at.tzinfo is None:  # taken as UTC, as `hour_of` takes it
            at = at.replace(tzinfo=UTC)
        key = (call.model, (at - _EPOCH) // _HOUR)
        members = groups.get(key)
        if members is None:
            groups[key] = [call]
        else:
            members.append(call)
    sums: dict[tuple[int, str, datetime], HourFigures] = {}
    for (model, hours), members in groups.items():
        row = sums[(profile_id, model, _EPOCH + hours * _HOUR)] = HourFigures(calls=len(members))
        reported = [call for call in members if call.reported_cache]
        priced = [call for call in members if call.cost_usd is not None]
        tokens = row.tokens
        for name in BUCKETS:
            tokens[name] = sum(map(_GETTERS[name], members))
        row.cache_reported_calls = len(reported)
        if reported:
            read = sum(map(_GETTERS["cache_read"], reported))
            row.cache_read_reported = read
            # `context_size` over the reported calls, its cache read summed once
            row.cache_denominator = read + sum(
                sum(map(_GETTERS[name], reported)) for name in INPUT_BUCKETS if name != "cache_read"
            )
        row.unpriced_calls = len(members) - len(priced)
        if priced:
            for name in MONEY_FIELDS:
                values: list[Any] = list(map(_GETTERS[name], priced))
                # not `None in values`: a Decimal compared with None asks the numbers ABCs
                if name != "cost_usd" and any(value is None for value in values):
                    values = [_money(value) for value in values]
                row.costs[name] = sum(values, Decimal(0))
    return sums


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR: Final = timedelta(hours=1)
_GETTERS: Final = {name: attrgetter(name) for name in SUM_FIELDS}


# Rows an hour of a model may span under concurrent writers (see `HourlyUsage.stripe`).
STRIPES: Final = 8


def add_calls(profile_id: int, calls: Sequence[CallSums]) -> None:
    """Add newly inserted `calls` (all of one profile) to their hour rows. One statement.

    Rows are written in key order, so two batches touching the same hours lock them in the same
    order and cannot deadlock.

    On PostgreSQL, when the calls fall in a few hour rows (`statements.few`), each goes to the
    first of its stripes no concurrent transaction is writing: the writer of a stripe holds a
    transaction-level advisory lock on it (taken with `pg_try_advisory_xact_lock`, which never
    waits), so a single-record ingest no longer queues behind another request's commit on the
    profile's one hour row (the single largest wait of make bench P2: a third of its backends'
    active time was `Lock:transactionid` on this upsert). With all stripes busy it waits for
    stripe 0, as before; so do larger batches. Alone a writer always takes stripe 0, so
    sequential ingest keeps one row per hour. Elsewhere (SQLite serialises writers) 0.
    """
    statement = _add_statement(profile_id, calls)
    if statement is None:
        return
    if vendor() == "postgresql":
        run(statement.sql, statement.params, prepare=statement.prepare)
        return
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, statement.params)


def add_calls_statement(
    profile_id: int, calls: Sequence[CallSums], *, only_if: str = ""
) -> Statement | None:
    """`add_calls`' statement on PostgreSQL, not yet run (for `statements.run_together`); None
    for no calls. Elsewhere than on PostgreSQL call `add_calls`. `only_if`: an SQL condition
    the rows go in under (a statement's own `WITH` query, `telemetry.ingest.known_sessions`), for a
    request's few hour rows only."""
    assert vendor() == "postgresql"
    return _add_statement(profile_id, calls, only_if)


def _add_statement(
    profile_id: int, calls: Sequence[CallSums], only_if: str = ""
) -> Statement | None:
    if not calls:
        return None
    sums = sum_by_hour(profile_id, calls)
    fields = _row_fields()
    params: list[Any] = []
    for key in sorted(sums):
        params.extend(map(prepare, fields, (*key, *sums[key].figures())))
    if vendor() == "postgresql":
        # A few hour rows (a request's): striped. More (a long import's chunk can span hundreds
        # of hours): each advisory lock would take a slot of the server's shared lock table
        # (max_locks_per_transaction x connections) until commit, so stripe 0 as before.
        striped = few(sums)
        assert striped or not only_if, "a condition only for a request's few hour rows"
        return Statement(_upsert_sql(len(sums), striped=striped, only_if=only_if), params, striped)
    return Statement(_upsert_sql(len(sums), striped=False), params, False)


@functools.cache
def _row_fields() -> tuple[Any, ...]:
    """The fields of an hour row's values in the upsert's order (`KEY_FIELDS`, `SUM_FIELDS`),
    looked up once per process, not per request."""
    by_name = {f.attname: f for f in HourlyUsage._meta.concrete_fields}
    return tuple(by_name[name] for name in (*KEY_FIELDS, *SUM_FIELDS))


@functools.lru_cache(maxsize=32)
def _upsert_sql(count: int, *, striped: bool, only_if: str = "") -> str:
    meta = HourlyUsage._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    by_name = {f.attname: f for f in meta.concrete_fields}
    columns = [*KEY_FIELDS, *SUM_FIELDS]
    names = [quote(by_name[c].column) for c in columns]
    if striped:
        typed = "(" + ", ".join(f"%s::{by_name[c].db_type(connection)}" for c in columns) + ")"
        profile, model, hour = (f"v.{quote(by_name[c].column)}" for c in KEY_FIELDS)
        # One bigint per (hour row, stripe): PostgreSQL keeps one-bigint advisory keys apart
        # from the two-integer keys compaction locks sessions with (`compaction.services`).
        lock_key = (
            f"(hashtext({profile}::text || ':' || {model} || ':' || "
            f"extract(epoch FROM {hour})::bigint::text)::bigint * {STRIPES} + s)"
        )
        # No ORDER BY: a sort would try every stripe's lock before picking one (and hold them
        # all); the function scan yields 0, 1, … in order and LIMIT stops at the first taken.
        stripe = (
            f"COALESCE((SELECT s FROM generate_series(0, {STRIPES - 1}) AS s "
            f"WHERE pg_try_advisory_xact_lock({lock_key}) LIMIT 1), 0)"
        )
        source = (
            f"SELECT v.*, {stripe} FROM (VALUES {', '.join([typed] * count)}) "
            f"AS v ({', '.join(names)}) {f'WHERE {only_if} ' if only_if else ''}"
            f"ORDER BY {profile}, {model}, {hour}"
        )
    else:  # one writer at a time (SQLite): stripe 0
        row = "(" + ", ".join(["%s"] * len(columns)) + ", 0)"
        source = f"VALUES {', '.join([row] * count)}"
    return (
        f"INSERT INTO {table} ({', '.join(names)}, {quote('stripe')}) {source} "
        f"ON CONFLICT ({', '.join(names[: len(KEY_FIELDS)])}, {quote('stripe')}) DO UPDATE SET "
        + ", ".join(f"{quote(c)} = {table}.{quote(c)} + excluded.{quote(c)}" for c in SUM_FIELDS)
    )


def _money_sum(name: str, condition: Q | None = None) -> Coalesce:
    output: DecimalField[Decimal, Decimal] = DecimalField(max_digits=24, decimal_places=9)
    return Coalesce(
        Sum(name, filter=condition, output_field=output), Value(Decimal(0)), output_field=output
    )


def rebuild_rollups() -> int:
    """Recompute every hour row from the calls (the migration's backfill, the bench's loader,
    the tests' oracle). Set-wise: one `INSERT … SELECT … GROUP BY` in the database, whatever the
    number of calls; returns the number of hour rows written.
    """
    reported = Q(reported_cache=True)
    priced = Q(cost_usd__isnull=False)
    sums: dict[str, Any] = {
        "calls": Count("id"),
        **{name: Sum(name) for name in BUCKETS},
        "cache_reported_calls": Count("id", filter=reported),
        "cache_read_reported": Coalesce(Sum("cache_read", filter=reported), 0),
        "cache_denominator": Coalesce(Sum(_context_expression(), filter=reported), 0),
        "unpriced_calls": Count("id", filter=~priced),
        **{name: _money_sum(name, priced) for name in MONEY_FIELDS},
    }
    # The SELECT's columns come out as the values() fields, then the annotations in the order
    # given: each sum under its name, in the order of KEY_FIELDS + SUM_FIELDS, which the INSERT
    # names (an annotation cannot take a model field's name, hence the prefix).
    grouped = (
        LLMCall.objects.values("session__profile_id", "model")
        .annotate(hour=TruncHour("at", tzinfo=UTC), **{f"s_{n}": sums[n] for n in SUM_FIELDS})
        .order_by()
    )
    sql, params = grouped.query.sql_with_params()
    meta = HourlyUsage._meta
    quote = connection.ops.quote_name
    by_name = {f.attname: f for f in meta.concrete_fields}
    columns = ", ".join(quote(by_name[c].column) for c in (*KEY_FIELDS, *SUM_FIELDS))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {quote(meta.db_table)}")
        cursor.execute(f"INSERT INTO {quote(meta.db_table)} ({columns}) {sql}", params)
        return int(cursor.rowcount)


def _context_expression() -> Any:
    """A call's context (`telemetry.usage.context_size`) as an ORM expression over its columns."""
    return functools.reduce(operator.add, (F(name) for name in INPUT_BUCKETS))
