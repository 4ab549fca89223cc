"""`manage.py simulate` against a live server: the demo lands with the planned figures, its
transcripts, and the compactions it is there to show.

The command talks HTTP to pytest-django's `live_server` (production settings, DEBUG off; the
module's own `live_server` fixture turns off the HTTPS redirect), exactly as `make run` uses it.
There is no Celery worker here (and automatic enqueueing is off): the relief jobs the command
would enqueue for the sessions it reports over threshold are run in-process with
`relieve_session`, as the worker would run them.
"""

from __future__ import annotations

import io
import logging
import re
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from compaction.cache_report import fleet_cache
from compaction.models import (
    Archive,
    CompactionOperation,
    CompactionRun,
    LogMessage,
    OverflowEvent,
    Surface,
    SurfaceVersion,
)
from compaction.services import relieve_session
from compaction.transcripts import derive, format_of
from context_core import canonical_json
from demo.scenario import ROSTER, SessionScript, build_scenario
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession, LLMCall, Turn
from telemetry.policy_store import effective_policy
from telemetry.seeding import ensure_defaults
from telemetry.session_state import session_band

# Transactional: the live server's thread must see the data. A flush after an earlier
# transactional test removes the seeded catalogue, profiles and policies, which the scenario's
# prices, windows and cache tiers depend on; `_defaults` puts them back.
pytestmark = pytest.mark.django_db(transaction=True)

WORKER_LINE = re.compile(
    r"Left to the worker's relief jobs \(over prune_threshold\): (.*)\.$", re.M
)


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


def by_slug(scripts: tuple[SessionScript, ...]) -> dict[str, SessionScript]:
    return {s.spec.slug: s for s in scripts}


