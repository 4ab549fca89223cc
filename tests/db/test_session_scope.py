"""Reads of calls and turns restricted to sessions (`telemetry.session_scope`) give the answers
of the reads that named no session: on calls at, before and after the cut-off, a turn spanning
it, late calls with an old time, an imported file whose calls are later than its session says,
and after retention removed old calls."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compaction.cache_report import context_changes
from compaction.session_export import export_lines, sessions_to_export
from compaction.session_import import import_lines
from console.advisor import rounds_histograms
from console.selectors.policies import recent_cached_calls
from telemetry.cache_tiers import CachedCall
from telemetry.catalogue import load_catalogue
from telemetry.events import record_context_event
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession, ContextEvent, LLMCall, Turn
from telemetry.policy_store import update_policy
from telemetry.pricing import find_price
from telemetry.retention import remove_expired_calls
from telemetry.session_scope import sessions_seen_since
from telemetry.session_state import discard_unused_sessions
from tests.db.conftest import Agent
from tests.db.test_console_views import report
from tests.db.test_session_export import delete_sessions

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"


def call(session: str, turn: int, number: int, at: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn": turn,
        "call": number,
        "model": SONNET,
        "at": at.isoformat(),
        "usage": {
            "input_tokens": 300 + turn,
            "cache_creation_input_tokens": 800 + number,
            "cache_read_input_tokens": 12_000 + 100 * turn,
            "output_tokens": 200,
        },
        **extra,
    }


@pytest.fixture
def since() -> datetime:
    return timezone.now().replace(microsecond=0) - timedelta(days=7)


@pytest.fixture
def boundaries(agent: Agent, since: datetime) -> datetime:
    """Sessions around the cut-off `since`, in two profiles; returns `since`."""
    hour = timedelta(hours=1)
    minute = timedelta(minutes=1)
    report(agent.key, [call("old", t, 0, since - timedelta(days=2) + t * hour) for t in range(3)])
    report(
        agent.key,
        [
            call("spanning", 0, 0, since - hour),
            call("spanning", 1, 0, since - minute),  # a turn across the cut-off
            call("spanning", 1, 1, since + minute),
            call("spanning", 2, 0, since + hour),
        ],
    )
    # its last call exactly at the cut-off: seen at `since`, kept by `>=`
    report(agent.key, [call("exact", 0, 0, since - hour), call("exact", 1, 0, since)])
    report(agent.key, [call("late", t, 0, since + timedelta(days=6) + t * hour) for t in range(2)])
    # late calls with an old time: to an earlier turn, and to a new one
    report(
        agent.key,
        [call("late", 0, 1, since - timedelta(days=3)), call("late", 5, 0, since - hour)],
    )
    # a session last seen before the cut-off takes a late call, still before it
    report(agent.key, [call("quiet", 0, 0, since - timedelta(days=4))])
    report(agent.key, [call("quiet", 0, 1, since - timedelta(days=1))])
    fleet = create_agent_key(profile_name="fleet").key
    report(
        fleet,
        [
            call("fleet", 0, 0, since + hour),
            call("fleet", 0, 1, since + 2 * hour, model="no-such-model"),  # unpriced
            call("fleet", 1, 0, since - hour),
        ],
    )
    spanning = AgentSession.objects.get(external_id="spanning")
    for n, (turn, number) in enumerate([(1, 1), (0, 0)]):
        record_context_event(
            spanning,
            kind="compaction",
            origin="agent",
            source="claude-code",
            source_key=f"cc-{n}",
            at=since + timedelta(minutes=n),
            turn=turn,
            call=LLMCall.objects.get(session=spanning, turn=turn, call=number),
        )
    record_context_event(
        spanning,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="cc-no-call",
        at=since,
    )
    return since


def imported(key: AgentKey, since: datetime) -> None:
    """A session restored from an edited file: its session line says it was last seen a day
    before the cut-off while its calls and turn are after it."""
    at = since + timedelta(hours=3)
    report(key, [call("edited", 0, n, at) for n in range(2)])
    edited = AgentSession.objects.filter(external_id="edited")
    lines = [json.loads(line) for line in "".join(export_lines(edited)).splitlines()]
    delete_sessions(external_id="edited")
    lines[0]["row"]["last_seen_at"] = (since - timedelta(days=1)).isoformat()
    import_lines([json.dumps(line) for line in lines])


# --- the reads as they were, naming no session: the oracles ---------------------------------


def unscoped_cached_calls(since: datetime) -> dict[int, dict[int, list[CachedCall]]]:
    catalogue = load_catalogue()
    found: dict[int, dict[int, list[CachedCall]]] = defaultdict(lambda: defaultdict(list))
    rows = (
        LLMCall.objects.filter(at__gte=since)
        .order_by("session_id", "turn", "call")
        .values_list(
            "session__profile_id",
            "session_id",
            "at",
            "cache_read",
            "cache_write_5m",
            "cache_write_1h",
            "model",
        )
    )
    for profile_id, session_id, at, read, w5, w1, model in rows:
        price = find_price(model, catalogue)
        if price is not None:
            found[profile_id][session_id].append(
                CachedCall(at=at, cached_prefix_tokens=read + w5 + w1, input_price=price.input)
            )
    return found


def unscoped_histograms(since: datetime) -> dict[int, dict[int, int]]:
    found: dict[int, dict[int, int]] = defaultdict(dict)
    rows = (
        Turn.objects.filter(last_at__gte=since)
        .values("session__profile_id", "calls")
        .annotate(turns=Count("id"))
        .values_list("session__profile_id", "calls", "turns")
    )
    for profile_id, rounds, turns in rows:
        found[profile_id][rounds] = turns
    return found


def plain(nested: Any) -> Any:
    return {k: plain(v) for k, v in nested.items()} if isinstance(nested, dict) else nested


def cut_offs(since: datetime) -> list[datetime]:
    """The cut-off, a microsecond either side of it, and the times of the stored calls."""
    second = timedelta(microseconds=1)
    stored = set(LLMCall.objects.values_list("at", flat=True))
    return sorted({since - second, since, since + second, *stored})


def assert_scoped_reads_match(since: datetime) -> None:
    for cut in cut_offs(since):
        assert plain(recent_cached_calls(cut)) == plain(unscoped_cached_calls(cut)), cut
        assert plain(rounds_histograms(cut)) == plain(unscoped_histograms(cut)), cut


def test_every_call_and_turn_is_at_or_before_its_sessions_last_sighting(agent, boundaries) -> None:
    imported(agent.key, boundaries)
    for session in AgentSession.objects.all():
        calls = LLMCall.objects.filter(session=session)
        turns = Turn.objects.filter(session=session)
        assert session.last_seen_at is not None, session
        assert not calls.filter(at__gt=session.last_seen_at).exists(), session
        assert not turns.filter(last_at__gt=session.last_seen_at).exists(), session


def test_an_imported_file_saying_its_session_was_seen_before_its_calls_is_covered(
    agent, since
) -> None:
    imported(agent.key, since)
    session = AgentSession.objects.get(external_id="edited")
    assert session.last_seen_at == since + timedelta(hours=3)
    assert plain(recent_cached_calls(since)) == plain(unscoped_cached_calls(since))
    assert len(recent_cached_calls(since)[session.profile_id][session.pk]) == 2
    assert plain(rounds_histograms(since)) == plain(unscoped_histograms(since))


def test_the_scoped_reads_of_recent_calls_and_turns_match_the_unscoped_ones(boundaries) -> None:
    since = boundaries
    scoped = recent_cached_calls(since)
    by_name = dict(AgentSession.objects.values_list("external_id", "pk"))
    default = AgentSession.objects.get(external_id="spanning").profile_id
    # the boundary cases are in the answer, the old sessions are not
    assert set(scoped[default]) == {by_name["spanning"], by_name["exact"], by_name["late"]}
    assert [c.at for c in scoped[default][by_name["exact"]]] == [since]
    assert len(scoped[default][by_name["spanning"]]) == 2
    assert_scoped_reads_match(since)


def test_the_scoped_reads_cover_sessions_in_several_chunks(boundaries, monkeypatch) -> None:
    monkeypatch.setattr("telemetry.session_scope.SESSION_CHUNK", 1)
    assert [len(c) for c in sessions_seen_since(boundaries, chunk=1)] == [1, 1, 1, 1]
    monkeypatch.setattr(
        "console.advisor.sessions_seen_since",
        lambda since: sessions_seen_since(since, chunk=1),
    )
    monkeypatch.setattr(
        "console.selectors.policies.sessions_seen_since",
        lambda since: sessions_seen_since(since, chunk=1),
    )
    assert_scoped_reads_match(boundaries)


def test_after_retention_the_scoped_reads_still_match_and_the_calls_metric_stays(
    boundaries,
) -> None:
    before = metric("telemetry_calls_total")
    assert before == LLMCall.objects.count() == 18
    default = AgentSession.objects.get(external_id="old").profile
    update_policy(profile=default, values={"call_retention_days": 8})
    removed = remove_expired_calls()
    assert removed.calls > 0
    assert LLMCall.objects.count() == before - removed.calls
    # the calls ingested: retention removes raw calls, not what was ingested
    assert metric("telemetry_calls_total") == before
    assert_scoped_reads_match(boundaries)


def metric(name: str) -> float:
    text = Client().get("/metrics").content.decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name)))


def test_the_calls_metric_is_the_count_of_stored_calls_before_any_retention(
    agent, boundaries
) -> None:
    imported(agent.key, boundaries)
    assert metric("telemetry_calls_total") == LLMCall.objects.count() == 20
    assert metric("telemetry_sessions") == AgentSession.objects.count() == 7


def events_with_calls() -> dict[int, tuple[int, int] | None]:
    """The old read: each event's call through its id alone."""
    return {
        pk: None if turn is None else (turn, number)
        for pk, turn, number in ContextEvent.objects.values_list("pk", "call__turn", "call__call")
    }


