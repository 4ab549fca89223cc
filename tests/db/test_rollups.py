"""Hour rollups kept at ingest equal a from-scratch rebuild from the calls; their sums equal
adding the calls one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.costing import CallRow
from telemetry.models import HourlyUsage
from telemetry.rollups import MONEY_FIELDS, HourFigures, hour_of, rebuild_rollups, sum_by_hour
from telemetry.usage import BUCKETS, context_size

SONNET = "claude-sonnet-4-5-20250929"
START = datetime(2026, 11, 30, 9, 59, 30, tzinfo=UTC)


def _record(session: str, turn: int, call: int, at: datetime, **usage: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn": turn,
        "call": call,
        "model": usage.pop("model", SONNET),
        "at": at.isoformat(),
        "usage": {
            "input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 50,
            "output_tokens": 20,
            **usage,
        },
    }


def _snapshot() -> list[tuple[Any, ...]]:
    return sorted(
        (
            r.profile_id,
            r.model,
            r.hour,
            r.calls,
            r.uncached_input,
            r.cache_read,
            r.cache_write_5m,
            r.cache_write_1h,
            r.output,
            r.cache_reported_calls,
            r.cache_read_reported,
            r.cache_denominator,
            r.unpriced_calls,
            *(
                Decimal(getattr(r, f)).quantize(Decimal("1e-9"))
                for f in ("cost_usd", "no_cache_cost_usd", "cost_cache_read", "cost_output")
            ),
        )
        for r in HourlyUsage.objects.all()
    )


@pytest.mark.django_db
def test_ingest_adds_each_new_call_to_its_hour_once(make_agent):
    agent = make_agent()
    other = make_agent("fleet")
    first = [
        _record("a", 0, 0, START),
        _record("a", 0, 1, START + timedelta(seconds=40)),  # the next hour
        _record("a", 1, 0, START + timedelta(minutes=3), model="llama-local"),  # unpriced
    ]
    assert agent.post("/api/v1/telemetry", {"records": first}).status_code == 200
    # a replay is a duplicate and adds nothing; a new call in the same hour adds to its row
    assert agent.post("/api/v1/telemetry", {"records": first}).status_code == 200
    later = _record("b", 0, 0, START + timedelta(minutes=20), output_tokens=5)
    assert agent.post("/api/v1/telemetry", later).status_code == 201
    assert other.post("/api/v1/telemetry", _record("a", 0, 0, START)).status_code == 201

    rows = {(r.profile.name, r.model, r.hour.hour): r for r in HourlyUsage.objects.all()}
    assert set(rows) == {
        ("default", SONNET, 9),
        ("default", SONNET, 10),
        ("default", "llama-local", 10),
        ("fleet", SONNET, 9),
    }
    ten = rows[("default", SONNET, 10)]
    assert (ten.calls, ten.output, ten.cache_read) == (2, 25, 2000)
    assert ten.cache_denominator == 2 * 1150
    assert rows[("default", "llama-local", 10)].unpriced_calls == 1
    assert rows[("default", "llama-local", 10)].cost_usd == 0
    assert ten.cost_usd > 0 and ten.no_cache_cost_usd > ten.cost_usd  # the cache saved money

    incremental = _snapshot()
    assert rebuild_rollups() == 4
    assert _snapshot() == incremental


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_writer_of_the_same_hour_adds_to_another_stripe_without_waiting(agent):
    """While one transaction holds an hour's row (until its commit), another ingest of the same
    profile, model and hour adds to a second stripe at once; the sums still add up exactly."""
    import threading

    from django.db import connection, transaction

    from telemetry.ingest.pipeline import store_records

    if connection.vendor != "postgresql":
        pytest.skip("SQLite serialises writers: one stripe")
    profile = agent.key.profile
    holding, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def first_writer() -> None:
        try:
            with transaction.atomic():
                store_records(profile=profile, raw_items=[_record("a", 0, 0, START)], batch=False)
                holding.set()
                assert release.wait(30)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failures.append(error)
            holding.set()
        finally:
            connection.close()

    thread = threading.Thread(target=first_writer)
    thread.start()
    try:
        assert holding.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # waiting on the row would fail here
        second = _record("b", 0, 0, START + timedelta(seconds=5), output_tokens=7)
        result = store_records(profile=profile, raw_items=[second], batch=False)
        assert result.count("created") == 1
    finally:
        release.set()
        thread.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert not failures, failures
    rows = HourlyUsage.objects.filter(profile=profile, model=SONNET)
    assert sorted(r.stripe for r in rows) == [0, 1]
    assert (sum(r.calls for r in rows), sum(r.output for r in rows)) == (2, 27)
    summed = _snapshot_summed()
    rebuild_rollups()
    assert HourlyUsage.objects.filter(profile=profile, model=SONNET).count() == 1
    assert _snapshot_summed() == summed


def _snapshot_summed() -> list[tuple[Any, ...]]:
    """Each hour row's sums over its stripes (what every reader sees)."""
    from django.db.models import Sum

    sums = (
        HourlyUsage.objects.values("profile_id", "model", "hour")
        .annotate(
            **{
                f"s_{name}": Sum(name)
                for name in ("calls", "output", "cache_read", "cache_denominator", "cost_usd")
            }
        )
        .order_by("profile_id", "model", "hour")
    )
    return [tuple(row.values()) for row in sums]


