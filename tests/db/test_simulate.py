"""`manage.py simulate` against a live server: the demo data lands with the planned figures.

The command talks HTTP to pytest-django's `live_server` (production settings, DEBUG off; the
suite's autouse fixture turns off the HTTPS redirect), exactly as `make run` uses it.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test.utils import override_settings
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from telemetry.ingest import session_band
from telemetry.models import AgentKey, AgentSession, LLMCall, Turn
from telemetry.policies import effective_policy
from telemetry.seeding import ensure_defaults
from telemetry.simulation import ROSTER, build_scenario

# Transactional: the live server's thread must see the data. A flush after an earlier
# transactional test removes the seeded catalogue, profiles and policies, which the scenario's
# prices, windows and cache tiers depend on; `_defaults` puts them back.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server (same helper), started with the HTTPS redirect off.

    SecurityMiddleware reads SECURE_SSL_REDIRECT once, when the server thread builds its
    handler; the suite's per-test `_plain_http` override comes after the session-scoped
    `live_server` has started, so every plain-HTTP request would get a 301 to https://.
    """
    with override_settings(SECURE_SSL_REDIRECT=False):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(autouse=True)
def _defaults(settings: Any) -> None:
    """Seeded defaults present; no relief jobs (sessions over the prune threshold would enqueue
    them on the shared broker with no worker to take them)."""
    ensure_defaults()
    settings.COMPACTION_AUTO_ENQUEUE = False


def simulate(live_server: LiveServer, **options: Any) -> str:
    out = io.StringIO()
    call_command("simulate", base_url=live_server.url, stdout=out, **options)
    return out.getvalue()


def hit(turn: Turn) -> float:
    return turn.cache_read_reported / turn.cache_denominator


def test_simulate_seeds_the_planned_fleet_through_the_api(live_server: LiveServer) -> None:
    started = time.monotonic()
    output = simulate(live_server)
    elapsed = time.monotonic() - started

    plan = build_scenario(seed=7, now=timezone.now())
    expected = {s.spec.slug: s for s in plan.sessions}
    sessions = {
        s.external_id.rsplit("-", 1)[0]: s for s in AgentSession.objects.select_related("profile")
    }
    assert set(sessions) == set(expected) == {spec.slug for spec in ROSTER}
    assert LLMCall.objects.count() == len(plan.records)
    for slug, session in sessions.items():
        script = expected[slug]
        assert session.profile.name == script.spec.profile
        assert session.calls_count == len(script.records)
        assert session.turns_count == len(script.turns)
        assert session.current_context_tokens == script.last.context_tokens
        assert session.projected_tokens == script.last.projected_next
        assert session.pressure == pytest.approx(script.final_pressure)
        assert session_band(session, effective_policy(session.profile)) == script.final_band
    assert elapsed < 60, f"simulate took {elapsed:.1f} s"

    # Pressure: sessions in the prune and the summarize bands.
    bands = {slug: session_band(s, effective_policy(s.profile)) for slug, s in sessions.items()}
    assert sorted(slug for slug, b in bands.items() if b == "prune") == [
        "flaky-test-bisect",
        "incident-triage",
        "local-coder",
    ]
    assert sorted(slug for slug, b in bands.items() if b == "compact") == [
        "billing-refactor",
        "dependency-audit",
    ]

    # Cache: the system-prompt change and the idle gap past the 5-minute TTL each cost a rewrite.
    billing = {t.turn: t for t in Turn.objects.filter(session=sessions["billing-refactor"])}
    assert hit(billing[6]) < 0.6 < 0.9 < hit(billing[5])
    assert billing[6].cache_write_5m > 5 * billing[5].cache_write_5m
    assert hit(billing[4]) < hit(billing[3])
    assert billing[9].cache_write_1h == 0
    # Fleet and desktop write the 1-hour tier (Bedrock by the profile's tier: no split reported).
    for slug in ("incident-triage", "dependency-audit", "monorepo-migration", "desktop-notes"):
        calls = LLMCall.objects.filter(session=sessions[slug])
        assert all(c.cache_write_5m == 0 for c in calls), slug
        assert sum(c.cache_write_1h for c in calls) > 0, slug
    assert 0.85 <= (sessions["incident-triage"].cache_hit_ratio or 0) <= 0.99

    # The self-hosted model: no price, no cache report, but a window, so a pressure.
    local = sessions["local-coder"]
    assert local.cost_usd is None and local.unpriced_calls == local.calls_count
    assert local.cache_hit_ratio is None and local.window_tokens == 131_072
    assert all(s.cost_usd is not None for slug, s in sessions.items() if slug != "local-coder")

    # The 1M window: past 200k tokens at 27% pressure, priced at the long-context rates.
    migration = sessions["monorepo-migration"]
    assert migration.window_tokens == 1_000_000
    assert (migration.peak_context_tokens or 0) > 200_000
    assert LLMCall.objects.filter(session=migration, long_context=True).exists()

    # OpenAI: cached tokens, and gpt-5's reasoning kept apart from the reply.
    gpt5 = LLMCall.objects.filter(session=sessions["api-docs-writer"])
    assert all((c.reasoning_output or 0) > 0 for c in gpt5)
    assert {c.provider for c in LLMCall.objects.filter(session=sessions["ci-log-summarizer"])} == {
        "otel"
    }

    # Rounds: the nudge past round_soft_limit and the stop at round_hard_cap.
    assert sessions["flaky-test-bisect"].max_turn_rounds == 100
    assert Turn.objects.get(session=sessions["flaky-test-bisect"], turn=3).calls == 100
    assert sessions["api-docs-writer"].max_turn_rounds == 46

    # The keys it made, and what it said.
    keys = AgentKey.objects.filter(name="simulate: demo data")
    assert sorted(k.profile.name for k in keys) == ["default", "desktop", "fleet"]
    assert all(k.scopes == ["ingest", "compact"] for k in keys)
    assert f"Simulated {len(ROSTER)} sessions, {len(plan.records)} calls" in output
    assert "stop: flaky-test-bisect turn 3 (100 rounds)" in output
    assert "api-docs-writer turn 3 (46 rounds)" in output
    assert "turn 6 system prompt changed" in output
    assert "Unknown price: local-coder (acme-coder-70b)" in output
    assert "duplicates, nothing changed" in output


def test_a_second_run_adds_new_sessions_instead_of_colliding(live_server: LiveServer) -> None:
    simulate(live_server, sessions=2, quiet=True)
    output = simulate(live_server, sessions=2, seed=11)

    assert AgentSession.objects.count() == 4
    assert AgentKey.objects.filter(name="simulate: demo data").count() == 6
    assert "Simulated 2 sessions" in output


def test_quiet_prints_nothing(live_server: LiveServer) -> None:
    assert simulate(live_server, sessions=1, quiet=True) == ""
    assert AgentSession.objects.count() == 1


def test_an_unexpected_answer_fails_loudly(live_server: LiveServer) -> None:
    with pytest.raises(CommandError, match=r"/not-the-console/api/v1/policy answered 404"):
        call_command(
            "simulate", base_url=live_server.url + "/not-the-console/", stdout=io.StringIO()
        )
    assert not AgentSession.objects.exists()


def test_an_unreachable_server_fails_loudly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = io.StringIO()
    with pytest.raises(CommandError, match="cannot reach http://127.0.0.1"):
        call_command("simulate", base_url=f"http://127.0.0.1:{port}/", stdout=out)


def test_sessions_must_be_positive(live_server: LiveServer) -> None:
    with pytest.raises(CommandError, match="at least 1"):
        simulate(live_server, sessions=0)