def test_the_cache_reports_event_calls_are_read_within_their_sessions(boundaries) -> None:
    ids = list(AgentSession.objects.values_list("pk", flat=True))
    found = {c.event_id: c.call for changes in context_changes(ids).values() for c in changes}
    assert found == events_with_calls()
    assert sorted(found.values(), key=str) == [(0, 0), (1, 1), None]


def test_the_exports_event_calls_are_read_within_their_sessions(boundaries) -> None:
    text = "".join(export_lines(sessions_to_export()))
    exported = [json.loads(line) for line in text.splitlines()]
    rows = [line["row"] for line in exported if line["kind"] == "context_event"]
    found = [None if r["call_turn"] is None else (r["call_turn"], r["call_call"]) for r in rows]
    assert sorted(found, key=str) == sorted(events_with_calls().values(), key=str)


def test_discarding_unused_sessions_keeps_those_with_a_call_or_an_event(agent) -> None:
    now = timezone.now()
    report(agent.key, [call("called", 0, 0, now)])
    profile = agent.key.profile
    noted = AgentSession.objects.create(profile=profile, external_id="noted")
    record_context_event(
        noted, kind="compaction", origin="agent", source="x", source_key="k", at=now
    )
    empty = AgentSession.objects.create(profile=profile, external_id="empty")
    other = AgentSession.objects.create(profile=profile, external_id="not-named")
    named = list(AgentSession.objects.exclude(pk=other.pk).values_list("pk", flat=True))
    discard_unused_sessions(named)
    kept = set(AgentSession.objects.values_list("external_id", flat=True))
    assert kept == {"called", "noted", "not-named"}
    assert not AgentSession.objects.filter(pk=empty.pk).exists()