@pytest.mark.django_db
def test_a_batch_over_many_hours_takes_no_advisory_lock_a_request_takes_one(agent):
    """Each advisory lock holds a slot of the server's shared lock table until commit: a chunk
    of a long import spanning many hours must not take one per hour."""
    from django.db import connection, transaction

    from telemetry.ingest.pipeline import store_records

    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")

    def advisory_locks() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND pid = pg_backend_pid()"
            )
            return int(cursor.fetchone()[0])

    profile = agent.key.profile
    many = [_record("long", t, 0, START + timedelta(hours=t)) for t in range(20)]
    with transaction.atomic():
        store_records(profile=profile, raw_items=many)
        assert advisory_locks() == 0
    with transaction.atomic():
        store_records(profile=profile, raw_items=[_record("long", 99, 0, START)], batch=False)
        assert advisory_locks() == 1
    assert set(HourlyUsage.objects.values_list("stripe", flat=True)) == {0}
    assert HourlyUsage.objects.count() == 20


# --- sum_by_hour: grouped sums equal adding call by call -------------------------------------


def _sum_call_by_call(profile_id: int, calls: list[CallRow]) -> dict[Any, HourFigures]:
    """`sum_by_hour` as it was written before it grouped the calls: the oracle."""

    def money(value: Decimal | None) -> Decimal:
        return Decimal(0) if value is None else value

    sums: dict[Any, HourFigures] = {}
    for call in calls:
        key = (profile_id, call.model, hour_of(call.at))
        row = sums.get(key)
        if row is None:
            row = sums[key] = HourFigures()
        row.calls += 1
        for name in BUCKETS:
            row.tokens[name] += getattr(call, name)
        if call.reported_cache:
            row.cache_reported_calls += 1
            row.cache_read_reported += call.cache_read
            row.cache_denominator += context_size(call)
        if call.cost_usd is None:
            row.unpriced_calls += 1
        else:
            for name in MONEY_FIELDS:
                if name == "cost_usd":
                    row.costs[name] += call.cost_usd
                else:
                    row.costs[name] += money(getattr(call, name))
    return sums


_zones = st.sampled_from(
    [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=11))]
)
_moments = st.one_of(
    st.datetimes(
        datetime(1900, 1, 1),  # noqa: DTZ001 - the bounds of hypothesis are naive
        datetime(2200, 1, 1),  # noqa: DTZ001
        timezones=_zones,  # type: ignore[arg-type]
    ),
    # the edges of an hour
    st.sampled_from(
        [
            datetime(2026, 11, 30, 9, 59, 59, 999999, tzinfo=UTC),
            datetime(2026, 11, 30, 10, 0, tzinfo=UTC),
            datetime(2026, 11, 30, 10, 0),  # noqa: DTZ001 - naive: taken as UTC
            datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(2026, 11, 30, 15, 29, 59, 999999, tzinfo=timezone(timedelta(hours=5.5))),
        ]
    ),
)
_counts = st.integers(0, 2**29)  # four input buckets within a row's request size (int4)
_money = st.none() | st.integers(0, 12).flatmap(
    lambda places: st.decimals(min_value=0, max_value=10**11, places=places, allow_nan=False)
)


@st.composite
def _calls(draw: st.DrawFn) -> CallRow:
    priced = draw(st.booleans())
    costs = {f"cost_{name}": draw(_money) if priced else None for name in BUCKETS}
    total = draw(_money.filter(lambda v: v is not None)) if priced else None
    values: dict[str, Any] = dict.fromkeys(CallRow._fields)
    values.update(
        model=draw(st.sampled_from([SONNET, "gpt-5", "é"])),
        at=draw(_moments),
        **{name: draw(_counts) for name in BUCKETS},
        reported_cache=draw(st.booleans()),
        **costs,
        cost_usd=total,
        no_cache_cost_usd=draw(_money) if priced else None,
    )
    return CallRow(**values)


def _exactly(sums: dict[Any, HourFigures]) -> dict[Any, list[str]]:
    """Every key and figure, Decimals by their text (the exponent too), hours with their zone."""
    return {
        (profile, model, hour, hour.tzinfo): [repr(value) for value in vars_of(row)]
        for (profile, model, hour), row in sums.items()
    }


def vars_of(row: HourFigures) -> list[Any]:
    return list(row.figures())


@settings(max_examples=300, deadline=None)
@given(st.lists(_calls(), max_size=40))
def test_hour_sums_equal_adding_call_by_call(calls):
    assert _exactly(sum_by_hour(7, calls)) == _exactly(_sum_call_by_call(7, calls))
    assert list(sum_by_hour(7, calls)) == list(_sum_call_by_call(7, calls))  # first-seen order
