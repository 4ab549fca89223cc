"""Packed storage (`telemetry.packing`): an idle session's calls and turns, packed on PostgreSQL,
read as they did; a late call, a replay and the ORM's writes find them as in a session that was
never packed; the beat job packs only idle sessions. On SQLite packing is a no-op and the same
tests hold the same answers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from telemetry import packing
from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentSession, ContextEvent, LLMCall, Turn
from telemetry.profiles import get_or_create_profile
from telemetry.session_state import FIGURE_FIELDS

pytestmark = pytest.mark.django_db

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="packed storage is PostgreSQL's"
)

_START = timezone.now().replace(microsecond=0) - timedelta(days=1)

# the columns that differ between twin sessions by construction
_OWN = {"id", "session_id", "received_at", "payload_hash"}


def _record(session_id: str, turn: int, call: int = 0, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "session_id": session_id,
        "turn": turn,
        "call": call,
        "model": "claude-sonnet-4-5",
        "at": (_START + timedelta(minutes=turn, seconds=call)).isoformat(),
        "usage": {
            "input_tokens": 1_000 + turn * 10 + call,
            "cache_read_input_tokens": 500 * turn,
            "output_tokens": 50 + call,
        },
    }
    record.update(extra)
    return record


def _history(session_id: str, turns: int = 4) -> list[dict[str, Any]]:
    records = [_record(session_id, t, c) for t in range(turns) for c in range(2)]
    records[1]["request_id"] = "req-0-1"
    return records


def _calls(session: AgentSession) -> list[dict[str, Any]]:
    rows = LLMCall.objects.filter(session=session).order_by("turn", "call").values()
    return [{k: v for k, v in row.items() if k not in _OWN} for row in rows]


def _turns(session: AgentSession) -> list[dict[str, Any]]:
    rows = Turn.objects.filter(session=session).order_by("turn").values()
    return [{k: v for k, v in row.items() if k not in _OWN} for row in rows]


def _figures(session: AgentSession) -> dict[str, Any]:
    session.refresh_from_db()
    return {name: getattr(session, name) for name in FIGURE_FIELDS}


def _pack(*sessions: AgentSession) -> None:
    with transaction.atomic():
        packing.pack_sessions([s.pk for s in sessions])


def _stored(table_suffix: str, session: AgentSession, model: type[Any] = LLMCall) -> int:
    """Rows of `session` in the model's hot table, or positions in its packed chunks."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        if table_suffix == "hot":
            cursor.execute(f"SELECT count(*) FROM {table}_hot WHERE session_id = %s", [session.pk])
        else:
            cursor.execute(
                f"SELECT COALESCE(sum(cardinality(stored)), 0) FROM {table}_packed "
                "WHERE session_id = %s",
                [session.pk],
            )
        return int(cursor.fetchone()[0])


@on_postgresql
def test_a_packed_session_reads_as_it_did_from_chunks_of_at_most_chunk_positions() -> None:
    profile = get_or_create_profile(name="packed-reads")
    turns = packing.CHUNK // 2 + 1  # two calls a turn: one call past a chunk
    store_records(profile=profile, raw_items=_history("long", turns))
    session = AgentSession.objects.get(profile=profile, external_id="long")
    calls, turn_rows, figures = _calls(session), _turns(session), _figures(session)
    ids = list(LLMCall.objects.filter(session=session).order_by("id").values_list("id", flat=True))

    _pack(session)

    assert _stored("hot", session) == 0 and _stored("hot", session, Turn) == 0
    assert _stored("packed", session) == len(calls) == packing.CHUNK + 2
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT chunk, cardinality(stored) FROM telemetry_llmcall_packed "
            "WHERE session_id = %s ORDER BY chunk",
            [session.pk],
        )
        assert cursor.fetchall() == [(0, packing.CHUNK), (1, 2)]
    assert _calls(session) == calls
    assert _turns(session) == turn_rows
    assert _figures(session) == figures
    assert sorted(LLMCall.objects.filter(session=session).values_list("id", flat=True)) == ids
    one = LLMCall.objects.filter(session=session, turn=turns - 1, call=1).get()
    assert (one.turn, one.call) == (turns - 1, 1)


