"""A single record of a session its process has locked before goes in with the session's lock,
in one round trip (`telemetry.ingest.pipeline._lock_and_insert`, PostgreSQL): what it stores and answers
is what the separate statements store and answer, its duplicates and conflicts included, and a
remembered session id that proves wrong leaves nothing behind."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from telemetry.ingest import known_sessions, pipeline, statements
from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentSession, HourlyUsage, LLMCall, Turn
from telemetry.profiles import get_or_create_profile
from tests.db.stored import session_record, session_rows

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's pipeline"),
    pytest.mark.django_db(transaction=True),  # the record's transaction is its own
]


@pytest.fixture(autouse=True)
def _two_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-trip path itself: a session's next record would otherwise go in one trip
    (`telemetry.ingest.known_sessions`, tests/db/test_known_sessions.py)."""
    monkeypatch.setattr(known_sessions, "applies", lambda: False)


def _record(turn: int, call: int = 0, **extra: Any) -> dict[str, Any]:
    return session_record("piped", turn, call, **extra)


_RECORDS = [
    _record(0),
    _record(1),
    _record(1, 1),
    _record(1, 1),  # a duplicate
    _record(2),
    {**_record(2), "usage": {"input_tokens": 1, "output_tokens": 1}},  # a conflict
    _record(3, request_id="req-1-1"),  # a request id already taken: a conflict
    _record(4),
]


def _ingest(profile_name: str, spy: list[int]) -> tuple[list[Any], Any]:
    profile = get_or_create_profile(name=profile_name)
    items = []
    for record in _RECORDS:
        result = store_records(profile=profile, raw_items=[record], batch=False)
        items.append(dict(result.items[0].__dict__))
    session = AgentSession.objects.get(profile=profile, external_id="piped")
    return items, session


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = statements.run_all

    def spy(statements: Any) -> Any:
        answers = real(statements)
        if answers is not None:  # sent together
            calls.append(len(statements))
        return answers

    monkeypatch.setattr(statements, "run_all", spy)
    return calls


def test_a_records_lock_and_insert_in_one_round_trip_store_what_apart_stores(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    pipeline._SESSION_IDS.clear()
    spy = _spy(monkeypatch)
    piped_items, piped = _ingest("piped", spy)
    assert spy == [2] * (len(_RECORDS) - 1)  # all but the session's first record
    settings.DB_PIPELINE = False
    apart_items, apart = _ingest("apart", spy)
    assert len(spy) == len(_RECORDS) - 1  # nothing more went through the pipeline
    assert [i["status"] for i in piped_items] == [
        "created",
        "created",
        "created",
        "duplicate",
        "created",
        "conflict",
        "conflict",
        "created",
    ]
    assert piped_items == apart_items
    assert session_rows(piped, skip=["last_seen_at"]) == session_rows(apart, skip=["last_seen_at"])
    hours = HourlyUsage.objects.filter(profile__name__in=["piped", "apart"])
    by_profile: dict[str, list[Any]] = {}
    for row in hours.order_by("hour").values():
        profile = "piped" if row["profile_id"] == piped.profile_id else "apart"
        by_profile.setdefault(profile, []).append(
            {k: v for k, v in row.items() if k not in {"id", "profile_id", "stripe"}}
        )
    assert by_profile["piped"] == by_profile["apart"]


def test_a_remembered_session_id_that_proves_wrong_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline._SESSION_IDS.clear()
    profile = get_or_create_profile(name="stale")
    assert store_records(profile=profile, raw_items=[_record(0)], batch=False).items[0].status == (
        "created"
    )
    session = AgentSession.objects.get(profile=profile, external_id="piped")
    stale = session.pk + 1_000_000  # as a session whose creation was rolled back
    pipeline._SESSION_IDS[(profile.pk, "piped")] = stale
    spy = _spy(monkeypatch)
    result = store_records(profile=profile, raw_items=[_record(1)], batch=False)
    assert result.items[0].status == "created" and spy == [2]
    assert pipeline._SESSION_IDS[(profile.pk, "piped")] == session.pk  # corrected
    assert not LLMCall.objects.filter(session_id=stale).exists()
    assert not Turn.objects.filter(session_id=stale).exists()
    assert list(LLMCall.objects.filter(session=session).values_list("turn", flat=True)) == [0, 1]
    session.refresh_from_db()
    assert (session.turns_count, session.calls_count) == (2, 2)
    # and the next record goes in with the lock again
    assert store_records(profile=profile, raw_items=[_record(2)], batch=False).items[0].status == (
        "created"
    )
    assert spy == [2, 2]


def test_the_pipelined_record_waits_for_a_writer_holding_its_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lock by the remembered id is a real row lock: while another transaction holds the
    session (as a batch or a compaction does), the record waits, here until `lock_timeout`
    gives up, and leaves nothing behind; once the holder commits it goes in."""
    import threading

    from django.db import OperationalError, transaction

    pipeline._SESSION_IDS.clear()
    profile = get_or_create_profile(name="held")
    store_records(profile=profile, raw_items=[_record(0)], batch=False)
    session = AgentSession.objects.get(profile=profile, external_id="piped")
    holding, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                AgentSession.objects.select_for_update().filter(pk=session.pk).get()
                holding.set()
                assert release.wait(30)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failures.append(error)
            holding.set()
        finally:
            connection.close()

    spy = _spy(monkeypatch)
    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '500ms'")
        with pytest.raises(OperationalError, match="lock timeout"):
            store_records(profile=profile, raw_items=[_record(1)], batch=False)
    finally:
        release.set()
        thread.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert not failures, failures
    assert list(LLMCall.objects.filter(session=session).values_list("turn", flat=True)) == [0]
    assert store_records(profile=profile, raw_items=[_record(1)], batch=False).items[0].status == (
        "created"
    )
    assert spy == [2]  # the failed attempt raised inside the pipeline, this one went through it
    assert list(LLMCall.objects.filter(session=session).values_list("turn", flat=True)) == [0, 1]