def test_the_scoped_reads_start_from_the_sessions_index_on_postgresql(agent) -> None:
    """3,600 sessions last seen over 180 days, 30 calls and 10 turns each: the reads of the
    last 7 days find their sessions on `last_seen_at`'s index, then probe each session's calls
    and turns on their (session, …) indexes; no read of calls or turns scans its table."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    from bench import bulk

    profile = agent.key.profile
    bulk.seed_sessions(profile.pk, "plan-", 3600)
    where = "s.profile_id = %s"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE telemetry_agentsession SET last_seen_at = now() - (id % 180) * interval '1 day'"
        )
        bulk.seed_calls(where, [profile.pk], 10, 3)
        cursor.execute(
            "UPDATE telemetry_llmcall c SET at = s.last_seen_at - ((9 - c.turn) * 3 + 2 - c.call)"
            " * interval '1 minute' FROM telemetry_agentsession s WHERE s.id = c.session_id"
        )
        bulk.seed_turns(where, [profile.pk])
        for table in ("telemetry_agentsession", "telemetry_llmcall", "telemetry_turn"):
            cursor.execute(f"ANALYZE {table}")
    since = timezone.now() - timedelta(days=7)
    with CaptureQueriesContext(connection) as queries:
        assert plain(recent_cached_calls(since)) == plain(unscoped_cached_calls(since))
        assert plain(rounds_histograms(since)) == plain(unscoped_histograms(since))
    reads = [q["sql"] for q in queries.captured_queries if "telemetry_" in q["sql"]]
    plans = {}
    with connection.cursor() as cursor:
        for sql in reads:
            cursor.execute("EXPLAIN " + sql)
            plans[sql] = "\n".join(row[0] for row in cursor.fetchall())
    scoped = [plan for sql, plan in plans.items() if 'session_id" IN (' in sql]
    assert len(scoped) == 2, list(plans)
    for plan in scoped:
        assert "Seq Scan" not in plan, plan
        assert "call_unique_position" in plan or "turn_unique" in plan, plan
    first = [p for s, p in plans.items() if 'FROM "telemetry_agentsession"' in s.split("WHERE")[0]]
    # an index of the sessions on `last_seen_at` (`session_last_seen`, or the list's order)
    assert len(first) == 1 and "Seq Scan" not in first[0], first
    assert "Index Cond: (last_seen_at >=" in first[0], first[0]