@pytest.mark.parametrize("batch", [True, False])
def test_a_late_call_and_a_replay_land_in_a_packed_session_as_in_one_never_packed(
    batch: bool,
) -> None:
    profile = get_or_create_profile(name=f"packed-late-{int(batch)}")
    for name in ("packed", "twin"):
        store_records(profile=profile, raw_items=_history(name))
    packed, twin = (
        AgentSession.objects.get(profile=profile, external_id=n) for n in ("packed", "twin")
    )
    _pack(packed)

    for name in ("packed", "twin"):
        later = [
            _record(name, 1, 0),  # a replay of a stored call
            _record(name, 1, 1, request_id="req-0-1"),  # its request id held by (0, 1)
            _record(name, 2, 5),  # a late call to an earlier turn
            _record(name, 9, 0),  # a new turn
        ]
        if batch:
            statuses = [i.status for i in store_records(profile=profile, raw_items=later).items]
        else:
            statuses = [
                store_records(profile=profile, raw_items=[r], batch=False).items[0].status
                for r in later
            ]
        assert statuses[0] == "duplicate" and statuses[2:] == ["created", "created"], statuses
        assert statuses[1] != "created"

    for mine, theirs in zip(_calls(packed), _calls(twin), strict=True):
        assert mine == theirs, {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
    assert _turns(packed) == _turns(twin)
    assert _figures(packed) == _figures(twin)
    if connection.vendor == "postgresql":
        assert _stored("packed", packed) == 0  # the write unpacked it
        _pack(packed)
        assert _calls(packed) == _calls(twin) and _stored("hot", packed) == 0


@on_postgresql
def test_the_orms_writes_through_the_view_reach_packed_rows() -> None:
    profile = get_or_create_profile(name="packed-orm")
    store_records(profile=profile, raw_items=_history("orm"))
    session = AgentSession.objects.get(profile=profile, external_id="orm")
    stored = LLMCall.objects.filter(session=session, turn=0, call=0).values().get()
    _pack(session)

    assert LLMCall.objects.filter(session=session, turn=1).update(output=7) == 2
    assert list(
        LLMCall.objects.filter(session=session, turn=1).values_list("output", flat=True)
    ) == [7, 7]
    _pack(session)
    assert LLMCall.objects.filter(session=session, turn=2).delete()[0] == 2
    assert not LLMCall.objects.filter(session=session, turn=2).exists()
    _pack(session)
    with pytest.raises(IntegrityError), transaction.atomic():  # its position is held, packed
        LLMCall.objects.create(**{k: v for k, v in stored.items() if k != "id"})
    added = LLMCall.objects.create(**{**{k: v for k, v in stored.items() if k != "id"}, "turn": 2})
    assert added.pk is not None and added.pk > stored["id"]
    assert LLMCall.objects.get(session=session, pk=added.pk).turn == 2
    assert LLMCall.objects.filter(session=session).count() == 7


@on_postgresql
def test_a_context_events_call_and_a_sessions_delete_reach_packed_rows() -> None:
    profile = get_or_create_profile(name="packed-links")
    store_records(profile=profile, raw_items=_history("linked") + _history("other", 1))
    session = AgentSession.objects.get(profile=profile, external_id="linked")
    call = LLMCall.objects.filter(session=session, turn=3, call=1).get()
    event = ContextEvent.objects.create(
        session=session,
        kind="compaction",
        origin="agent",
        source="test",
        source_key="k",
        call=call,
        at=timezone.now(),
    )
    _pack(session)
    assert ContextEvent.objects.get(pk=event.pk).call == call

    session_pk = session.pk
    session.delete()
    assert not LLMCall.objects.filter(session_id=session_pk).exists()
    assert not Turn.objects.filter(session_id=session_pk).exists()
    for suffix in ("hot", "packed"):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM telemetry_llmcall_{suffix} WHERE session_id = %s",
                [session_pk],
            )
            assert cursor.fetchone()[0] == 0
    assert LLMCall.objects.filter(session__external_id="other").count() == 2


@on_postgresql
def test_the_beat_job_packs_the_idle_sessions_oldest_first_a_bounded_batch_a_run(
    settings: Any,
) -> None:
    settings.TELEMETRY_PACK_IDLE_SECONDS = 3600
    profile = get_or_create_profile(name="packed-idle")
    now = timezone.now()
    store_records(
        profile=profile,
        raw_items=[
            _record(name, 0, at=(now - age).isoformat())
            for name, age in (
                ("oldest", timedelta(days=3)),
                ("old", timedelta(hours=2)),
                ("active", timedelta(minutes=5)),
            )
        ],
    )
    by_name = {s.external_id: s for s in AgentSession.objects.filter(profile=profile)}

    first = packing.pack_idle_sessions(now=now, limit=1)
    assert first == packing.PackRun(1, True)
    assert _stored("packed", by_name["oldest"]) == 1 and _stored("hot", by_name["old"]) == 1
    second = packing.pack_idle_sessions(now=now, limit=5)
    assert second == packing.PackRun(1, False)
    assert _stored("packed", by_name["old"]) == 1
    assert _stored("hot", by_name["active"]) == 1  # still active: left hot
    assert packing.pack_idle_sessions(now=now) == packing.PackRun(0, False)

    settings.TELEMETRY_PACK_IDLE_SECONDS = 0  # never
    assert packing.pack_idle_sessions(now=now + timedelta(days=9)) == packing.PackRun(0, False)


