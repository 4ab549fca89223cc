"""The overview honours its range and profile (issue 38, case 6), each figure keeps one clock
(case 7: agent time for turns and calls, server time for our runs, a run placed by the turn the
server had received), and every door numbers a session's turns from 0."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from compaction.cache_report import fleet_cache
from compaction.imports.store import import_file
from compaction.models import CompactionRun
from compaction.services import compact_session
from console.overview import load_overview
from console.presenters.sessions import compaction_markers
from console.selectors.session import applied_compactions, first_seen
from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentProfile, AgentSession, LLMCall, Turn
from telemetry.policy_store import update_policy
from tests.db.conftest import signed_in
from tests.db.test_console_views import append, call, report
from tests.support import tool_transcript
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def key() -> AgentKey:
    seed_catalogue()
    return create_agent_key(profile_name="default").key


@pytest.fixture
def viewer() -> Client:
    return signed_in("viewer", "watcher")


def pressed(key: AgentKey, session_id: str, pressure: float, *, ago: timedelta) -> None:
    """A session at `pressure` (of 100,000 usable tokens) whose one call was made `ago`."""
    report(
        key,
        [
            {
                "session_id": session_id,
                "turn": 0,
                "model": SONNET,
                "usage": {"input_tokens": round(pressure * 100_000), "output_tokens": 0},
                "window_tokens": 116_000,
                "at": (timezone.now() - ago).isoformat(),
            }
        ],
    )


# --- case 6: the range and the profile ------------------------------------------------------


def test_sessions_by_band_now_count_the_sessions_active_in_the_range(key, viewer) -> None:
    """35 sessions ever seen, 18 active in the last hour: "1h" counts 18, "24h" the 30 seen
    that day, and the sessions list the band links to shows the same sessions."""
    for n in range(18):
        pressed(key, f"now-{n}", 0.3 if n % 3 else 0.7, ago=timedelta(minutes=5))
    for n in range(12):
        pressed(key, f"today-{n}", 0.3, ago=timedelta(hours=5))
    for n in range(5):
        pressed(key, f"old-{n}", 0.7, ago=timedelta(days=3))
    assert AgentSession.objects.count() == 35

    hour = load_overview("1h")
    assert sum(hour.bands.values()) == 18
    assert (hour.bands["ok"], hour.bands["prune"]) == (12, 6)
    day = load_overview("24h")
    assert (day.bands["ok"], day.bands["prune"]) == (24, 6)
    assert sum(load_overview("30d").bands.values()) == 35
    # the top sessions by pressure are among the active ones too
    assert {s.external_id for s, _ in hour.top_pressure} <= {f"now-{n}" for n in range(18)}
    # the per-profile table counts the same
    (line,) = [line for line in hour.lines if line.name == "default"]
    assert line.bands == hour.bands

    page = viewer.get("/", {"range": "1h"}).content.decode()
    assert "The sessions active in the last 1h" in page
    link = f"{reverse('sessions')}?band=prune&amp;seen=1h"
    assert f'href="{link}"' in page
    listed = viewer.get(reverse("sessions"), {"band": "prune", "seen": "1h"})
    assert listed.context["listing"].page.paginator.count == 6
    assert (
        viewer.get(reverse("sessions"), {"band": "prune"}).context["listing"].page.paginator.count
        == 6 + 5
    )


def test_a_profile_narrows_the_band_counts_to_its_active_sessions(key, viewer) -> None:
    other = create_agent_key(profile_name="fleet").key
    pressed(key, "mine", 0.3, ago=timedelta(minutes=10))
    pressed(other, "theirs", 0.3, ago=timedelta(minutes=10))
    pressed(other, "theirs-old", 0.3, ago=timedelta(days=2))
    found = load_overview("1h", "fleet")
    assert found.bands["ok"] == 1
    assert load_overview("7d", "fleet").bands["ok"] == 2
    assert load_overview("1h").bands["ok"] == 2


def test_band_counts_read_last_seen_from_the_index_on_postgresql(key) -> None:
    """The active-in-range test is answered by the covering index, not by the sessions' rows."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    for n in range(40):
        pressed(key, f"s-{n}", n / 40, ago=timedelta(hours=n))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_agentsession")
    with CaptureQueriesContext(connection) as queries:
        load_overview("24h")
    (sql,) = [q["sql"] for q in queries.captured_queries if "top_0" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan using session_profile_pressure" in plan, plan


def test_the_miss_premiums_follow_the_range_and_the_profile(key, viewer) -> None:
    """A miss an hour and a half ago counts in "24h" but not in "1h"; another profile's misses
    count only for the fleet; the overview's fragment asks with its range and profile."""
    other = create_agent_key(profile_name="fleet").key
    start = timezone.now() - timedelta(minutes=100)

    def missing(agent: AgentKey, session_id: str) -> None:
        # three calls 5 minutes apart; the third reads nothing: a miss at start + 10 min
        usage = {"input_tokens": 100, "cache_read_input_tokens": 20_000, "output_tokens": 50}
        cold = {"input_tokens": 20_100, "cache_read_input_tokens": 0, "output_tokens": 50}
        report(
            agent,
            [
                call(session_id, t, usage=u, at=(start + timedelta(minutes=5 * t)).isoformat())
                for t, u in enumerate([usage, usage, cold])
            ],
        )

    missing(key, "mine")
    missing(other, "theirs")
    since_day = timezone.now() - timedelta(hours=24)
    fleet_day = fleet_cache(since=since_day, bucket=timedelta(hours=1))
    assert sum(fleet_day.misses_by_cause.values()) == 2
    assert len(fleet_day.by_bucket) >= 1
    mine_day = fleet_cache(
        since=since_day, profile=AgentProfile.objects.get(name="default"), bucket=timedelta(hours=1)
    )
    assert sum(mine_day.misses_by_cause.values()) == 1
    assert sum(fleet_cache(since=timezone.now() - timedelta(hours=1)).misses_by_cause.values()) == 0

    page = viewer.get("/", {"range": "1h", "profile": "fleet"}).content.decode()
    assert f'hx-get="{reverse("cache_summary")}?range=1h&amp;tz=UTC&amp;profile=fleet"' in page
    day = viewer.get(reverse("cache_summary"), {"range": "24h"}, HTTP_HX_REQUEST="true")
    assert "in the last 24h" in day.content.decode()
    figure = json.loads(
        re.search(r'id="fig-premiums"[^>]*>(.*?)</script>', day.content.decode()).group(1)  # type: ignore[union-attr]
    )
    (bar,) = figure["data"]
    # each bar spans its hour: from its start, an hour wide
    assert (bar["offset"], bar["width"]) == (0, 3_600_000)
    hour = viewer.get(reverse("cache_summary"), {"range": "1h"}, HTTP_HX_REQUEST="true")
    assert 'id="fig-premiums"' not in hour.content.decode()


def test_the_overview_bars_span_their_bucket(viewer, key) -> None:
    pressed(key, "one", 0.3, ago=timedelta(minutes=5))
    for range_key, width in (("24h", 3_600_000), ("7d", 86_400_000)):
        page = viewer.get("/", {"range": range_key}).content.decode()
        spend = json.loads(
            re.search(r'id="fig-spend"[^>]*>(.*?)</script>', page).group(1)  # type: ignore[union-attr]
        )
        bars = [t for t in spend["data"] if t["type"] == "bar"]
        assert bars and all(b["offset"] == 0 and b["width"] == width for b in bars)
        line = next(t for t in spend["data"] if t["type"] == "scatter")
        # the line's points sit mid-bucket
        assert line["x"][0] > bars[0]["x"][0]


# --- case 7: one clock per figure -------------------------------------------------------------


def test_a_run_is_placed_by_the_turn_the_server_had_received_not_by_clocks(key) -> None:
    """The agent's clock runs two hours behind: by time, every turn ended before the run, and
    a marker placed by comparing clocks sat after the last turn reported at all. Placed by what
    the server had received, it sits after turn 1, with both times in its hover."""
    behind = timezone.now() - timedelta(hours=2)
    update_policy(profile=key.profile, values={"keep_rounds": 2, "keep_rounds_verbatim": 4})
    report(key, [call("skewed", 0, at=behind.isoformat())])
    session = AgentSession.objects.get(external_id="skewed")
    append(session, tool_transcript(8, result_chars=8_000), system="You are a build engineer.")
    report(
        key, [call("skewed", 1, at=(behind + timedelta(minutes=1)).isoformat(), surface_version=1)]
    )
    compact_session(session_id=session.pk, mode="manual", trigger="test", requested_by="test")
    report(
        key, [call("skewed", 2, at=(behind + timedelta(minutes=2)).isoformat(), surface_version=2)]
    )
    report(key, [call("skewed", 3, at=(behind + timedelta(minutes=3)).isoformat())])

    run = CompactionRun.objects.get(session=session, status=CompactionRun.Status.APPLIED)
    assert run.turn_received == 1
    (applied,) = applied_compactions(session)
    assert (applied.turn, applied.after) == (2, 1)
    assert applied.after_at == Turn.objects.get(session=session, turn=1).last_at
    (marker,) = compaction_markers([applied])
    assert marker.turn == 2
    assert "server time" in marker.hover and "agent time" in marker.hover
    assert "after turn 1" in marker.hover


def test_first_seen_and_last_seen_are_both_the_agent_s_clock(key, viewer) -> None:
    """A transcript imported today of calls made last week: first seen is last week (the
    agent's first call), not today (when the server created the row)."""
    week_ago = timezone.now() - timedelta(days=7)
    report(
        key,
        [call("late", t, at=(week_ago + timedelta(minutes=t)).isoformat()) for t in range(3)],
    )
    session = AgentSession.objects.get(external_id="late")
    assert session.created_at > week_ago + timedelta(days=6)
    found = first_seen(session)
    assert found == LLMCall.objects.get(session=session, turn=0).at
    assert session.last_seen_at is not None and session.last_seen_at - found == timedelta(minutes=2)
    page = viewer.get(reverse("session", args=[session.pk])).content.decode()
    assert f'datetime="{found.isoformat()}"' in page
    assert "agent&#x27;s clock" in page or "agent's clock" in page


# --- one turn numbering on every door -----------------------------------------------------------


def test_every_door_numbers_a_session_s_first_turn_0(make_agent, tmp_path: Path) -> None:
    """JSON records carry the agent's numbers (the docs and the client start at 0); OTLP, the
    Claude Code and the Codex imports number their turns from 0 too."""
    from tests.db.test_otlp import DONE_WHEN, TRACES, pb_span, pb_traces, post

    agent = make_agent("doors")
    profile = agent.key.profile
    # OTLP: a trace is a turn, numbered by the server
    post(agent, TRACES, pb_traces(pb_span({**DONE_WHEN, "gen_ai.conversation.id": "otlp-door"})))
    # transcript imports
    for name, text in (
        (f"proj/{fx.SESSION}.jsonl", fx.claude_code_session()),
        ("rollout-2026-11-30T11-00-00-codex.jsonl", fx.codex_rollout()),
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        with path.open("rb") as handle:
            assert import_file(profile=profile, path=str(path), handle=handle).status == "imported"
    firsts = {
        s.external_id: Turn.objects.filter(session=s).order_by("turn").first().turn  # type: ignore[union-attr]
        for s in AgentSession.objects.filter(profile=profile)
    }
    assert set(firsts.values()) == {0}, firsts
    assert {"otlp-door", fx.SESSION, fx.CODEX_SESSION} <= set(firsts)

    # the Python client's first turn
    import httpx

    from context_console.client import Console

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request expected: {request.url}")

    console = Console("http://console.invalid", "k", transport=httpx.MockTransport(refuse))
    assert console.session("client-door").new_turn() == 0


def test_the_migration_places_earlier_runs_by_the_calls_the_server_had_received(key) -> None:
    """Runs applied before `turn_received` existed get it from the calls' `received_at` (the
    server's clock, like the run's), never from the calls' `at`."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("compaction.migrations.0012_run_turn_received")
    report(key, [call("earlier", 0, at=(timezone.now() - timedelta(hours=3)).isoformat())])
    session = AgentSession.objects.get(external_id="earlier")
    append(session, tool_transcript(8, result_chars=8_000), system="You are a build engineer.")
    report(key, [call("earlier", 1, surface_version=1)])
    compact_session(session_id=session.pk, mode="manual", trigger="test", requested_by="test")
    run = CompactionRun.objects.get(session=session, status=CompactionRun.Status.APPLIED)
    report(key, [call("earlier", 2, surface_version=2)])
    # turn 2 was received after the run finished
    LLMCall.objects.filter(session=session, turn=2).update(
        received_at=run.finished_at + timedelta(seconds=1)  # type: ignore[operator]
    )
    CompactionRun.objects.filter(pk=run.pk).update(turn_received=None)
    migration.backfill(apps, None)
    run.refresh_from_db()
    assert run.turn_received == 1
