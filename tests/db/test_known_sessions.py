"""A session's next single record goes in one round trip when this process wrote the session
last (`telemetry.ingest.known_sessions`, PostgreSQL): what it stores and answers is what the two-trip
path stores and answers, over odd but valid records, duplicates, conflicts, late and
out-of-order calls; and a session someone else changed meanwhile is never written from the
remembered state."""

from __future__ import annotations

import random
import threading
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from telemetry.catalogue import OnceCatalogue
from telemetry.ingest import known_sessions, pg_prepared
from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentSession, CatalogueModel, HourlyUsage, LLMCall
from telemetry.policy_store import effective_policy, update_policy
from telemetry.profiles import get_or_create_profile
from tests.db.stored import session_record, session_rows

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's pipeline"),
    pytest.mark.django_db(transaction=True),  # each record's transaction is its own
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    known_sessions.forget_all()


def _record(turn: int, call: int = 0, **extra: Any) -> dict[str, Any]:
    return session_record("known", turn, call, **extra)


def _one_trips(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each single record went in one trip (the list grows by one per attempt)."""
    seen: list[bool] = []
    real = known_sessions.store_one

    def spy(*args: Any, **kwargs: Any) -> Any:
        written = real(*args, **kwargs)
        seen.append(written is not None)
        return written

    monkeypatch.setattr(known_sessions, "store_one", spy)
    return seen


def _ingest(profile_name: str, records: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    profile = get_or_create_profile(name=profile_name)
    answers = []
    for record in records:
        result = store_records(profile=profile, raw_items=[record], batch=False)
        item = dict(result.items[0].__dict__)
        figures = [
            {k: v for k, v in s.__dict__.items() if k not in {"_state", "id", "profile_id"}}
            for s in result.sessions
        ]
        for f in figures:
            f.pop("created_at", None)
            f.pop("external_id", None)
        answers.append((item, figures, result.over_threshold != []))
    return answers, AgentSession.objects.get(profile=profile, external_id="known")


def _stored(session: AgentSession) -> dict[str, Any]:
    hours = [
        {k: v for k, v in row.items() if k not in {"id", "profile_id", "stripe"}}
        for row in HourlyUsage.objects.filter(profile_id=session.profile_id)
        .order_by("hour", "model")
        .values()
    ]
    return {**session_rows(session), "hours": hours}


def _both(monkeypatch: pytest.MonkeyPatch, records: list[dict[str, Any]]) -> list[bool]:
    """Ingest `records` one by one through both paths; assert the same answers and rows;
    return which records went in one trip. Low round limits, so the answers carry D8's nudge
    and stop."""
    update_policy(profile=None, values={"round_soft_limit": 2, "round_hard_cap": 3})
    trips = _one_trips(monkeypatch)
    one_items, one = _ingest("one-trip", records)
    went = list(trips)
    assert any(item["stop"] for item, _, _ in one_items)  # the limits were reached
    monkeypatch.setattr(known_sessions, "applies", lambda: False)
    two_items, two = _ingest("two-trips", records)
    assert one_items == two_items
    assert _stored(one) == _stored(two)
    return went


def test_a_sessions_next_records_go_in_one_trip_and_store_what_two_trips_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [
        _record(0),
        _record(1),
        _record(1, 1),
        _record(1, 1),  # a duplicate
        _record(1, 3),  # a gap in the calls
        _record(1, 2),  # out of order within the turn
        _record(2),
        {**_record(2), "usage": {"input_tokens": 1, "output_tokens": 1}},  # a conflict
        _record(3, request_id="req-1-1"),  # a request id already taken: a conflict
        _record(5),  # a gap in the turns
        _record(4),  # a late call to an earlier turn
        _record(6, model="acme-unpriced-1", provider="anthropic"),  # unpriced
        _record(6, 1),  # priced beside it
        _record(7, at="2025-06-01T23:59:59.999999-11:00", appended_chars=12_345),
        _record(7, 1, window_tokens=150_000, request_id=None),
        _record(8, usage={"input_tokens": 0, "output_tokens": 3}),  # no cache reported
        _record(9, surface_version=3, appended_chars=40),
        _record(9, 1, surface_version=4),  # the projection would read the transcript log
    ]
    went = _both(monkeypatch, records)
    # the session's first record, then each one the remembered state covers
    assert went[:3] == [False, True, True]
    assert went.count(True) >= 8, went


def test_odd_prices_round_as_the_stored_costs_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rates of more decimal places than the calls' costs keep (9): the turn's sums come from
    the rounded costs, as the database sums its stored rows."""
    CatalogueModel.objects.create(
        model="acme-odd-1",
        provider="anthropic",
        family="acme-odd",
        window_tokens=200_000,
        input=Decimal("0.333333"),
        output=Decimal("1.777777"),
        cache_read=Decimal("0.033333"),
        cache_write_5m=Decimal("0.416667"),
        cache_write_1h=Decimal("0.666667"),
    )
    usage = {
        "input_tokens": 7,
        "cache_read_input_tokens": 13,
        "cache_creation_input_tokens": 5,
        "output_tokens": 3,
    }
    records = [_record(t, c, model="acme-odd-1", usage=usage) for t in range(3) for c in range(3)]
    went = _both(monkeypatch, records)
    # the session's first record takes two trips (and teaches the process its turn's calls)
    assert went == [False] + [True] * 8


def test_random_sequences_store_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(1807)
    records = []
    for _ in range(40):
        turn = rng.choice((0, 1, 2, 3, 3, 4, 4, 5, 6))
        call = rng.randrange(4)
        record = _record(turn, call)
        if rng.random() < 0.2:
            record["usage"] = {"input_tokens": rng.randrange(1, 9), "output_tokens": 2}
        if rng.random() < 0.3:
            record["request_id"] = None
        if rng.random() < 0.2:
            record["appended_chars"] = rng.randrange(10_000)
        records.append(record)
    _both(monkeypatch, records)


def test_a_session_changed_by_another_writer_is_not_written_from_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch (as another process would send) and a relief claim change the session between
    two single records: the remembered version no longer matches, nothing is written from
    it, and the two-trip path stores the record over what the others wrote."""
    profile = get_or_create_profile(name="shared")
    trips = _one_trips(monkeypatch)
    store_records(profile=profile, raw_items=[_record(0)], batch=False)
    store_records(profile=profile, raw_items=[_record(1)], batch=False)
    store_records(profile=profile, raw_items=[_record(2), _record(2, 1)], batch=True)
    assert store_records(profile=profile, raw_items=[_record(3)], batch=False).items[0].status == (
        "created"
    )
    session = AgentSession.objects.get(profile=profile, external_id="known")
    AgentSession.objects.filter(pk=session.pk).update(relief_tried_version=7)
    assert store_records(profile=profile, raw_items=[_record(3, 1)], batch=False).items[
        0
    ].status == ("created")
    assert trips == [False, True, False, False]  # the first: not yet known
    session.refresh_from_db()
    assert session.relief_tried_version == 7  # kept, not overwritten from memory
    assert (session.turns_count, session.calls_count, session.last_turn_rounds) == (4, 6, 2)
    assert store_records(profile=profile, raw_items=[_record(4)], batch=False).items[0].status == (
        "created"
    )
    assert trips[-1] is True  # remembered again after the two-trip write


def test_a_record_waits_for_a_writer_holding_its_session_then_takes_two_trips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version check runs under the row's lock: a writer that holds the session and
    changes it makes the one-trip statement wait, then find another version and write nothing;
    the record then goes in over the writer's change."""
    profile = get_or_create_profile(name="held")
    store_records(profile=profile, raw_items=[_record(0)], batch=False)
    session = AgentSession.objects.get(profile=profile, external_id="known")
    holding, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                AgentSession.objects.select_for_update().filter(pk=session.pk).get()
                AgentSession.objects.filter(pk=session.pk).update(surface_estimate_tokens=99)
                holding.set()
                assert release.wait(30)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failures.append(error)
            holding.set()
        finally:
            connection.close()

    trips = _one_trips(monkeypatch)
    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(30)
    timer = threading.Timer(0.5, release.set)
    timer.start()
    try:
        result = store_records(profile=profile, raw_items=[_record(1)], batch=False)
    finally:
        release.set()
        thread.join(30)
        timer.cancel()
    assert not failures
    assert result.items[0].status == "created" and trips == [False]
    session.refresh_from_db()
    # the new report superseded the writer's surface estimate (D6), on the writer's version
    assert session.surface_estimate_tokens is None and session.calls_count == 2
    assert LLMCall.objects.filter(session=session).count() == 2


def test_one_trip_is_one_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = get_or_create_profile(name="trips")
    store_records(profile=profile, raw_items=[_record(0)], batch=False)
    catalogue = OnceCatalogue()  # read already, as the API's remembered one is
    catalogue.pricer("claude-sonnet-4-5")
    policy = effective_policy(profile)
    sent: list[str] = []
    real = pg_prepared._run  # noqa: SLF001

    def spy(conn: Any, state: Any, statements: Any, **kwargs: Any) -> Any:
        sent.append(f"{len(statements)} begin={kwargs['begin']} commit={kwargs['commit']}")
        return real(conn, state, statements, **kwargs)

    monkeypatch.setattr(pg_prepared, "_run", spy)
    with CaptureQueriesContext(connection) as queries:
        result = store_records(
            profile=profile,
            raw_items=[_record(1)],
            batch=False,
            catalogue=catalogue,
            policy=policy,
        )
    assert result.items[0].status == "created"
    assert sent == ["1 begin=True commit=True"]  # BEGIN, the statement and COMMIT: one trip
    # Django logs a BEGIN it never sends and its COMMIT at the block's end, which finds the
    # transaction over; between them the one statement
    logged = [q["sql"] for q in queries]
    assert len(logged) == 3 and (logged[0], logged[2]) == ("BEGIN", "COMMIT"), logged
    assert logged[1].startswith("WITH guard AS")


def test_real_world_records_in_full_store_alike(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Providers' own usage shapes with every documented field, and odd but valid values: the
    one-trip path stores and answers them as the two-trip path does (or leaves them to it)."""
    # a skew past year 9999 bounds nothing, so the largest `at` is stored here too
    settings.TELEMETRY_CLOCK_SKEW_SECONDS = 10**12
    anthropic_full = {
        "input_tokens": 12,
        "cache_read_input_tokens": 48_000,
        "cache_creation_input_tokens": 3_000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1_000, "ephemeral_1h_input_tokens": 2_000},
        "output_tokens": 512,
        "server_tool_use": {"web_search_requests": 2},
        "service_tier": "standard",
    }
    openai_chat = {
        "prompt_tokens": 9_000,
        "completion_tokens": 700,
        "total_tokens": 9_700,
        "prompt_tokens_details": {"cached_tokens": 8_192, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 256,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    openai_responses = {
        "input_tokens": 20_000,
        "input_tokens_details": {"cached_tokens": 19_968},
        "output_tokens": 1_100,
        "output_tokens_details": {"reasoning_tokens": 900},
        "total_tokens": 21_100,
    }
    prefix = [
        {"kind": "tools", "hash": "t-1", "tokens": 4_000},
        {"kind": "system", "hash": "s-1", "tokens": 900, "text": "You are… \u2028 ünïcode"},
        {"kind": "message", "hash": "m-1", "tokens": 30},
    ]
    records = [
        _record(0),
        _record(1, usage=anthropic_full, prefix=prefix, request_chars=88_000),
        _record(1, 1, usage={**anthropic_full, "output_tokens": 0}),
        _record(2, model="gpt-4o-2024-08-06", provider="openai", usage=openai_chat),
        _record(2, 1, model="gpt-5", provider="openai", usage=openai_responses),
        # the largest a row stores (int4), valid
        _record(3, usage={"input_tokens": 2**31 - 1, "output_tokens": 2**31 - 1}),
        _record(
            3, 1, usage={"input_tokens": 10, "output_tokens": 1}, at="9999-12-31T18:00:00-05:00"
        ),
        _record(3, 2, at="0001-01-01T03:00:00+02:00"),  # year 1, east of Greenwich
        _record(4, request_id="ünï/code\u2028id", at="2025-06-01T10:04:00.123456-09:30"),
        _record(4, 1, window_tokens=2**31 - 1, surface_version=0, appended_chars=0),
        # the largest turn and call (the usage `_record` makes grows with them: kept small)
        _record(5, 2**31 - 1, request_id=None, usage={"input_tokens": 1, "output_tokens": 1}),
        _record(2**31 - 1, 0, request_id=None, usage={"input_tokens": 1, "output_tokens": 1}),
    ]
    went = _both(monkeypatch, records)
    assert went == [False] + [True] * (len(records) - 1)  # every later record in one trip


def test_an_agents_warm_single_record_post_is_three_statements(
    make_agent: Any, held_remembered_reads: None
) -> None:
    """Over HTTP through every middleware, as the bench's P2 counts it (`statements_per_request`):
    a session's second record from its agent costs BEGIN, the one statement and COMMIT. Nothing
    on the way (the audit trail's actor, sessions, messages) reads the database for a request
    that carries only an agent key."""
    agent = make_agent("default")
    assert agent.post("/api/v1/telemetry", _record(0)).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        response = agent.post("/api/v1/telemetry", _record(1))
    assert response.status_code == 201, response.content
    logged = [q["sql"] for q in queries]
    assert len(logged) == 3 and (logged[0], logged[2]) == ("BEGIN", "COMMIT"), logged
    assert logged[1].startswith("WITH guard AS")