@on_postgresql
def test_packed_chunks_take_well_under_half_the_bytes_of_the_rows() -> None:
    profile = get_or_create_profile(name="packed-bytes")
    store_records(profile=profile, raw_items=_history("bytes", 25))
    session = AgentSession.objects.get(profile=profile, external_id="bytes")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_column_size(h.*)) FROM telemetry_llmcall_hot h WHERE session_id = %s",
            [session.pk],
        )
        rows = int(cursor.fetchone()[0])
        _pack(session)
        cursor.execute(
            "SELECT sum(pg_column_size(stored)) FROM telemetry_llmcall_packed "
            "WHERE session_id = %s",
            [session.pk],
        )
        chunks = int(cursor.fetchone()[0])
    assert chunks < rows * 0.4, (chunks, rows)


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_flush_empties_the_calls_and_turns_stored_apart_from_their_view() -> None:
    """Django's flush truncates tables, not views: the sessions' truncation takes the hot and
    packed tables with it (what every transactional test's teardown relies on)."""
    profile = get_or_create_profile(name="packed-flush")
    store_records(profile=profile, raw_items=_history("kept") + _history("gone"))
    _pack(AgentSession.objects.get(profile=profile, external_id="gone"))
    assert _stored("hot", AgentSession.objects.get(external_id="kept")) == 8

    call_command("flush", interactive=False, verbosity=0)

    assert not LLMCall.objects.exists() and not Turn.objects.exists()


@on_postgresql
def test_a_read_of_one_sessions_calls_probes_the_packed_chunks_by_their_session() -> None:
    profile = get_or_create_profile(name="packed-plan")
    store_records(profile=profile, raw_items=[r for n in range(40) for r in _history(f"s{n}", 1)])
    sessions = list(AgentSession.objects.filter(profile=profile))
    _pack(*sessions)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_llmcall_packed")
        sql, params = LLMCall.objects.filter(session=sessions[3]).query.sql_with_params()
        cursor.execute("SET enable_seqscan = off")  # a 40-row table is cheaper read whole
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan")
    # an index scan or a bitmap scan of the key, as the statistics other tests left choose
    assert "Index Scan using telemetry_llmcall_packed_pkey" in plan or (
        "Bitmap Index Scan on telemetry_llmcall_packed_pkey" in plan
    ), plan
    assert "Index Cond: (session_id = " in plan, plan


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_rows_another_transaction_removes_while_their_session_is_packed_stay_removed() -> None:
    """Retention deletes hot rows without locking their session; a packing of that session
    meanwhile waits for the delete and packs only the rows that survive it."""
    import threading
    import time

    from django.db import connections

    profile = get_or_create_profile(name="packed-race")
    store_records(profile=profile, raw_items=_history("race"))
    session = AgentSession.objects.get(profile=profile, external_id="race")
    remover = connections.create_connection("default")
    try:
        remover.set_autocommit(False)
        with remover.cursor() as cursor:
            for table in ("telemetry_llmcall_hot", "telemetry_turn_hot"):
                cursor.execute(
                    f"DELETE FROM {table} WHERE session_id = %s AND turn = 0", [session.pk]
                )

        def pack() -> None:
            try:
                _pack(session)
            finally:
                connection.close()

        packer = threading.Thread(target=pack)
        packer.start()
        time.sleep(0.5)  # the packing reaches the rows the remover holds, and waits
        remover.commit()
        packer.join(timeout=30)
    finally:
        remover.close()
    assert not packer.is_alive()
    assert _stored("hot", session) == 0 and _stored("packed", session) == 6
    assert not LLMCall.objects.filter(session=session, turn=0).exists()
    assert not Turn.objects.filter(session=session, turn=0).exists()


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_packing_beside_ingest_loses_and_doubles_nothing(settings: Any) -> None:
    """The beat job packs sessions while batches write late calls and replays to them: each
    batch waits for a packing holding its session (or the job skips it), so every call is
    stored once, every replay is found, and neither deadlocks the other."""
    settings.TELEMETRY_PACK_IDLE_SECONDS = 3600
    import threading

    profile = get_or_create_profile(name="packed-race")
    names = [f"race-{n}" for n in range(6)]
    store_records(profile=profile, raw_items=[r for n in names for r in _history(n, 2)])
    sessions = list(AgentSession.objects.filter(profile=profile))
    failures: list[BaseException] = []

    def packer() -> None:
        try:
            for _ in range(15):
                # the beat job: its sessions locked SKIP LOCKED, never waiting for a batch
                packing.pack_idle_sessions(now=timezone.now() + timedelta(days=1))
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failures.append(exc)
        finally:
            connection.close()  # the thread's own connection

    def writer(turn: int) -> None:
        try:
            for round_ in range(5):
                batch = [_record(n, turn, round_) for n in names]
                batch += [_record(n, 0, 0) for n in names]  # replays of stored calls
                statuses = [i.status for i in store_records(profile=profile, raw_items=batch).items]
                assert statuses == ["created"] * len(names) + ["duplicate"] * len(names), statuses
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failures.append(exc)
        finally:
            connection.close()  # the thread's own connection

    threads = [threading.Thread(target=packer)] + [
        threading.Thread(target=writer, args=(turn,)) for turn in (5, 6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for session in sessions:
        positions = list(LLMCall.objects.filter(session=session).values_list("turn", "call"))
        assert len(positions) == len(set(positions)) == 4 + 2 * 5
        assert Turn.objects.filter(session=session).count() == 4
        session.refresh_from_db()
        assert session.calls_count == 14 and session.turns_count == 4
