"""The overview's compiled reads (`telemetry.compiled`) read what the ORM's per-hour definition
reads: bucket numbers at the edges, sums per bucket and per profile to the last decimal, in
zones whose days and hours are not UTC's, on PostgreSQL and SQLite."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import F, Sum

from compaction.models import CompactionRun
from console.overview import (
    COST_KEYS,
    TOP_SESSIONS,
    _buckets,
    _compactions,
    _spend,
    _spend_query,
    load_overview,
)
from console.periods import Period
from telemetry.band_sql import RANK_OF_BAND
from telemetry.compiled import BucketNumber, CompiledRead
from telemetry.models import AgentProfile, AgentSession, ContextEvent, HourlyUsage
from telemetry.session_state import session_band

pytestmark = pytest.mark.django_db

COLUMNS = {
    "n": "calls",
    "read": "cache_read_reported",
    "denominator": "cache_denominator",
    "reported": "cache_reported_calls",
    "unpriced": "unpriced_calls",
    "cost": "cost_usd",
    "no_cache": "no_cache_cost_usd",
    **{f"c_{key}": f"cost_{key}" for key in COST_KEYS},
}


def _hour(
    profile: AgentProfile, at: datetime, n: int, *, model: str = "m", stripe: int = 0
) -> None:
    """A rollup row whose figures grow with `n` (money with nine decimals, none of them round)."""
    money = Decimal(n) + Decimal("0.000000001") * (7919 * n % 1000) + Decimal("0.123456789")
    HourlyUsage.objects.create(
        profile=profile,
        model=model,
        hour=at,
        stripe=stripe,
        calls=n,
        cache_reported_calls=n // 2,
        cache_read_reported=1000 * n,
        cache_denominator=1500 * n + 1,
        unpriced_calls=n % 3,
        cost_usd=money * 5,
        no_cache_cost_usd=money * 9,
        **{f"cost_{key}": money for key in COST_KEYS},
    )


def _reference(period: Period, profile: AgentProfile | None) -> tuple[list[Any], dict[int, Any]]:
    """The per-hour definition through the ORM: each rollup hour of [the hour holding the start,
    end) summed in Python into the bucket whose interval holds it, and per profile."""
    first = period.start.replace(minute=0, second=0, microsecond=0)
    rows = HourlyUsage.objects.filter(hour__gte=first, hour__lt=period.end)
    sums = {name: Sum(column) for name, column in COLUMNS.items()}
    buckets: dict[datetime, dict[str, Any]] = {
        start: defaultdict(int) for start in period.bucket_starts()
    }
    chosen = rows if profile is None else rows.filter(profile=profile)
    for row in chosen.values("hour").annotate(**sums).order_by("hour"):
        holding = [s for s in buckets if s <= row["hour"] < period.next_start(s)]
        for start in holding:
            for name in COLUMNS:
                buckets[start][name] += row[name]
    per_profile = {
        row["profile_id"]: {name: row[name] for name in COLUMNS}
        for row in rows.values("profile_id").annotate(**sums).order_by()
    }
    return [(start, dict(b)) for start, b in buckets.items()], per_profile


def _figures(buckets: list[Any]) -> list[Any]:
    return [
        (
            b.start,
            {
                name: value
                for name, value in {
                    "n": b.calls,
                    "read": b.read,
                    "denominator": b.denominator,
                    "reported": b.reported,
                    "unpriced": b.unpriced,
                    "cost": b.cost,
                    "no_cache": b.saved + b.cost,
                    **{f"c_{key}": b.costs[key] for key in COST_KEYS},
                }.items()
                if value
            },
        )
        for b in buckets
    ]


def _exact(figures: Any) -> Any:
    """`figures` as compared: exact on PostgreSQL (numeric sums); SQLite stores decimals as
    floats and sums them so (a day's sum and the sum of its hours' sums differ in the tenth
    decimal), so there money is compared to the nano-dollar the columns hold."""
    if connection.vendor != "sqlite":
        return figures
    if isinstance(figures, Decimal):
        return figures.quantize(Decimal("1e-9"))
    if isinstance(figures, dict):
        return {k: _exact(v) for k, v in figures.items()}
    if isinstance(figures, list | tuple):
        return type(figures)(_exact(v) for v in figures)
    return figures


PERIODS = [
    # a half-hour zone: the hour holding the start lies before the first local midnight
    Period(
        datetime(2026, 11, 1, 18, 45, tzinfo=UTC),
        datetime(2026, 11, 8, 18, 45, tzinfo=UTC),
        "Asia/Kolkata",
    ),
    # a DST change: a 25-hour local day, then hour buckets across the repeated hour
    Period(
        datetime(2026, 10, 30, 4, tzinfo=UTC),
        datetime(2026, 11, 3, 4, tzinfo=UTC),
        "America/New_York",
    ),
    Period(
        datetime(2026, 11, 1, 2, 10, tzinfo=UTC),
        datetime(2026, 11, 2, 2, 10, tzinfo=UTC),
        "America/New_York",
    ),
    # a half-hour DST change inside hour buckets
    Period(
        datetime(2026, 4, 4, 10, tzinfo=UTC),
        datetime(2026, 4, 5, 16, tzinfo=UTC),
        "Australia/Lord_Howe",
    ),
    Period(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC), "UTC"),
]


@pytest.mark.parametrize("period", PERIODS, ids=lambda p: f"{p.zone}-{p.bucket}")
def test_the_spend_per_bucket_and_per_profile_is_the_per_hour_definition(period: Period) -> None:
    first, other = (AgentProfile.objects.create(name=n) for n in ("first", "other"))
    # every hour from two before the period to two after, two models, a second stripe
    at = period.start.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    n = 1
    while at < period.end + timedelta(hours=2):
        _hour(first, at, n)
        if n % 3 == 0:
            _hour(first, at, n + 1, model="m2")
            _hour(other, at, n + 2)
        if n % 5 == 0:
            _hour(first, at, n + 3, stripe=1)
        at += timedelta(hours=1)
        n += 1

    for profile in (None, first, other):
        buckets, per_profile = _spend(period, profile)
        expected_buckets, expected_profiles = _reference(period, profile)
        assert _exact(_figures(buckets)) == _exact(
            [(s, {k: v for k, v in b.items() if v}) for s, b in expected_buckets]
        )
        assert _figures(_buckets(period, profile)) == _figures(buckets)
        # a profile's line: its totals (its costs by bucket are not read)
        totals = [name for name in COLUMNS if not name.startswith("c_")]
        assert _exact(
            {pk: {name: row[name] for name in totals} for pk, row in per_profile.items()}
        ) == _exact(
            {pk: {name: row[name] for name in totals} for pk, row in expected_profiles.items()}
        )
        # exact decimals and ints, as the ORM converts them (a PostgreSQL sum of bigints is a
        # numeric: the converters make it an int again)
        for row in per_profile.values():
            assert type(row["n"]) is int and type(row["cost"]) is Decimal


def test_bucket_numbers_at_the_edges_count_the_starts_at_or_before_the_hour() -> None:
    profile = AgentProfile.objects.create(name="edges")
    starts = (
        datetime(2026, 11, 1, 4, tzinfo=UTC),
        datetime(2026, 11, 2, 5, tzinfo=UTC),  # a 25-hour day
        datetime(2026, 11, 3, 5, tzinfo=UTC),
    )
    hours = [
        datetime(2026, 11, 1, 3, tzinfo=UTC),  # before the first
        starts[0],
        starts[1] - timedelta(hours=1),
        starts[1],
        starts[2],
        starts[2] + timedelta(days=40),  # after the last
    ]
    for n, at in enumerate(hours):
        _hour(profile, at, n + 1)
    found = dict(
        HourlyUsage.objects.annotate(b=BucketNumber("hour", starts)).values_list("hour", "b")
    )
    assert found == {at: sum(1 for s in starts if s <= at) for at in hours}
    assert list(found.values()) == [0, 1, 1, 2, 3, 3]


def test_a_compiled_read_compiles_once_a_key_and_takes_new_times_each_run() -> None:
    profile = AgentProfile.objects.create(name="once")
    day = datetime(2026, 11, 1, tzinfo=UTC)
    for h in range(48):
        _hour(profile, day + timedelta(hours=h), h + 1)
    read = CompiledRead(HourlyUsage)
    built: list[tuple[Any, ...]] = []

    def build(*values: Any) -> Any:
        built.append(values)
        return _spend_query(None, *values)

    def bucket_calls(
        start: datetime, end: datetime, starts: tuple[datetime, ...]
    ) -> dict[int, int]:
        rows = read.rows("k", (start, end, starts), build)
        return {row["b"]: row["n"] for row in rows if row["b"] is not None}

    assert bucket_calls(day, day + timedelta(days=2), (day, day + timedelta(days=1))) == {
        1: sum(range(1, 25)),
        2: sum(range(25, 49)),
    }
    assert bucket_calls(day + timedelta(hours=47), day + timedelta(days=3), (day,)) == {1: 48}
    assert len(built) == 1  # the stand-ins' statement, compiled once
    read.rows("other key", (day, day, (day,)), build)
    assert len(built) == 2


def test_the_compactions_read_counts_by_local_day_in_one_statement() -> None:
    profile = AgentProfile.objects.create(name="compacting")
    session = AgentSession.objects.create(profile=profile, external_id="s")
    other = AgentSession.objects.create(
        profile=AgentProfile.objects.create(name="else"), external_id="t"
    )
    # 2026-11-01 23:30 in Kolkata is 18:00 UTC; local midnight 18:30 UTC
    before_midnight = datetime(2026, 11, 1, 18, 0, tzinfo=UTC)
    after_midnight = datetime(2026, 11, 1, 18, 30, tzinfo=UTC)
    for at, mode, error in (
        (before_midnight, "auto", ""),
        (after_midnight, "auto", "archive down"),
        (after_midnight, "manual", ""),
    ):
        CompactionRun.objects.create(
            session=session,
            mode=mode,
            status="applied",
            tokens_before=9_000,
            tokens_after=1_000,
            archive_error=error,
            finished_at=at,
        )
    CompactionRun.objects.create(session=other, mode="auto", status="applied", finished_at=at)
    ContextEvent.objects.create(
        session=session,
        kind=ContextEvent.Kind.COMPACTION,
        origin="agent",
        source="test",
        source_key="e1",
        at=after_midnight,
        tokens_before=5_000,
        tokens_after=3_000,
    )
    period = Period(
        datetime(2026, 10, 31, 18, 30, tzinfo=UTC),
        datetime(2026, 11, 2, 18, 30, tzinfo=UTC),
        "Asia/Kolkata",
    )
    days, totals, freed, failures = _compactions(period, profile)
    assert [(d.day, d.counts["auto"], d.counts["manual"], d.counts["agent"]) for d in days] == [
        (datetime(2026, 10, 31, 18, 30, tzinfo=UTC), 1, 0, 0),
        (datetime(2026, 11, 1, 18, 30, tzinfo=UTC), 1, 1, 1),
    ]
    assert (totals["auto"], freed, failures) == (2, 3 * 8_000 + 2_000, 1)
    assert _compactions(period, None)[1]["auto"] == 3


def test_the_top_sessions_are_the_orm_orders_first_rows_fleet_wide_and_per_profile() -> None:
    now = datetime(2026, 12, 7, 12, tzinfo=UTC)
    profiles = [AgentProfile.objects.create(name=n) for n in ("a", "b")]
    for n in range(40):
        AgentSession.objects.create(
            profile=profiles[n % 2],
            external_id=f"s{n}",
            # ties on cost and on pressure (broken by id), unknowns, and sessions gone quiet
            cost_usd=None if n % 7 == 0 else Decimal(n % 9) + Decimal("0.000000001"),
            pressure=None if n % 5 == 0 else (n * 37 % 23) / 20,
            last_seen_at=now - timedelta(days=2 if n % 6 == 0 else 0, minutes=n),
        )
    since = now - timedelta(days=1)
    for chosen in (None, *profiles):
        found = load_overview(
            Period(since, now, preset="24h"), chosen.name if chosen else "", now=now
        )
        active = AgentSession.objects.filter(last_seen_at__gte=since)
        if chosen is not None:
            active = active.filter(profile=chosen)
        by_cost = active.filter(cost_usd__isnull=False).order_by(F("cost_usd").desc(), "-pk")
        assert [s.pk for s in found.top_cost] == [s.pk for s in by_cost[:TOP_SESSIONS]]
        ranked = sorted(
            (s for s in active if s.pressure is not None),
            key=lambda s: (
                RANK_OF_BAND[session_band(s, found.policies[s.profile_id])],
                s.pressure,
                s.pk,
            ),
            reverse=True,
        )
        assert [s.pk for s, _ in found.top_pressure] == [s.pk for s in ranked[:TOP_SESSIONS]]
        assert all(s.external_id and s.last_seen_at for s in found.top_cost)


def _sent(sql: str, params: Any) -> str:
    """The text psycopg's client-side binding sends for `sql` with `params`."""
    ops: Any = connection.ops
    return str(ops.compose_sql(sql, list(params)))


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="client-side binding is psycopg's, on PostgreSQL"
)
def test_a_compiled_read_sends_the_orm_statement_text_with_its_fixed_values_written_in() -> None:
    profile = AgentProfile.objects.create(name="fixed")
    at = datetime(2026, 11, 1, 12, tzinfo=UTC)
    AgentSession.objects.create(profile=profile, external_id="50% off", last_seen_at=at)
    AgentSession.objects.create(profile=profile, external_id="5 off", last_seen_at=at)
    read = CompiledRead(AgentSession)

    def build(since: datetime, until: datetime) -> Any:
        # a fixed value holding "%" (inlined, doubled), a "%%" of the ORM's own (the modulo), a
        # fixed number, and two times (kept as parameters)
        return (
            AgentSession.objects.filter(
                last_seen_at__gte=since,
                last_seen_at__lt=until,
                external_id__contains="0%",
                profile_id=profile.pk,
            )
            .annotate(m=F("id") % 7)
            .values("external_id", "m")
        )

    for since, until in ((at, at + timedelta(hours=1)), (at - timedelta(days=1), at)):
        _alias, sql, params = read.statement("k", (since, until), build)
        orm_sql, orm_params = build(since, until).query.sql_with_params()
        assert len(params) == 2  # only the times travel as parameters
        assert _sent(sql, params) == _sent(orm_sql, orm_params)
    rows = read.rows("k", (at, at + timedelta(hours=1)), build)
    assert [r["external_id"] for r in rows] == ["50% off"]
    assert not read.rows("k", (at - timedelta(days=1), at), build)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="client-side binding is psycopg's, on PostgreSQL"
)
def test_the_relief_counts_statement_is_the_orms_text() -> None:
    from compaction import relief_state

    for name in ("a", "b", "c"):
        AgentProfile.objects.create(name=name)
    policies = relief_state.profile_policies()
    at = datetime(2026, 11, 1, 12, tzinfo=UTC)
    key = ("relief", tuple(sorted(policies)))
    read = CompiledRead(AgentSession)
    _alias, sql, params = read.statement(
        key, (at,), lambda t: relief_state._counts_query(t, policies)
    )
    orm_sql, orm_params = relief_state._counts_query(at, policies).query.sql_with_params()
    assert len(params) < len(orm_params)
    assert _sent(sql, params) == _sent(orm_sql, orm_params)
