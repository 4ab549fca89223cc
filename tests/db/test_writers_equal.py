"""Each PostgreSQL ingest writer stores what the portable writer stores (`telemetry.ingest.
writers`): the same records, one by one or in batches, give the same answers (statuses,
D8's signals, session figures) and the same calls, turns, session row, hour rows and provider
events, over duplicates, conflicts, gaps, late and out-of-order calls, unpriced models and odd
values. The portable writer runs here on PostgreSQL, forced; on SQLite it is the only one."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from telemetry.ingest import known_sessions, writers
from telemetry.ingest.pipeline import store_records
from telemetry.ingest.statements import PREPARED_ROWS
from telemetry.ingest.writers import pg_batch, pg_single, portable
from telemetry.models import AgentSession, ContextEvent, HourlyUsage
from telemetry.policy_store import update_policy
from telemetry.profiles import get_or_create_profile
from telemetry.session_state import FIGURE_FIELDS
from tests.db.stored import session_record, session_rows

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL writers"),
    pytest.mark.django_db(transaction=True),  # each submission's transaction is its own
]

_EDITS = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_input_tokens": 10}]}


def _record(turn: int, call: int = 0, **extra: Any) -> dict[str, Any]:
    return session_record("equal", turn, call, **extra)


_RECORDS = [
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
    _record(8, 1, context_management=_EDITS, request_id=None),  # a provider event
    _record(9, surface_version=3, appended_chars=40),
    _record(9, 1, surface_version=4),
    # the largest a row stores (int4), valid
    _record(10, usage={"input_tokens": 2**31 - 1, "output_tokens": 2**31 - 1}),
]


def _random_records(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        record = _record(rng.choice((0, 1, 2, 3, 3, 4, 4, 5, 6)), rng.randrange(4))
        if rng.random() < 0.2:
            record["usage"] = {"input_tokens": rng.randrange(1, 9), "output_tokens": 2}
        if rng.random() < 0.3:
            record["request_id"] = None
        if rng.random() < 0.2:
            record["appended_chars"] = rng.randrange(10_000)
        records.append(record)
    return records


def _chunks(records: list[dict[str, Any]], sizes: Iterator[int]) -> list[list[dict[str, Any]]]:
    out, at = [], 0
    while at < len(records):
        size = next(sizes)
        out.append(records[at : at + size])
        at += size
    return out


def _ingest(
    profile_name: str, submissions: list[list[dict[str, Any]]], used: list[Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Store `submissions` in order for a new profile: the answers, and what is stored."""
    profile = get_or_create_profile(name=profile_name)
    answers = []
    for records in submissions:
        result = store_records(profile=profile, raw_items=records, batch=len(records) > 1)
        items = [dict(item.__dict__) for item in result.items]
        figures = [
            {
                k: v
                for k, v in s.__dict__.items()
                if k not in {"_state", "id", "profile_id", "created_at"}
            }
            for s in result.sessions
        ]
        answers.append((items, figures, result.over_threshold != []))
        for session in result.sessions:  # each writer writes the figures it answers with
            stored = AgentSession.objects.filter(pk=session.pk).values(*FIGURE_FIELDS).get()
            assert stored == {name: getattr(session, name) for name in FIGURE_FIELDS}
    hours = [
        {k: v for k, v in row.items() if k not in {"id", "profile_id", "stripe"}}
        for row in HourlyUsage.objects.filter(profile=profile).order_by("hour", "model").values()
    ]
    sessions = {}
    for session in AgentSession.objects.filter(profile=profile).order_by("external_id"):
        events = [
            {k: v for k, v in row.items() if k not in {"id", "session_id", "call_id", "created_at"}}
            for row in ContextEvent.objects.filter(session=session).order_by("source_key").values()
        ]
        sessions[session.external_id] = {**session_rows(session), "events": events}
    return answers, {"sessions": sessions, "hours": hours}


def _same_as_portable(
    monkeypatch: pytest.MonkeyPatch, submissions: list[list[dict[str, Any]]], writer: Any
) -> list[Any]:
    """Store `submissions` through the writers as chosen, then through the portable writer
    alone; assert the same answers and rows; return the writers chosen. Low round limits, so
    the answers carry D8's nudge and stop."""
    update_policy(profile=None, values={"round_soft_limit": 2, "round_hard_cap": 3})
    known_sessions.forget_all()
    used: list[Any] = []
    choose = writers.choose

    def spy(records: int) -> Any:
        used.append(choose(records))
        return used[-1]

    monkeypatch.setattr(writers, "choose", spy)
    chosen_answers, chosen = _ingest("chosen", submissions, used)
    assert writer in used
    monkeypatch.setattr(writers, "choose", lambda records: portable.store)
    portable_answers, reference = _ingest("portable", submissions, used)
    assert chosen_answers == portable_answers
    assert chosen == reference
    assert any(item["stop"] for items, _, _ in chosen_answers for item in items)
    return used


def test_pg_single_stores_what_portable_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    used = _same_as_portable(monkeypatch, [[r] for r in _RECORDS], pg_single.store)
    assert set(used) == {pg_single.store}


def test_pg_single_stores_what_portable_stores_in_random_sequences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _same_as_portable(monkeypatch, [[r] for r in _random_records(1807, 40)], pg_single.store)


def test_pg_batch_stores_what_portable_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 2 to 5 records, so duplicates and conflicts fall within a batch and across."""
    submissions = _chunks(_RECORDS, iter([2, 3, 5, 4, 2, 3, 5, 2, 3, 4]))
    used = _same_as_portable(monkeypatch, submissions, pg_batch.store)
    assert set(used) <= {pg_batch.store, pg_single.store}


@pytest.mark.parametrize("seed", range(2))
def test_pg_batch_stores_what_portable_stores_in_random_batches(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    records = _random_records(seed, 60)
    sizes = iter([rng.randrange(2, 20) for _ in range(60)])
    _same_as_portable(monkeypatch, _chunks(records, sizes), pg_batch.store)


def test_pg_batch_stores_what_portable_stores_across_many_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches over more sessions than `statements.PREPARED_ROWS`: their sessions created and
    locked, then their figures written, from one array per column
    (`upserts.lock_keys_statement`, `upserts.update_statement`), next to batches over a few."""
    many = PREPARED_ROWS + 4
    opening = [session_record(f"many-{s}", 0) for s in range(many)]
    following = [
        session_record(f"many-{s}", 1, call, appended_chars=10 * s)
        for s in range(many)
        for call in range(4)  # over the round limits: D8's nudge and stop
    ]
    following.append(following[5])  # a duplicate
    later = [session_record(f"many-{s}", 2, request_id=None) for s in range(3)]
    used = _same_as_portable(monkeypatch, [opening, following, later], pg_batch.store)
    assert set(used) == {pg_batch.store}
