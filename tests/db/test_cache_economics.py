"""Cache economics on the real database (issue 13): misses with causes and premiums from
ingested records, the compaction plan before and its measured outcome after, and the worth-it
rule's skips in /metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from compaction import services
from compaction.cache_report import compaction_outcomes, session_misses
from compaction.models import CompactionRun
from context_core import CacheRates, pass_economics
from telemetry.events import record_context_event
from telemetry.models import AgentSession
from tests.db.conftest import signed_in
from tests.support import append_body

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SONNET = "claude-sonnet-4-5"
HAIKU = "claude-haiku-4-5"


def record(
    turn: int, minutes: float, *, model: str = SONNET, read: int = 0, write: int = 0, **extra: Any
) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "turn": turn,
        "model": model,
        "at": (T0 + timedelta(minutes=minutes)).isoformat(),
        "usage": {
            "input_tokens": 100,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 200,
        },
        **extra,
    }


def prefix(system: str, messages: int) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = [
        {"kind": "tools", "hash": "tools-v1", "tokens": 3_000},
        {"kind": "system", "hash": f"sys-{hash(system)}", "tokens": 1_000, "text": system},
    ]
    segments += [{"kind": "message", "hash": f"m{i}", "tokens": 10_000} for i in range(messages)]
    return segments


def ingest(agent, *records: dict[str, Any]) -> None:
    response = agent.post("/api/v1/telemetry", {"records": list(records)})
    assert response.status_code in (200, 201), response.content
    assert all(item["status"] == "created" for item in response.json()["items"]), response.json()


def test_known_causes_are_classified_with_evidence_and_premium(agent):
    ingest(
        agent,
        record(0, 0, write=50_000),
        record(1, 1, read=50_000, write=2_000),  # warm: no miss
        record(2, 2, model=HAIKU, write=52_000),  # model switch
        record(3, 3, model=HAIKU, read=52_000, write=1_000, prefix=prefix("Now: 09:03", 4)),
        record(4, 30, model=HAIKU, write=53_000, prefix=prefix("Now: 09:03", 4)),  # expiry
        record(5, 31, model=HAIKU, read=4_000, write=50_000, prefix=prefix("Now: 09:31", 5)),
        record(6, 32, model=HAIKU, write=55_000, prefix=prefix("Now: 09:31", 5)),  # eviction
    )
    response = agent.get("/api/v1/sessions/s1/cache/misses")
    assert response.status_code == 200
    body = response.json()
    causes = [(m["turn"], m["cause"]) for m in body["misses"]]
    assert causes == [(2, "model_switch"), (4, "expiry"), (5, "prefix_break"), (6, "unexplained")]
    expiry = body["misses"][1]
    assert expiry["detail"] == {"gap_seconds": 27 * 60, "tier": "5m"}
    assert "27m 00s" in expiry["evidence"]
    # Haiku 4.5: 53,000 missed x ($1.25 - $0.10) / 1e6
    assert expiry["premium_usd"] == "0.060950000"
    broken = body["misses"][2]
    assert broken["detail"]["segment"] == "system"
    assert broken["detail"]["diff"] == ["-Now: 09:03", "+Now: 09:31"]
    assert "(D2)" in broken["evidence"]
    assert all(m["premium_usd"] is not None for m in body["misses"])
    total = sum(Decimal(m["premium_usd"]) for m in body["misses"])
    assert Decimal(body["premium_usd"]) == total


def test_an_agent_compaction_event_explains_the_next_miss(agent):
    ingest(agent, record(0, 0, write=50_000), record(1, 2, write=20_000))
    session = AgentSession.objects.get(external_id="s1")
    record_context_event(
        session,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="line-7",
        at=T0 + timedelta(minutes=1),
        trigger="auto",
        tokens_before=50_000,
        tokens_after=20_000,
    )
    (miss,) = session_misses(session).misses
    assert miss.cause == "agent_compaction" and "claude-code" in miss.evidence


def test_misses_of_another_profile_are_not_found(agent, outsider):
    ingest(agent, record(0, 0, write=50_000))
    assert outsider.get("/api/v1/sessions/s1/cache/misses").status_code == 404


def test_bad_prefix_is_refused_naming_the_field(agent):
    bad = record(
        0,
        0,
        prefix=[
            {"kind": "message", "hash": "a", "tokens": 1},
            {"kind": "system", "hash": "b", "tokens": 1},
        ],
    )
    response = agent.post("/api/v1/telemetry", bad)
    assert response.status_code == 422
    (item,) = response.json()["items"]
    assert item["field"] == "prefix" and "out of order" in item["detail"]


def test_plan_before_and_measured_outcome_after_a_compaction(compactor):
    response = compactor.post("/api/v1/sessions/s1/messages", append_body(12))
    assert response.status_code == 201
    version = response.json()["surface_version"]
    ingest(compactor, record(0, 0, write=80_000, surface_version=version))
    plan = compactor.get("/api/v1/sessions/s1/compact/plan").json()
    assert plan["action"] != "nothing" and plan["priced"] and plan["write_tier"] == "5m"
    assert plan["first_change"]["unchanged_tokens"] == plan["tokens_after"] - plan["rewrite_tokens"]
    # the same figures by hand: Sonnet 4.5, 5-minute writes
    rates = CacheRates(input=Decimal(3), read=Decimal("0.30"), write=Decimal("3.75"))
    expected = pass_economics(
        freed_tokens=plan["freed_tokens"],
        rewrite_tokens=plan["rewrite_tokens"],
        rates=rates,
        remaining_calls=plan["remaining_calls"],
    )
    assert Decimal(plan["rewrite_premium_usd"]) == expected.rewrite_premium_usd.quantize(
        Decimal("0.000000001")
    )
    assert plan["break_even_calls"] == expected.break_even_calls
    assert compactor.get("/api/v1/sessions/s1/compact/plan?mode=bogus").status_code == 422

    applied = compactor.post("/api/v1/sessions/s1/compact").json()
    run = CompactionRun.objects.get(pk=applied["run_id"])
    assert run.rewrite_tokens == plan["rewrite_tokens"]
    new_version = applied["surface_version"]
    ingest(
        compactor,
        record(1, 1, read=2_000, write=run.rewrite_tokens + 500, surface_version=new_version),
        record(2, 2, read=run.rewrite_tokens + 2_500, write=300, surface_version=new_version),
        record(3, 3, read=run.rewrite_tokens + 2_800, write=300, surface_version=new_version),
    )
    session = AgentSession.objects.get(external_id="s1")
    (outcome,) = compaction_outcomes(session)
    assert outcome.predicted_rewrite_tokens == plan["rewrite_tokens"]
    assert outcome.measured_rewrite_tokens == run.rewrite_tokens + 500
    assert outcome.later_calls == 2 and outcome.net_saving_usd is not None
    misses = session_misses(session).misses
    assert [m.cause for m in misses] == ["our_compaction"]
    assert f"run {run.pk}" in misses[0].evidence

    served = compactor.get(f"/api/v1/sessions/s1/surface?prefix=true&version={version}").json()
    assert served["surface_version"] == version
    assert [s["name"] for s in served["prefix"][:3]] == ["system", "message 0", "message 1"]


def test_auto_relief_defers_a_plan_that_cannot_pay_back_and_metrics_count_it(compactor, client):
    compactor.post("/api/v1/sessions/s1/messages", append_body(12))
    session = AgentSession.objects.get(external_id="s1")
    # one call so far: the session is expected to make about one more, far short of break-even
    AgentSession.objects.filter(pk=session.pk).update(
        model=SONNET,
        calls_count=1,
        window_tokens=200_000,
        projected_tokens=130_000,
        pressure=0.71,
    )
    outcome = services.relieve_session(session_id=session.pk)
    assert outcome is not None and outcome.run.status == "noop"
    # the whole plan (prune, then a summary to reach the target) is one re-write, judged once
    assert outcome.run.skipped == ["prune", "summarize"]
    assert "not worth it yet" in outcome.run.reason
    metrics = client.get("/metrics").content.decode()
    assert 'compaction_relief_skipped_total{pass="prune"} 1.0' in metrics
    assert 'compaction_relief_skipped_total{pass="summarize"} 1.0' in metrics


# --- the console --------------------------------------------------------------------------------


@pytest.fixture
def viewer(db, settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    return signed_in("viewer", "viewer")


@pytest.fixture
def admin_client_(db, settings, viewer):
    return signed_in("superuser", "root")


def test_the_session_page_loads_the_misses_table_with_causes_and_the_d2_flag(agent, viewer):
    ingest(
        agent,
        # the system block carries the clock: every call re-writes all but the tools
        *[
            record(t, t, read=3_000 if t else 0, write=50_000, prefix=prefix(f"Now: 09:0{t}", 2))
            for t in range(5)
        ],
        record(5, 40, write=60_000),
    )
    session = AgentSession.objects.get(external_id="s1")
    page = viewer.get(f"/sessions/{session.pk}/").content.decode()
    assert f'hx-get="/sessions/{session.pk}/cache"' in page
    assert f'href="/sessions/{session.pk}/cache"' in page
    fragment = viewer.get(f"/sessions/{session.pk}/cache", headers={"HX-Request": "true"})
    html = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in html
    assert "Cache misses" in html and "prefix changed" in html and "cache expired" in html
    assert "-Now: 09:00" in html and "+Now: 09:01" in html
    assert "D2: the system segment changed on" in html
    assert 'id="fig-misses"' in html
    full = viewer.get(f"/sessions/{session.pk}/cache").content.decode()
    assert "<html" in full and "Back to the session" in full


def test_the_compact_panel_shows_the_plan_and_the_measured_outcome(compactor, viewer):
    response = compactor.post("/api/v1/sessions/s1/messages", append_body(12))
    version = response.json()["surface_version"]
    ingest(compactor, record(0, 0, write=80_000, surface_version=version))
    applied = compactor.post("/api/v1/sessions/s1/compact").json()
    ingest(compactor, record(1, 1, write=40_000, surface_version=applied["surface_version"]))
    session = AgentSession.objects.get(external_id="s1")
    html = viewer.get(
        f"/sessions/{session.pk}/plan", headers={"HX-Request": "true"}
    ).content.decode()
    assert "What compacting now would cost" in html and "Calls to break even" in html
    assert "Compactions: predicted and measured" in html and "40,000" in html
    assert "$3 " not in html and "input $3.000000" in html


def test_the_fleet_page_shows_premiums_by_cause_top_sessions_and_ttl_advice(
    agent, viewer, admin_client_
):
    from django.utils import timezone

    now = timezone.now() - timedelta(hours=2)
    base = {"at": now.isoformat()}
    ingest(
        agent,
        record(0, 0, write=50_000) | base,
        record(1, 0, read=0, write=52_000) | {"at": (now + timedelta(minutes=23)).isoformat()},
    )
    html = viewer.get("/cache/").content.decode()
    assert "Cache economics" in html and "cache expired" in html
    assert "Top offending sessions" in html and ">s1<" in html
    assert "1 of 1 expiry misses followed gaps under an hour" in html
    ttl = admin_client_.get("/cache/ttl", headers={"HX-Request": "true"}).content.decode()
    assert "Measured expiry misses" in ttl and "23.0 min" in ttl
    assert 'hx-get="/cache/ttl"' in admin_client_.get("/policy/").content.decode()


def test_the_overview_loads_the_fleet_miss_premiums(agent, viewer):
    from django.utils import timezone

    now = timezone.now() - timedelta(hours=1)
    ingest(
        agent,
        record(0, 0, write=50_000) | {"at": now.isoformat()},
        record(1, 0, model=HAIKU, write=52_000) | {"at": (now + timedelta(minutes=1)).isoformat()},
    )
    assert 'hx-get="/cache/summary?range=24h&amp;tz=UTC"' in viewer.get("/").content.decode()
    html = viewer.get("/cache/summary", headers={"HX-Request": "true"}).content.decode()
    assert "Cache miss premiums by cause" in html and "model switched" in html and ">s1<" in html


def test_compact_now_asks_the_panel_economics_to_reload(compactor, admin_client_):
    compactor.post("/api/v1/sessions/s1/messages", append_body(6))
    session = AgentSession.objects.get(external_id="s1")
    response = admin_client_.post(f"/sessions/{session.pk}/compact", headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Trigger"] == "compacted"
    plan = admin_client_.get(f"/sessions/{session.pk}/plan", headers={"HX-Request": "true"})
    assert 'hx-trigger="compacted from:body, session-changed from:body"' in plan.content.decode()


def test_the_fleet_report_reads_a_bounded_number_of_calls(agent, monkeypatch):
    from django.utils import timezone

    from compaction import cache_report

    now = timezone.now() - timedelta(hours=1)
    for name in ("a", "b"):
        ingest(
            agent,
            *[
                record(t, 0, write=1_000)
                | {"session_id": name, "at": (now + timedelta(minutes=t)).isoformat()}
                for t in range(3)
            ],
        )
    monkeypatch.setattr(cache_report, "MAX_FLEET_CALLS", 4)
    report = cache_report.fleet_cache()
    assert report.sessions == 1 and report.truncated
