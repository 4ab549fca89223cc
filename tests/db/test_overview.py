"""The overview (home page): spend, cache, bands, compactions by origin and the top sessions,
read from the hour rollups with a constant number of queries."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from compaction.models import CompactionRun
from console.overview import RANGES, TOP_SESSIONS, Bucket, load_overview
from console.periods import preset_period
from console.selectors.policies import load_policies
from telemetry.band_sql import BANDS
from telemetry.catalogue import seed_catalogue
from telemetry.events import record_context_event
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentProfile, AgentSession
from telemetry.policy_store import update_policy
from telemetry.pressure import pressure_band
from telemetry.profiles import get_or_create_profile
from tests.db.conftest import signed_in
from tests.db.test_console_views import fragment, report, session_at_pressure

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    """Templates resolve {% static %} without a collectstatic manifest."""
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


def calls(session_id: str, n: int, *, start: datetime) -> list[dict[str, Any]]:
    return [
        {
            "session_id": session_id,
            "turn": t,
            "model": SONNET,
            "at": (start + timedelta(minutes=7 * t)).isoformat(),
            "usage": {
                "input_tokens": 500,
                "cache_creation_input_tokens": 1_000,
                "cache_read_input_tokens": 20_000,
                "output_tokens": 300,
            },
        }
        for t in range(n)
    ]


def test_bucket_starts_cover_the_range_with_empty_buckets() -> None:
    now = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
    hours = preset_period("24h", now=now).bucket_starts()
    assert len(hours) == 25 and hours[0].hour == 12 and hours[-1] == now.replace(minute=0)
    days = preset_period("7d", now=now).bucket_starts()
    assert len(days) == 8 and all(d.hour == 0 for d in days)


def test_the_overview_is_the_home_page_with_spend_bands_and_compactions(viewer, key) -> None:
    now = timezone.now()
    report(key, calls("busy", 6, start=now - timedelta(hours=2)))
    hot = session_at_pressure(key, "hot", 0.95)
    session_at_pressure(key, "calm", 0.2)
    busy = AgentSession.objects.get(external_id="busy")
    CompactionRun.objects.create(
        session=busy,
        mode="auto",
        status="applied",
        tokens_before=90_000,
        tokens_after=30_000,
        archive_error="archive down",
        finished_at=now - timedelta(minutes=30),
    )
    CompactionRun.objects.create(
        session=busy, mode="manual", status="refused", finished_at=now - timedelta(minutes=20)
    )
    record_context_event(
        busy,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="cc-1",
        at=now - timedelta(minutes=10),
        tokens_before=50_000,
        tokens_after=10_000,
    )

    response = viewer.get("/")
    assert response.status_code == 200
    page = fragment(response)
    assert "<h1>Overview</h1>" in page
    found = response.context["o"]
    assert found.calls == 6 + 2  # the two pressure sessions made a call each
    assert found.cost > 0 and found.saved > 0
    assert found.bands["compact"] == 1 and found.bands["ok"] == 2
    assert found.origin_totals == {"manual": 0, "auto": 1, "overflow": 0, "agent": 1, "provider": 0}
    assert found.freed == 60_000 + 40_000
    assert found.archive_failures == 1
    assert found.top_pressure[0][0] == hot and found.top_pressure[0][1] == "compact"
    # each band count links to the filtered sessions list
    assert f'href="{reverse("sessions")}?band=compact&amp;seen=24h"' in page
    figures = {
        name: json.loads(m)
        for name, m in re.findall(
            r'<script id="fig-(\w+)" type="application/json">(.*?)</script>', page
        )
    }
    assert set(figures) == {"spend", "hit", "compactions"}
    assert len(figures["spend"]["data"]) == 6  # five buckets stacked and the savings line


def test_the_band_counts_use_each_profiles_thresholds(viewer, key) -> None:
    update_policy(profile=key.profile, values={"prune_threshold": 0.25, "summarize_threshold": 0.3})
    session_at_pressure(key, "red-28", 0.28)
    found = load_overview("24h")
    assert found.bands["prune"] == 1
    assert found.top_pressure[0][1] == "prune"


def test_the_overview_reads_rollups_in_a_constant_number_of_queries(
    viewer, key, held_remembered_reads
) -> None:
    client = viewer
    client.get("/")
    now = timezone.now()

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/", {"range": "7d"}).status_code == 200
        assert not any("telemetry_llmcall" in q["sql"] for q in ctx.captured_queries)
        return len(ctx.captured_queries)

    report(key, calls("a", 3, start=now - timedelta(hours=3)))
    few = count()
    report(key, calls("b", 200, start=now - timedelta(days=5)))
    assert count() == few


def test_a_profile_and_a_range_narrow_the_overview(viewer, key) -> None:
    now = timezone.now()
    report(key, calls("recent", 2, start=now - timedelta(minutes=30)))
    report(key, calls("older", 2, start=now - timedelta(days=3)))
    client = viewer
    assert client.get("/", {"range": "1h"}).context["o"].calls == 2
    assert client.get("/", {"range": "7d"}).context["o"].calls == 4
    assert client.get("/", {"range": "7d", "profile": "fleet"}).context["o"].calls == 0
    refused = client.get("/", {"range": "bogus"})
    assert refused.status_code == 400 and b"<code>range</code>" in refused.content


# --- band counts and top lists against a brute force over random fleets ----------------------


def _random_fleet(rng: random.Random, sessions: int, prefix: str = "r") -> list[AgentSession]:
    """Profiles with their own thresholds (one inherits the global ones), and sessions with
    pressures on and around each threshold, over 1.0, unknown, and tied; costs tied or unknown;
    some last seen before the range."""
    update_policy(
        profile=None, values={"prune_threshold": 0.6, "summarize_threshold": rng.choice([0.8, 1])}
    )
    profiles = [get_or_create_profile(name=f"fleet-{n}") for n in range(4)]
    for profile in profiles[1:]:
        prune = rng.choice([0.05, 0.25, 0.5, 0.7, 0.9])
        summarize = rng.choice([prune, min(1.0, prune + 0.05), 1.0])
        update_policy(
            profile=profile, values={"prune_threshold": prune, "summarize_threshold": summarize}
        )
    policies = load_policies()
    marks = sorted(
        {0.0, 0.3, 1.0, 1.0001, 1.5}
        | {
            getattr(policies.of(p.pk), name)
            for p in profiles
            for name in ("prune_threshold", "summarize_threshold")
        }
    )
    now = timezone.now()
    return AgentSession.objects.bulk_create(
        AgentSession(
            profile=rng.choice(profiles),
            external_id=f"{prefix}-{n:04d}",
            pressure=rng.choice(
                [None, rng.choice(marks), rng.choice(marks), rng.uniform(0, 1.2), 0.5]
            ),
            cost_usd=rng.choice([None, Decimal("1.5"), Decimal(rng.randint(0, 900)) / 100]),
            last_seen_at=now - timedelta(hours=rng.choice([0, 2, 30, 24 * 40])),
        )
        for n in range(sessions)
    )


@pytest.mark.parametrize("seed", range(6))
def test_band_counts_and_top_lists_equal_a_brute_force_over_random_fleets(seed: int) -> None:
    rng = random.Random(seed)
    _random_fleet(rng, rng.choice([5, 40, 120]))
    policies = load_policies()
    everyone = list(AgentSession.objects.all())
    rank = {"unknown": -1, "ok": 0, "prune": 1, "compact": 2, "over": 3}

    def band(s: AgentSession) -> str:
        policy = policies.of(s.profile_id)
        return pressure_band(s.pressure, policy.prune_threshold, policy.summarize_threshold)

    now = timezone.now()
    for range_key in ("1h", "24h", "30d"):
        since = now - RANGES[range_key][0]
        for profile in [None, *AgentProfile.objects.all()]:
            found = load_overview(range_key, profile.name if profile else "", now=now)
            # "now" counts the sessions active in the range (last seen within it)
            active = [s for s in everyone if s.last_seen_at and s.last_seen_at >= since]
            mine = [s for s in active if profile is None or s.profile_id == profile.pk]
            assert found.bands == {b: sum(band(s) == b for s in mine) for b in BANDS}
            for line in found.lines:
                theirs = [s for s in active if s.profile.name == line.name]
                assert line.bands == {b: sum(band(s) == b for s in theirs) for b in BANDS}
            by_pressure = sorted(
                (s for s in mine if s.pressure is not None),
                key=lambda s: (rank[band(s)], s.pressure, s.pk),
                reverse=True,
            )[:TOP_SESSIONS]
            assert [(s.pk, b) for s, b in found.top_pressure] == [
                (s.pk, band(s)) for s in by_pressure
            ]
            by_cost = sorted(
                (
                    s
                    for s in mine
                    if s.cost_usd is not None
                    and s.last_seen_at is not None
                    and s.last_seen_at >= since
                ),
                key=lambda s: (s.cost_usd, s.pk),
                reverse=True,
            )[:TOP_SESSIONS]
            assert [s.pk for s in found.top_cost] == [s.pk for s in by_cost]
            # the page shows each top session's profile without a query of its own
            assert all(s.profile.name for s, _ in found.top_pressure)


def test_the_overview_costs_the_same_queries_for_a_few_or_many_sessions_and_profiles(
    viewer: Client, held_remembered_reads: None
) -> None:
    rng = random.Random(7)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer.get("/", {"range": "30d"}).status_code == 200
        return len(ctx.captured_queries)

    _random_fleet(rng, 10)
    viewer.get("/")
    few = count()
    for n in range(6):
        get_or_create_profile(name=f"more-{n}")
    _random_fleet(rng, 300, prefix="more")
    assert few == count()


def test_the_overview_uses_the_one_cache_hit_definition() -> None:
    """Unknown (no call reported cache fields) stays distinct from 0 % (calls reported cache but
    sent no input), as on every other page (`telemetry.pressure.hit_ratio`)."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    assert Bucket(start, start).hit is None
    assert Bucket(start, start, reported=2).hit == 0.0
    assert Bucket(start, start, read=30, denominator=120, reported=2).hit == 0.25