def api_get(key: str, path: str) -> Any:
    response = Client().get(path, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, (path, response.content[:300])
    return response.json()


def test_simulate_seeds_the_demo_and_shows_every_kind_of_compaction(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="compaction"):
        output = simulate(live_server)
    (line,) = WORKER_LINE.findall(output)
    worker_ids = line.split(", ")
    # The command held every session's relief claim during the traffic and released them all.
    assert not AgentSession.objects.filter(relief_requested_at__isnull=False).exists()
    assert "0 relief jobs enqueued (COMPACTION_AUTO_ENQUEUE is off)." in output
    # The worker's relief jobs (ingest enqueues them; here there is no worker).
    worker_runs = [
        relieve_session(session_id=s.pk)
        for s in AgentSession.objects.filter(external_id__in=worker_ids)
    ]

    plan = build_scenario(seed=7, now=timezone.now())
    expected = by_slug(plan.sessions)
    sessions = {
        s.external_id.rsplit("-", 1)[0]: s for s in AgentSession.objects.select_related("profile")
    }
    assert set(sessions) == set(expected) == {spec.slug for spec in ROSTER}
    assert sorted(i.rsplit("-", 1)[0] for i in worker_ids) == [
        "flaky-test-bisect",
        "incident-triage",
        "local-coder",
    ]

    # --- telemetry: the figures the scenario planned (the overflow adds one retried turn) ---
    overflow = expected["billing-refactor"].overflow
    assert overflow is not None
    assert LLMCall.objects.count() == len(plan.records) + 1
    for slug, session in sessions.items():
        script = expected[slug]
        extra = 1 if slug == "billing-refactor" else 0
        assert session.profile.name == script.spec.profile
        assert session.calls_count == len(script.records) + extra
        assert session.turns_count == len(script.turns) + extra
        if not extra:
            assert session.current_context_tokens == script.last.context_tokens
    untouched = [slug for slug, s in sessions.items() if not s.compaction_runs.exists()]
    assert sorted(untouched) == sorted(
        spec.slug for spec in ROSTER if spec.demo is None and spec.band == "ok"
    )
    for slug in untouched:
        session, script = sessions[slug], expected[slug]
        assert session.projected_tokens == script.last.projected_next
        assert session.pressure == pytest.approx(script.final_pressure)
        assert session_band(session, effective_policy(session.profile)) == script.final_band

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

    # The 1M window: past 200k tokens, priced at the long-context rates.
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

    # --- transcripts: the log holds every message, and each call names the surface it used ---
    for slug, session in sessions.items():
        script = expected[slug]
        length = script.log_length + (2 if slug == "billing-refactor" else 0)
        assert LogMessage.objects.filter(session=session).count() == length, slug
        log_before = {}
        for append in script.appends():
            if append.before is not None:
                log_before[append.before] = append.last_seq + 1
        versions = dict(
            SurfaceVersion.objects.filter(session=session).values_list("version", "log_messages")
        )
        for call in LLMCall.objects.filter(session=session):
            key = (call.turn, call.call)
            if key not in log_before:  # the retried call after the overflow
                continue
            # The surface a call names held exactly the log its request was built from.
            assert call.surface_version is not None, (slug, key)
            assert versions[call.surface_version] == log_before[key], (slug, key)
        # What is served is what the log and the operations derive, byte for byte.
        state = Surface.objects.get(session=session)
        _, _, derived = derive(session)
        assert state.body == canonical_json(derived, format=format_of(state.format)).decode()
    nul = LogMessage.objects.filter(raw__contains="\\u0000")
    assert [m.session.external_id.rsplit("-", 1)[0] for m in nul] == ["incident-triage"]
    big = LogMessage.objects.filter(chars__gt=50_000).select_related("session")
    assert big.count() >= 3
    assert all(Surface.objects.get(session=m.session).chars < 10**7 for m in big)
    assert any("chars omitted" in Surface.objects.get(session=m.session).body for m in big)

    # --- compaction: the runs the demo made, and the worker's ---
    runs = Counter(
        (r.session.external_id.rsplit("-", 1)[0], r.mode, r.status, r.archived)
        for r in CompactionRun.objects.select_related("session")
    )
    assert runs == {
        ("billing-refactor", "overflow", "applied", True): 1,
        ("monorepo-migration", "manual", "applied", True): 1,
        ("dependency-audit", "auto", "applied", False): 1,
        ("incident-triage", "auto", "applied", True): 1,
        ("flaky-test-bisect", "auto", "applied", True): 1,
        ("local-coder", "auto", "applied", True): 1,
    }
    assert all(r is not None and r.run.action == "prune" for r in worker_runs)
    (unarchived,) = CompactionRun.objects.filter(archived=False)
    assert unarchived.archive_error.startswith("ArchiveError: archive store unavailable")
    assert unarchived.archive is None and unarchived.action == "prune"
    errors = [r for r in caplog.records if r.name == "compaction" and r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "dependency-audit" in errors[0].getMessage()
    assert "WITHOUT an archive" in errors[0].getMessage()
    kinds = Counter(CompactionOperation.objects.values_list("kind", flat=True))
    assert kinds["summarize"] == 2 and kinds["prune"] == 6  # overflow and manual: forced
    for run in CompactionRun.objects.all():
        session = run.session
        assert run.tokens_after is not None and run.tokens_before is not None
        assert run.tokens_after < run.tokens_before * 0.6
        policy = effective_policy(session.profile)
        if session.external_id.startswith("billing-refactor"):
            continue  # reported again after its retry
        session.refresh_from_db()
        assert session.surface_estimate_tokens == run.estimate_tokens  # D6: fit or rule
        assert session.pressure is not None and session.pressure < policy.prune_threshold

    # The overflow: reported on the surface the rejected request used, then one retry.
    (event,) = OverflowEvent.objects.all()
    billing_session = sessions["billing-refactor"]
    overflow_run = CompactionRun.objects.get(mode="overflow")
    assert event.recovered and event.run == overflow_run
    assert event.session == billing_session
    assert event.surface_version == overflow_run.surface_version_before
    assert "exceed context limit" in event.detail
    retried = LLMCall.objects.get(session=billing_session, turn=overflow.turn)
    assert retried.surface_version == overflow_run.surface_version_after
    assert retried.context_tokens == (overflow_run.tokens_after or 0) + overflow.overhead_tokens
    billing_session.refresh_from_db()
    assert billing_session.current_context_tokens == retried.context_tokens
    assert (billing_session.pressure or 1) < 0.6

    # Archives: one per archived run, whole, listed per session and searchable.
    reader = create_agent_key(profile_name="default", name="test: read archives").plaintext
    assert Archive.objects.count() == 5
    listed = api_get(reader, f"/api/v1/sessions/{billing_session.external_id}/archives")
    assert [a["id"] for a in listed] == [overflow_run.archive_id]
    whole = api_get(reader, f"/api/v1/archives/{overflow_run.archive_id}")
    assert whole["namespace"] == f"chat-archive:default:{billing_session.external_id}"
    assert len(whole["log"]) == overflow.first_seq + 1  # the log up to the pasted log
    hits = api_get(reader, "/api/v1/archives?q=invoice rounding")
    assert billing_session.external_id in {h["session_id"] for h in hits}
    assert any("<mark>" in h["snippet"] for h in hits)
    # Non-ASCII words are found as written (the command sends UTF-8, not \\u escapes).
    in_billing = f"/api/v1/archives?q=Kaufmännisch&session_id={billing_session.external_id}"
    assert {h["session_id"] for h in api_get(reader, in_billing)} == {billing_session.external_id}

    # The keys it made, and what it said.
    made = AgentKey.objects.filter(name="simulate: demo data")
    assert sorted(k.profile.name for k in made) == ["default", "desktop", "fleet"]
    assert all(k.scopes == ["ingest", "compact"] for k in made)
    assert f"Simulated {len(ROSTER)} sessions, {len(plan.records)} calls" in output
    assert "stop: flaky-test-bisect turn 3 (100 rounds)" in output
    assert "api-docs-writer turn 3 (46 rounds)" in output
    assert "turn 6 system prompt changed" in output
    assert "Unknown price: local-coder (acme-coder-70b)" in output
    assert "duplicates, nothing changed" in output
    assert "Over prune (60%): incident-triage, flaky-test-bisect, local-coder; " in output
    assert "over summarize (80%): billing-refactor, dependency-audit." in output
    assert "1 with a NUL" in output
    assert re.search(r"overflow, agent retried +billing-refactor-\S+ +overflow +applied", output)
    assert "NOT archived: ArchiveError: archive store unavailable" in output
    assert re.search(r"manual /compact +monorepo-migration-\S+ +manual +applied", output)
    # the fleet's own traffic keeps the default profile's cache churn within D2 (the cache
    # demo's sessions, tests/db/test_cache_demo.py, show a profile that breaks it)
    assert not fleet_cache().profiles["default"].churn.violates_d2


def test_no_compaction_appends_the_transcripts_and_compacts_nothing(
    live_server: LiveServer,
) -> None:
    output = simulate(live_server, sessions=2, no_compaction=True)

    plan = by_slug(build_scenario(seed=7, now=timezone.now(), sessions=2).sessions)
    assert not CompactionRun.objects.exists() and not Archive.objects.exists()
    for session in AgentSession.objects.all():
        script = plan[session.external_id.rsplit("-", 1)[0]]
        assert LogMessage.objects.filter(session=session).count() == script.log_length
        assert session.relief_requested_at is None  # nothing was claimed
    assert not LLMCall.objects.filter(surface_version__isnull=True).exists()
    assert "Compaction" not in output and "Transcripts:" in output


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
