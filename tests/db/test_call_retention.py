"""Call retention per profile (issue 35, item 2): 90 days of calls, a 30-day retention, and the
overview's and the sessions' figures over the whole period unchanged while the old calls and
turns are gone, removed in bounded batches; the policy shows what a change removes first."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from compaction.models import CompactionRun
from console.policy_impact import policy_impact
from telemetry.errors import FieldError
from telemetry.events import record_context_event
from telemetry.keys import create_agent_key
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall, Turn
from telemetry.policy_store import effective_policy, update_policy
from telemetry.retention import BATCH_TURNS, Removed, remove_expired_calls
from telemetry.tasks import apply_retention
from tests.db.conftest import Agent, make_user
from tests.db.test_console_views import report
from tests.db.test_session_export import hour_rows, overview_figures, records

pytestmark = pytest.mark.django_db
DAYS = 90

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="packed storage is PostgreSQL's"
)


def _pack_all() -> None:
    from telemetry import packing

    with transaction.atomic():
        packing.pack_sessions(list(AgentSession.objects.values_list("pk", flat=True)))


@pytest.fixture
def ninety_days(agent: Agent) -> AgentProfile:
    """A session with a turn a day for 90 days (two calls each), one that ended 80 days ago
    (with a compaction run and an agent's compaction event on an old call), and a session of
    another profile, as old, whose profile keeps calls forever."""
    now = timezone.now()
    start = now - timedelta(days=DAYS)
    daily = [
        {
            **record,
            "at": (start + timedelta(days=record["turn"], minutes=record["call"])).isoformat(),
        }
        for record in records("daily", DAYS, start=start)
    ]
    report(agent.key, daily)
    report(agent.key, records("ended", 6, start=now - timedelta(days=80)))
    ended = AgentSession.objects.get(external_id="ended")
    CompactionRun.objects.create(
        session=ended,
        mode="auto",
        status="applied",
        tokens_before=9_000,
        tokens_after=3_000,
        finished_at=now - timedelta(days=80),
    )
    record_context_event(
        ended,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="cc-old",
        at=now - timedelta(days=80),
        turn=1,
        call=LLMCall.objects.get(session=ended, turn=1, call=0),
        tokens_before=8_000,
        tokens_after=2_000,
    )
    fleet = create_agent_key(profile_name="fleet").key
    report(fleet, records("kept", 4, start=now - timedelta(days=60)))
    return agent.key.profile


def session_figures() -> dict[str, dict[str, Any]]:
    """Every session's row but its `retired_totals`, retention's own record of what it took."""
    rows = AgentSession.objects.values()
    return {
        row["external_id"]: {k: v for k, v in row.items() if k != "retired_totals"} for row in rows
    }


@pytest.mark.parametrize(
    "packed", [False, pytest.param(True, marks=on_postgresql)], ids=["hot", "packed"]
)
def test_a_30_day_retention_removes_the_old_calls_and_keeps_every_figure(
    ninety_days, packed: bool
) -> None:
    if packed:
        _pack_all()
    cutoff = timezone.now() - timedelta(days=30)
    before = {
        "sessions": session_figures(),
        "hours": hour_rows(),
        "overview": overview_figures(),
        "default": overview_figures("default"),
    }
    old_calls = LLMCall.objects.filter(session__profile=ninety_days, at__lt=cutoff).count()
    assert old_calls > 100

    # nothing goes while the profile keeps calls forever (the default)
    assert remove_expired_calls() == remove_expired_calls(batch_turns=1)
    assert remove_expired_calls().turns == 0
    preview = policy_impact(ninety_days, {"call_retention_days": 30})
    assert preview is not None and preview.changes_anything
    update_policy(profile=ninety_days, values={"call_retention_days": 30})
    assert effective_policy(ninety_days).call_retention_days == 30

    batches = []
    while True:
        done = remove_expired_calls(batch_turns=16)
        assert done.turns <= 16  # bounded per job
        batches.append(done)
        if not done.has_more:
            break
    assert len(batches) > 3
    assert sum(b.turns for b in batches) == preview.expiring_turns
    assert sum(b.calls for b in batches) == preview.expiring_calls

    # the old calls and turns are gone, whole turns only, but each session's latest turn (the
    # projection reads it); turn 60 of "daily" straddles the cut-off and stays whole
    ended = AgentSession.objects.get(external_id="ended")
    assert list(Turn.objects.filter(session=ended).values_list("turn", flat=True)) == [5]
    old_left = LLMCall.objects.filter(session__profile=ninety_days, at__lt=cutoff)
    assert sorted(old_left.values_list("session__external_id", "turn", "call")) == [
        ("daily", 60, 0),
        ("ended", 5, 0),
        ("ended", 5, 1),
    ]
    assert not Turn.objects.filter(session__external_id="daily", turn__lt=60).exists()
    assert LLMCall.objects.filter(session__external_id="daily").count() == 2 * 30
    # another profile keeps everything
    assert LLMCall.objects.filter(session__external_id="kept").count() == 4 * 2
    # the figures over the whole period: rollups, overview, every session's totals
    assert hour_rows() == before["hours"]
    assert overview_figures() == before["overview"]
    assert overview_figures("default") == before["default"]
    assert session_figures() == before["sessions"]
    # compaction history and context events stay; the event's removed call is unlinked
    assert CompactionRun.objects.filter(session=ended).count() == 1
    event = ContextEvent.objects.get(source_key="cc-old")
    assert event.call is None and event.tokens_before == 8_000
    # nothing more to remove, and the policy now previews nothing new
    assert remove_expired_calls().turns == 0
    again = policy_impact(ninety_days, {"call_retention_days": 30})
    assert again is not None and again.expiring_turns == 0


def test_the_beat_job_removes_a_batch_and_stops_when_done(ninety_days) -> None:
    update_policy(profile=ninety_days, values={"call_retention_days": 85})
    apply_retention.apply()
    cutoff = timezone.now() - timedelta(days=85)
    assert not Turn.objects.filter(session__external_id="daily", last_at__lt=cutoff).exists()
    assert Turn.objects.filter(session__external_id="daily").count() == 85


def test_a_retention_must_be_a_whole_number_of_days(ninety_days) -> None:
    with pytest.raises(FieldError, match="call_retention_days"):
        update_policy(profile=ninety_days, values={"call_retention_days": -1})
    with pytest.raises(FieldError, match="call_retention_days"):
        update_policy(profile=ninety_days, values={"call_retention_days": 1.5})


def test_the_policy_page_shows_what_a_retention_removes_before_saving(ninety_days, client) -> None:
    client.force_login(make_user("boss", "admin"))
    shorter = {"call_retention_days": "30"}
    preview = client.post(reverse("policy_profile_preview", args=["default"]), shorter)
    text = preview.content.decode()
    assert "would remove" in text and "calls</strong>" in text
    response = client.post(reverse("policy_profile", args=["default"]), shorter)
    page = response.content.decode()
    assert response.status_code == 200 and "Not saved yet" in page and "remove calls" in page
    assert effective_policy(ninety_days).call_retention_days == 0
    confirm = re.search(r'name="confirm" value="([^"]+)"', page)
    assert confirm is not None
    saved = client.post(
        reverse("policy_profile", args=["default"]), shorter | {"confirm": confirm.group(1)}
    )
    assert saved.status_code == 302
    assert effective_policy(ninety_days).call_retention_days == 30


def test_agents_read_the_retention_in_their_policy(agent) -> None:
    assert agent.get("/api/v1/policy").json()["call_retention_days"] == 0


def test_an_export_taken_before_the_retention_restores_its_calls_with_the_same_figures(
    ninety_days,
) -> None:
    import io

    from compaction.session_import import import_lines
    from tests.db.test_session_export import everything

    exported = everything()
    calls = LLMCall.objects.count()
    update_policy(profile=ninety_days, values={"call_retention_days": 30})
    while remove_expired_calls().has_more:
        pass
    before = {"sessions": session_figures(), "hours": hour_rows()}
    assert LLMCall.objects.count() < calls

    result = import_lines(io.StringIO(exported))

    assert result.created == 0 and LLMCall.objects.count() == calls
    assert ContextEvent.objects.get(source_key="cc-old").call is not None
    assert {"sessions": session_figures(), "hours": hour_rows()} == before


def test_the_retention_scan_reads_the_old_block_ranges_on_postgresql(agent) -> None:
    """20,000 turns written over 20,000 minutes, 3 % of them past a 13-day retention: the scan
    for expired turns reads the old block ranges of the BRIN index on `last_at`, not the table
    nor each session's turns."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    from bench import bulk

    profile = agent.key.profile
    bulk.seed_sessions(profile.pk, "brin-", 400)
    where = "s.profile_id = %s"
    bulk.seed_calls(where, [profile.pk], 50, 1)
    bulk.seed_turns(where, [profile.pk])
    with connection.cursor() as cursor:
        # the turns' clocks in the order they were written, the newest now
        cursor.execute(
            "UPDATE telemetry_turn_hot SET last_at = now() - "
            "((SELECT max(id) FROM telemetry_turn_hot) - id) * interval '1 minute'"
        )
        cursor.execute("UPDATE telemetry_agentsession SET last_turn = 49")
        # what autovacuum does to the pages written since (no VACUUM in a test's transaction)
        cursor.execute("SELECT brin_summarize_new_values('turn_last_at_brin')")
        cursor.execute("ANALYZE telemetry_turn_hot")
        cursor.execute("ANALYZE telemetry_agentsession")
    update_policy(profile=profile, values={"call_retention_days": 13})
    with CaptureQueriesContext(connection) as queries:
        removed = remove_expired_calls()  # a batch of BATCH_TURNS, of about 1,280
    assert removed.turns == BATCH_TURNS and removed.has_more
    sql = next(
        q["sql"] for q in queries.captured_queries if 'FROM "telemetry_turn_hot"' in q["sql"]
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on turn_last_at_brin" in plan, plan


def _session_turns(name: str, ends: list[datetime]) -> list[dict[str, Any]]:
    """One call a turn, each turn ending at its `ends` entry."""
    return [
        {
            "session_id": name,
            "turn": t,
            "call": 0,
            "model": "claude-sonnet-4-5",
            "at": at.isoformat(),
            "usage": {"input_tokens": 100 + t, "output_tokens": 10},
        }
        for t, at in enumerate(ends)
    ]


def _split(session: AgentSession, first_hot: int) -> None:
    """Move the packed turns of `session` from `first_hot` on back to the hot table: a session
    with a packed part and a hot part."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_turn_hot SELECT u.* FROM telemetry_turn_packed p "
            "CROSS JOIN LATERAL unnest(p.stored) u WHERE p.session_id = %s AND u.turn >= %s",
            [session.pk, first_hot],
        )
        cursor.execute(
            "UPDATE telemetry_turn_packed SET stored = ARRAY(SELECT u FROM unnest(stored) u "
            "WHERE u.turn < %s) WHERE session_id = %s",
            [first_hot, session.pk],
        )


@pytest.fixture
def boundaries(agent: Agent) -> tuple[Any, dict[int, Any]]:
    """Sessions of three profiles around their cut-offs (30 days; 10 days; kept forever): a
    turn ending exactly at the cut-off, a microsecond before and after it, an old latest turn
    alone, a session longer than a chunk across its cut-off; on PostgreSQL some packed, one
    packed in part, the rest hot."""
    from telemetry import packing

    now = timezone.now()
    second = create_agent_key(profile_name="second").key
    forever = create_agent_key(profile_name="forever").key
    update_policy(profile=agent.key.profile, values={"call_retention_days": 30})
    update_policy(profile=second.profile, values={"call_retention_days": 10})
    cuts = {
        agent.key.profile.pk: now - timedelta(days=30),
        second.profile.pk: now - timedelta(days=10),
    }
    us = timedelta(microseconds=1)
    day = timedelta(days=1)
    for key, cut in (
        (agent.key, cuts[agent.key.profile.pk]),
        (second, cuts[second.profile.pk]),
        (forever, now - timedelta(days=30)),
    ):
        report(key, _session_turns("edges", [cut - day, cut - us, cut, cut + us, now]))
        report(key, _session_turns("alone-old", [cut - 9 * day]))
        report(key, _session_turns("latest-old", [cut - 3 * day, cut - 2 * day]))
        long = [cut - (packing.CHUNK - t) * timedelta(hours=1) for t in range(packing.CHUNK + 30)]
        report(key, _session_turns("long", long))
        report(key, _session_turns("mixed", [cut - 3 * day + t * day for t in range(7)]))
        report(key, _session_turns("hot", [cut - 2 * day, cut - us, now]))
    if connection.vendor == "postgresql":
        with transaction.atomic():
            packing.pack_sessions(
                list(AgentSession.objects.exclude(external_id="hot").values_list("pk", flat=True))
            )
        for session in AgentSession.objects.filter(external_id="mixed"):
            _split(session, 4)
    return now, cuts


def _turn_keys(**filters: Any) -> set[tuple[str, str, int]]:
    return set(
        Turn.objects.filter(**filters).values_list(
            "session__profile__name", "session__external_id", "turn"
        )
    )


def _call_keys() -> set[tuple[str, str, int]]:
    return set(
        LLMCall.objects.values_list("session__profile__name", "session__external_id", "turn")
    )


def test_retention_and_its_preview_read_what_the_plain_rule_over_every_turn_matches(
    boundaries,
) -> None:
    from telemetry.retention import expired_turns, expiring

    now, cuts = boundaries
    rule = expired_turns(cuts)
    plain = _turn_keys(pk__in=Turn.objects.filter(rule).values("pk"))
    calls = Turn.objects.filter(rule).aggregate(n=Sum("calls"))["n"]
    # the boundaries drawn: the turn at the cut-off, the latest turns, the kept profile stay
    assert ("default", "edges", 1) in plain and ("default", "edges", 2) not in plain
    assert ("default", "edges", 0) in plain and ("default", "alone-old", 0) not in plain
    assert ("default", "latest-old", 0) in plain and ("default", "latest-old", 1) not in plain
    assert not any(profile == "forever" for profile, _, _ in plain)
    assert {("second", "mixed", t) for t in (0, 1, 2)} <= plain
    assert len(plain) > 2 * 100 and calls == len(plain)

    assert expiring(rule, cuts) == (len(plain), calls)
    # a preview's rule: what a shorter retention removes that the current one keeps
    longer = {pk: cut - timedelta(days=2) for pk, cut in cuts.items()}
    newly = rule & ~expired_turns(longer)
    assert expiring(newly, cuts) == (
        Turn.objects.filter(newly).count(),
        Turn.objects.filter(newly).aggregate(n=Sum("calls"))["n"],
    )

    before, before_calls = _turn_keys(), _call_keys()
    done = []
    while True:
        removed = remove_expired_calls(batch_turns=7, now=now)
        assert removed.turns <= 7
        done.append(removed)
        if not removed.has_more:
            break
    assert before - _turn_keys() == plain
    assert sum(r.turns for r in done) == len(plain) and sum(r.calls for r in done) == calls
    assert before_calls - _call_keys() == plain  # one call a turn: each expired turn's
    assert expiring(rule, cuts) == (0, 0)
    # no packed session is a candidate any more, an old latest turn alone included: a run
    # unpacks nothing
    with CaptureQueriesContext(connection) as queries:
        assert remove_expired_calls(now=now) == Removed(0, 0, False)
    assert not [q for q in queries.captured_queries if "telemetry_pack_sessions" in q["sql"]]


@on_postgresql
def test_the_packed_candidates_are_read_from_their_index_by_profile(agent) -> None:
    """Packed sessions of a profile that keeps everything, as old as those of a profile with a
    13-day retention: the candidates are one range of the chunks' index a profile, and the
    kept profile's chunks are not read."""
    from bench import bulk
    from telemetry import packing

    kept = create_agent_key(profile_name="kept").key.profile
    profile = agent.key.profile
    for pk, prefix, count in ((kept.pk, "kept-", 2000), (profile.pk, "old-", 40)):
        bulk.seed_sessions(pk, prefix, count)
        bulk.seed_calls("s.profile_id = %s", [pk], 3, 1)
        bulk.seed_turns("s.profile_id = %s", [pk])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE telemetry_agentsession SET last_turn = 2")
    _pack_all()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_turn_packed")
        cursor.execute("ANALYZE telemetry_agentsession")
    update_policy(profile=profile, values={"call_retention_days": 13})
    with CaptureQueriesContext(connection) as queries:
        removed = remove_expired_calls(batch_turns=50)
    assert removed == Removed(50, 50, True)  # 40 sessions' 80 expired turns
    sql = next(q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"])
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    index = packing.expiry_index(Turn)
    assert f"Index Only Scan using {index}" in plan, plan
    assert "Seq Scan on telemetry_turn_packed" not in plan, plan
    assert f"profile_id = {kept.pk})" not in plan, plan


@on_postgresql
def test_a_packed_candidate_without_an_expired_turn_is_packed_again_and_no_longer_one(
    agent,
) -> None:
    """A chunk's `expires_at` older than its turns now say (its session's latest turn changed
    while packed, which only a write behind the ORM's back does) leads to a session with
    nothing to remove: retention packs it again, which resets the bound."""
    now = timezone.now()
    update_policy(profile=agent.key.profile, values={"call_retention_days": 30})
    report(agent.key, _session_turns("stale", [now - timedelta(days=40), now]))
    session = AgentSession.objects.get(external_id="stale")
    _pack_all()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE telemetry_agentsession SET last_turn = 0 WHERE id = %s", [session.pk]
        )

    def bound() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT expires_at FROM telemetry_turn_packed WHERE session_id = %s", [session.pk]
            )
            return cursor.fetchone()[0]

    assert bound() < now - timedelta(days=30)
    assert remove_expired_calls(now=now) == Removed(0, 0, False)
    assert bound() > now - timedelta(days=1)
    assert Turn.objects.filter(session=session).count() == 2


def _one_session_record(turn: int, call: int, at: datetime) -> dict[str, Any]:
    return {
        "session_id": "kept-totals",
        "turn": turn,
        "call": call,
        "model": "claude-sonnet-4-5",
        "at": at.isoformat(),
        "usage": {"input_tokens": 1_000 + turn, "output_tokens": 50, "cache_read_input_tokens": 9},
    }


@pytest.mark.parametrize("later", ["new turn", "late call", "replay", "repricing"])
def test_a_sessions_totals_stay_when_it_is_written_to_after_retention(later: str) -> None:
    """After retention removed turns, a write that re-derives the session's figures from the
    turns it kept (a replay, a late call to an earlier turn, a repricing; on SQLite any write)
    joins them with the removed turns' totals: the session's figures are those of every call
    it ever had."""
    from telemetry.ingest.pipeline import store_records
    from telemetry.profiles import get_or_create_profile

    profile = get_or_create_profile(name=f"kept-totals-{later.replace(' ', '-')}")
    now = timezone.now()
    old = now - timedelta(days=60)
    history = [_one_session_record(t, 0, old + timedelta(minutes=t)) for t in range(3)]
    history += [_one_session_record(3, 0, now - timedelta(hours=2))]
    history += [_one_session_record(4, 0, now - timedelta(hours=1))]
    store_records(profile=profile, raw_items=history)
    session = AgentSession.objects.get(profile=profile)
    figures = ("calls_count", "turns_count", "cost_usd", "no_cache_cost_usd", "cache_read_tokens")
    before = {name: getattr(session, name) for name in figures}
    update_policy(profile=profile, values={"call_retention_days": 30})
    assert remove_expired_calls().turns == 3
    session.refresh_from_db()
    assert {name: getattr(session, name) for name in figures} == before

    more = {"new turn": 1, "late call": 1, "replay": 0, "repricing": 0}[later]
    if later == "new turn":
        store_records(profile=profile, raw_items=[_one_session_record(5, 0, now)])
    elif later == "late call":  # to turn 3, before the last
        store_records(profile=profile, raw_items=[_one_session_record(3, 1, now)])
    elif later == "replay":
        store_records(profile=profile, raw_items=[history[3]])
    else:
        from telemetry.derivation import derive_session_figures
        from telemetry.session_state import write_figures

        derive_session_figures([session])  # what a repricing does after its turns
        write_figures([session])
    session.refresh_from_db()
    assert session.calls_count == before["calls_count"] + more
    assert session.turns_count == before["turns_count"] + (later == "new turn")
    assert session.cost_usd >= before["cost_usd"]
    if not more:
        assert {name: getattr(session, name) for name in figures} == before
