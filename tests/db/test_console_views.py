"""The operator console through the Django test client: every page and partial for every role,
the forbidden cases, CSRF on unsafe actions, the write paths, 304 polling and query counts.

Sessions are made through the real ingest service with real keys, so every figure is derived.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from compaction.archives import archive_document
from compaction.errors import CompactionRefused
from compaction.models import Archive, CompactionOperation, CompactionRun, LogMessage, Surface
from compaction.rawjson import Span
from compaction.services import compact_session, report_overflow
from compaction.transcripts import append_messages
from console.presenters.search import safe_snippet
from console.roles import Role, role_of
from telemetry.catalogue import load_catalogue, save_price, seed_catalogue
from telemetry.errors import FieldError
from telemetry.ingest.pipeline import ingest_records
from telemetry.keys import create_agent_key, find_active_key
from telemetry.models import AgentKey, AgentProfile, AgentSession, CatalogueModel
from telemetry.policy_store import effective_policy, update_policy
from tests.db.conftest import PASSWORD, make_user
from tests.support import tool_transcript

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    """Templates resolve {% static %} without a collectstatic manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


# --- people and data ---------------------------------------------------------------------------


def call(session_id: str, turn: int, **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "session_id": session_id,
        "turn": turn,
        "model": SONNET,
        "usage": {
            "input_tokens": 500,
            "cache_creation_input_tokens": 2_000,
            "cache_read_input_tokens": 20_000 + 2_000 * turn,
            "output_tokens": 400,
        },
        "appended_chars": 2_000,
    }
    record.update(overrides)
    return record


def report(key: AgentKey, records: list[dict[str, Any]]) -> None:
    for start in range(0, len(records), 1000):
        ingest_records(key=key, raw_items=records[start : start + 1000], batch=True)


def make_session(key: AgentKey, session_id: str, turns: int = 3, **overrides: Any) -> AgentSession:
    report(key, [call(session_id, t, **overrides) for t in range(turns)])
    return AgentSession.objects.get(profile=key.profile, external_id=session_id)


def session_at_pressure(
    key: AgentKey, session_id: str, pressure: float, *, rounds: int = 1
) -> AgentSession:
    """A session whose pressure is exactly `pressure`: window 116,000 − 16,000 reserved leaves
    100,000 usable, and a call of N input tokens with no output projects N."""
    tokens = round(pressure * 100_000)
    usage = {"input_tokens": tokens, "output_tokens": 0}
    records = [
        {
            "session_id": session_id,
            "turn": 0,
            "call": c,
            "model": SONNET,
            "usage": usage,
            "window_tokens": 116_000,
        }
        for c in range(rounds)
    ]
    report(key, records)
    return AgentSession.objects.get(profile=key.profile, external_id=session_id)


@pytest.fixture
def key() -> AgentKey:
    seed_catalogue()
    return create_agent_key(profile_name="default").key


@pytest.fixture
def session(key: AgentKey) -> AgentSession:
    return make_session(key, "chat-1", turns=4)


def fragment(response: Any) -> str:
    return str(response.content.decode())


# --- roles -------------------------------------------------------------------------------------


def test_role_groups_exist_after_migrate() -> None:
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "operator", "admin"}


def test_a_superuser_is_an_admin_and_the_highest_group_wins() -> None:
    assert role_of(make_user("root", "superuser")) is Role.ADMIN
    both = make_user("both", "viewer")
    both.groups.add(Group.objects.get(name="operator"))
    assert role_of(User.objects.get(pk=both.pk)) is Role.OPERATOR
    assert role_of(make_user("nobody", None)) is None
    inactive = make_user("gone", "admin")
    inactive.is_active = False
    assert role_of(inactive) is None


# Every page and partial: (the least role that may see it, its URL)
def _pages(session: AgentSession) -> list[tuple[str, str]]:
    pk = session.pk
    return [
        ("viewer", reverse("sessions")),
        ("viewer", reverse("session", args=[pk])),
        ("viewer", reverse("session_live", args=[pk])),
        ("viewer", reverse("session", args=[pk]) + "?turns_page=1"),
        ("admin", reverse("policy")),
        ("admin", reverse("policy_global")),
        ("admin", reverse("policy_profile", args=["default"])),
        ("admin", reverse("catalogue")),
        ("admin", reverse("catalogue_new")),
        ("admin", reverse("catalogue_edit", args=[CatalogueModel.objects.first().pk])),  # type: ignore[union-attr]
        ("admin", reverse("keys")),
    ]


RANK = {"viewer": 1, "operator": 2, "admin": 3, "superuser": 3}


def test_anonymous_visitors_are_sent_to_sign_in_from_every_page(client: Client, session) -> None:
    for _, url in _pages(session):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_an_expired_sign_in_moves_a_polling_page_to_the_login_form(client: Client, session) -> None:
    response = client.get(
        reverse("session_live", args=[session.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith(reverse("login") + "?next=")
    assert response.content == b""


def test_anonymous_unsafe_actions_are_refused_and_change_nothing(client: Client, key) -> None:
    for url in (
        reverse("policy_global"),
        reverse("profile_create"),
        reverse("keys"),
        reverse("key_revoke", args=[key.pk]),
    ):
        assert client.post(url, {"name": "x"}).status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is None
    assert not AgentProfile.objects.filter(name="x").exists()


@pytest.mark.parametrize("role", [None, "viewer", "operator", "admin", "superuser"])
def test_every_page_answers_by_role(client_as, session, role) -> None:
    client = client_as(role)
    for needed, url in _pages(session):
        response = client.get(url)
        allowed = role is not None and RANK[role] >= RANK[needed]
        assert response.status_code == (200 if allowed else 403), (role, url)
        if not allowed:
            assert "Not allowed" in fragment(response)


@pytest.mark.parametrize("role", [None, "viewer", "operator"])
def test_non_admins_cannot_write_policy_keys_profiles_or_prices(client_as, key, role) -> None:
    client = client_as(role)
    row = CatalogueModel.objects.get(model="claude-sonnet-4-5")
    before = effective_policy(key.profile)
    responses = [
        client.post(reverse("policy_global"), {"keep_rounds": 9}),
        client.post(reverse("policy_profile", args=["default"]), {"keep_rounds": 9}),
        client.post(reverse("profile_create"), {"name": "sneaky"}),
        client.post(reverse("keys"), {"profile": "default", "name": "sneaky"}),
        client.post(reverse("key_revoke", args=[key.pk])),
        client.post(reverse("catalogue_edit", args=[row.pk]), {"input": "0"}),
    ]
    assert [r.status_code for r in responses] == [403] * len(responses)
    key.refresh_from_db()
    assert key.revoked_at is None
    assert effective_policy(key.profile) == before
    assert not AgentProfile.objects.filter(name="sneaky").exists()
    assert AgentKey.objects.count() == 1
    row.refresh_from_db()
    assert row.input == Decimal("3")


def test_sign_in_page_and_sign_in(client: Client) -> None:
    make_user("ops", "operator")
    page = client.get(reverse("login"))
    assert page.status_code == 200 and 'name="password"' in fragment(page)
    response = client.post(reverse("login"), {"username": "ops", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("sessions")).status_code == 200


def test_sign_out_is_a_post(client_as) -> None:
    client = client_as("viewer")
    assert client.get(reverse("logout")).status_code == 405
    assert client.post(reverse("logout")).status_code == 302
    assert client.get(reverse("sessions")).status_code == 302


# --- CSRF ----------------------------------------------------------------------------------------


def _csrf_token(client: Client, url: str) -> str:
    page = fragment(client.get(url))
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_unsafe_admin_actions_need_the_csrf_token(client_as, key) -> None:
    client = client_as("admin", enforce_csrf=True)
    without = [
        client.post(reverse("policy_global"), {"keep_rounds": 9}),
        client.post(reverse("keys"), {"profile": "default"}),
        client.post(reverse("key_revoke", args=[key.pk])),
        client.post(reverse("profile_create"), {"name": "p2"}),
        client.post(reverse("logout")),
    ]
    assert [r.status_code for r in without] == [403] * len(without)
    key.refresh_from_db()
    assert key.revoked_at is None
    token = _csrf_token(client, reverse("keys"))
    response = client.post(reverse("key_revoke", args=[key.pk]), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_htmx_requests_carry_the_csrf_token_from_the_body_header(client_as, session) -> None:
    client = client_as("viewer", enforce_csrf=True)
    page = fragment(client.get(reverse("sessions")))
    found = re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'>", page)
    assert found is not None
    response = client.post(reverse("logout"), headers={"X-CSRFToken": found.group(1)})
    assert response.status_code == 302


# --- sessions list -------------------------------------------------------------------------------


def _row(page: str, label: str) -> str:
    """The table row whose first link reads `label`."""
    start = page.index(f">{label}</a>")
    return page[start : page.index("</tr>", start)]


def _ids(response: Any) -> list[str]:
    return re.findall(r'class="mono">([^<]+)</a>', fragment(response))


def test_the_list_shows_each_sessions_figures(client_as, session) -> None:
    page = fragment(client_as("viewer").get(reverse("sessions")))
    assert "chat-1" in page
    assert f"{session.pressure * 100:.0f} %" in page
    assert "band-ok" in page
    assert SONNET in page
    assert reverse("session", args=[session.pk]) in page


def test_pressure_badges_follow_each_profiles_thresholds(client_as, key) -> None:
    fleet = create_agent_key(profile_name="fleet").key
    update_policy(
        profile=fleet.profile, values={"prune_threshold": 0.3, "summarize_threshold": 0.5}
    )
    session_at_pressure(key, "d-ok", 0.40)
    session_at_pressure(fleet, "f-compact", 0.55)
    session_at_pressure(key, "d-prune", 0.65)
    session_at_pressure(key, "d-over", 1.2)
    make_session(key, "d-unknown", model="mystery-model-9")
    client = client_as("viewer")
    expected = {
        "ok": ["d-ok"],
        "prune": ["d-prune"],
        "compact": ["f-compact"],
        "over": ["d-over"],
        "unknown": ["d-unknown"],
    }
    for band, ids in expected.items():
        response = client.get(reverse("sessions"), {"band": band})
        assert _ids(response) == ids, band
        assert f"band-{band}" in fragment(response)
    assert ">unknown</span>" in fragment(client.get(reverse("sessions"), {"band": "unknown"}))


def test_sessions_past_the_round_limits_are_flagged(client_as, key) -> None:
    update_policy(profile=None, values={"round_soft_limit": 3, "round_hard_cap": 5})
    session_at_pressure(key, "calm", 0.1, rounds=2)
    session_at_pressure(key, "nudged", 0.1, rounds=3)
    session_at_pressure(key, "capped", 0.1, rounds=5)
    page = fragment(client_as("viewer").get(reverse("sessions")))
    assert "soft limit" not in _row(page, "calm") and "hard cap" not in _row(page, "calm")
    assert "soft limit</span>" in _row(page, "nudged")
    assert "hard cap</span>" in _row(page, "capped")


def test_filter_search_sort_and_paginate(client_as, key) -> None:
    other = create_agent_key(profile_name="fleet").key
    for i in range(30):
        session_at_pressure(key if i % 2 else other, f"s-{i:02d}", 0.01 * (i + 1))
    client = client_as("viewer")
    assert _ids(client.get(reverse("sessions"), {"q": "s-1"})) == [
        f"s-{i}" for i in range(19, 9, -1)
    ]
    fleet_only = _ids(client.get(reverse("sessions"), {"profile": "fleet", "sort": "session"}))
    assert fleet_only == [f"s-{i:02d}" for i in range(0, 30, 2)]
    by_pressure = _ids(client.get(reverse("sessions"), {"sort": "-pressure"}))
    assert by_pressure[:3] == ["s-29", "s-28", "s-27"]
    ascending = _ids(client.get(reverse("sessions"), {"sort": "pressure"}))
    assert ascending[:2] == ["s-00", "s-01"]
    page2 = client.get(reverse("sessions"), {"sort": "pressure", "page": 2})
    assert _ids(page2) == [f"s-{i:02d}" for i in range(25, 30)]
    assert "page 2 of 2" in fragment(page2)
    assert _ids(client.get(reverse("sessions"), {"model": "nope"})) == []
    assert len(_ids(client.get(reverse("sessions"), {"sort": "garbage", "page": "x"}))) == 25


def test_active_in_the_last_hour_filter(client_as, key) -> None:
    old = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    make_session(key, "stale", turns=1, at=old)
    make_session(key, "fresh", turns=1)
    assert _ids(client_as("viewer").get(reverse("sessions"), {"active": "on"})) == ["fresh"]


def test_the_table_fragment_for_htmx_and_304_when_nothing_changed(client_as, key) -> None:
    make_session(key, "a", turns=1)
    client = client_as("viewer")
    response = client.get(reverse("sessions"), headers={"HX-Request": "true"})
    assert response.status_code == 200
    body = fragment(response)
    assert "<html" not in body and 'id="sessions"' in body and 'hx-trigger="every 10s"' in body
    etag = response["ETag"]
    assert f'"If-None-Match": "\\"{etag.strip(chr(34))}\\""' in body
    again = client.get(reverse("sessions"), headers={"HX-Request": "true", "If-None-Match": etag})
    assert again.status_code == 304
    make_session(key, "b", turns=1)
    changed = client.get(reverse("sessions"), headers={"HX-Request": "true", "If-None-Match": etag})
    assert changed.status_code == 200 and "b" in _ids(changed)


def test_the_list_costs_the_same_queries_for_3_or_30_sessions(
    client_as, key, held_remembered_reads
) -> None:
    client = client_as("viewer")

    def count() -> int:
        client.get(reverse("sessions"))  # warm the session/user caches alike
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("sessions")).status_code == 200
        return len(queries)

    for i in range(3):
        session_at_pressure(key, f"few-{i}", 0.2)
    few = count()
    fleet = create_agent_key(profile_name="fleet").key
    for i in range(27):
        session_at_pressure(fleet if i % 2 else key, f"many-{i}", 0.5)
    assert count() == few


# --- the session page --------------------------------------------------------------------------


def _figure(page: str, name: str) -> dict[str, Any]:
    found = re.search(
        rf'<script id="fig-{name}" type="application/json">(.*?)</script>', page, re.S
    )
    assert found is not None, name
    result: dict[str, Any] = json.loads(found.group(1))
    return result


def test_the_session_page_draws_its_charts_from_the_turns(client_as, session) -> None:
    page = fragment(client_as("viewer").get(reverse("session", args=[session.pk])))
    pressure = _figure(page, "pressure")
    assert pressure["data"][0]["x"] == [0, 1, 2, 3]
    assert pressure["data"][0]["y"] == [22_500 + 2_000 * t for t in range(4)]
    assert pressure["data"][1]["y"] == [session.projected_tokens]
    assert len(pressure["layout"]["shapes"]) == 3  # usable window, summarize, prune
    cache = _figure(page, "cache")
    assert [t["name"] for t in cache["data"]] == [
        "5m cache writes",
        "1h cache writes",
        "cache hit %",
    ]
    cost = _figure(page, "cost")
    assert [t["name"] for t in cost["data"]] == [
        "uncached input",
        "cache read",
        "5m cache write",
        "1h cache write",
        "output",
    ]
    total = sum(sum(t["y"]) for t in cost["data"])
    assert total == pytest.approx(float(session.cost_usd or 0), rel=1e-5)
    gauge = _figure(page, "gauge")
    assert gauge["data"][0]["value"] == session.projected_tokens


def test_the_session_page_shows_what_the_cache_saved(client_as, session) -> None:
    page = fragment(client_as("viewer").get(reverse("session", args=[session.pk])))
    assert session.no_cache_cost_usd is not None and session.cost_usd is not None
    saved = session.no_cache_cost_usd - session.cost_usd
    assert saved > 0
    assert f"the cache saved ${saved.quantize(Decimal('0.0001'))}" in page


def test_a_cache_that_costs_more_than_no_cache_says_so(client_as, key) -> None:
    # every call writes its whole prefix and never reads it back: 1.25× the input price
    writes = {
        "input_tokens": 100,
        "cache_creation_input_tokens": 50_000,
        "cache_read_input_tokens": 0,
        "output_tokens": 10,
    }
    session = make_session(key, "cold", turns=2, usage=writes)
    page = fragment(client_as("viewer").get(reverse("session", args=[session.pk])))
    assert "the cache cost $" in page and "more than no caching" in page


def test_a_session_without_a_known_window_has_no_gauge_and_an_unknown_badge(client_as, key) -> None:
    session = make_session(key, "mystery", turns=2, model="mystery-model-9")
    page = fragment(client_as("viewer").get(reverse("session", args=[session.pk])))
    assert "window is unknown" in page
    assert 'id="fig-gauge"' not in page
    assert "band-unknown" in page
    assert _figure(page, "pressure")["layout"]["shapes"] == []


def test_an_unknown_session_is_404(client_as) -> None:
    client = client_as("viewer")
    assert client.get(reverse("session", args=[999_999])).status_code == 404
    assert client.get(reverse("session_live", args=[999_999])).status_code == 404


def test_the_turns_table_pages_and_answers_htmx_with_the_fragment(client_as, key) -> None:
    session = make_session(key, "long", turns=60)
    client = client_as("viewer")
    page = fragment(client.get(reverse("session", args=[session.pk])))
    assert "page 1 of 3" in page
    assert 'href="?turns_page=2#turns"' in page and 'hx-get="?turns_page=2"' in page
    response = client.get(
        reverse("session", args=[session.pk]),
        {"turns_page": 3},
        headers={"HX-Request": "true", "HX-Target": "turns"},
    )
    body = fragment(response)
    assert "<html" not in body and 'id="turns"' in body and "page 3 of 3" in body
    # the turn's number links to its call page
    turn_cells = r'<td class="num"><a href="/sessions/\d+/calls/\d+/"[^>]*>(\d+)</a></td>'
    assert re.findall(turn_cells + r'\s*<td class="num">1</td>', body)[:2] == [
        "9",
        "8",
    ]


def test_the_session_page_costs_the_same_queries_for_5_or_300_turns(
    client_as, key, held_remembered_reads
) -> None:
    client = client_as("viewer")
    short = make_session(key, "short", turns=5)
    long = make_session(key, "long", turns=300)

    def count(session: AgentSession) -> int:
        client.get(reverse("session", args=[session.pk]))
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("session", args=[session.pk])).status_code == 200
        return len(queries)

    assert count(long) == count(short)


def test_ten_thousand_turns_draw_at_most_2000_points_a_trace_in_under_300_kb(
    client_as, key
) -> None:
    records = []
    for t in range(10_000):
        prune = t and t % 500 == 0
        usage = {
            "input_tokens": 300,
            "cache_creation_input_tokens": 60_000 if prune else 900 + (t % 7) * 50,
            "cache_read_input_tokens": 0 if prune else 30_000 + (t % 500) * 250,
            "output_tokens": 500,
        }
        records.append(call("huge", t, usage=usage))
    report(key, records)
    session = AgentSession.objects.get(external_id="huge")
    response = client_as("viewer").get(reverse("session", args=[session.pk]))
    page = fragment(response)
    payload = 0
    for name in ("pressure", "cache", "cost", "gauge"):
        figure = _figure(page, name)
        payload += len(json.dumps(figure))
        for trace in figure["data"]:
            assert len(trace.get("x", [])) <= 2000
    assert payload <= 300_000
    writes = _figure(page, "cache")["data"][0]["x"]
    for spike in range(500, 10_000, 500):
        assert spike in writes, spike


# --- live figures: 304 while nothing changed ---------------------------------------------------


def test_the_live_fragment_answers_304_until_something_it_shows_changes(client_as, key) -> None:
    session = make_session(key, "live", turns=2)
    client = client_as("viewer")
    url = reverse("session_live", args=[session.pk])
    first = client.get(url, headers={"HX-Request": "true"})
    assert first.status_code == 200
    body = fragment(first)
    # one poll for the whole page: the poller with the new version, every part out of band
    assert body.lstrip().startswith('<div id="poller"') and "<html" not in body
    assert 'hx-trigger="every 5s"' in body and 'data-figure="fig-gauge"' in body
    for part in ("live", "charts", "turns", "runs", "archives"):
        assert f'id="{part}"' in body, part
    assert body.count('hx-swap-oob="true"') >= 6
    etag = first["ETag"]
    assert "no-cache" in first["Cache-Control"] and "private" in first["Cache-Control"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304

    report(key, [call("live", 2)])
    after_call = client.get(url, headers={"If-None-Match": etag})
    assert after_call.status_code == 200 and after_call["ETag"] != etag

    etag = after_call["ETag"]
    update_policy(profile=key.profile, values={"prune_threshold": 0.1})
    after_policy = client.get(url, headers={"If-None-Match": etag})
    assert after_policy.status_code == 200 and "band-prune" in fragment(after_policy)


def test_the_live_fragment_still_checks_the_role(client: Client, client_as, session) -> None:
    url = reverse("session_live", args=[session.pk])
    assert client.get(url, headers={"If-None-Match": '"x"'}).status_code == 302
    assert client_as(None).get(url).status_code == 403


# --- policy (admins) -----------------------------------------------------------------------------


def test_the_policy_page_shows_gap_percentiles_and_the_cheaper_tier(client_as, key) -> None:
    fleet = create_agent_key(profile_name="fleet").key
    start = datetime.now(UTC) - timedelta(hours=2)
    # fleet (1h tier) calls every 10 minutes: only the 1h cache survives the gaps
    report(
        fleet, [call("f", t, at=(start + timedelta(minutes=10 * t)).isoformat()) for t in range(6)]
    )
    # default calls every 30 s: the 5m tier is cheaper
    report(
        key, [call("d", t, at=(start + timedelta(seconds=30 * t)).isoformat()) for t in range(6)]
    )
    page = fragment(client_as("admin").get(reverse("policy")))
    # cells: tier, gaps, on the 5m tier, on the 1h tier
    fleet_cells = _row(page, "fleet").split("<td")[1:]
    assert "10.0 min / 10.0 min / 10.0 min" in fleet_cells[1]
    assert "✓ cheaper" not in fleet_cells[2] and "✓ cheaper" in fleet_cells[3]
    assert "would be cheaper" not in fleet_cells[0]
    default_cells = _row(page, "default").split("<td")[1:]
    assert "30 s / 30 s / 30 s" in default_cells[1]
    assert "✓ cheaper" in default_cells[2] and "✓ cheaper" not in default_cells[3]
    assert "no priced traffic" in _row(page, "desktop")


def test_a_profile_on_the_dearer_tier_is_flagged(client_as, key) -> None:
    start = datetime.now(UTC) - timedelta(hours=2)
    # default is on the 5m tier, but its calls come every 20 minutes: 1h would be cheaper
    report(
        key, [call("d", t, at=(start + timedelta(minutes=20 * t)).isoformat()) for t in range(5)]
    )
    page = fragment(client_as("admin").get(reverse("policy")))
    assert "1h would be cheaper" in _row(page, "default")


def test_an_admin_edits_a_profiles_policy_and_blank_inherits(client_as, key) -> None:
    client = client_as("admin")
    response = client.post(
        reverse("policy_profile", args=["default"]),
        {"prune_threshold": "50", "summarize_threshold": "70", "cache_ttl": "1h"},  # percent
    )
    assert response.status_code == 302
    policy = effective_policy(key.profile)
    assert (policy.prune_threshold, policy.summarize_threshold, policy.cache_ttl) == (
        0.5,
        0.7,
        "1h",
    )
    client.post(reverse("policy_profile", args=["default"]), {"cache_ttl": ""})
    policy = effective_policy(key.profile)
    assert policy.cache_ttl == "5m" and policy.prune_threshold == 0.6


def test_an_invalid_policy_is_a_form_error_naming_the_field(client_as, key) -> None:
    before = effective_policy(key.profile)
    response = client_as("admin").post(
        reverse("policy_profile", args=["default"]),
        {"prune_threshold": "70", "summarize_threshold": "50"},
    )
    assert response.status_code == 200  # the form again, with the error
    page = fragment(response)
    assert 'id="id_summarize_threshold-error"' in page
    assert "must not be below prune_threshold" in page
    assert effective_policy(key.profile) == before


def test_the_global_policy_form_needs_every_value(client_as) -> None:
    client = client_as("admin")
    form_page = fragment(client.get(reverse("policy_global")))
    assert 'name="keep_rounds" value="4"' in form_page
    response = client.post(reverse("policy_global"), {"keep_rounds": "7"})
    assert response.status_code == 200
    assert "the global policy needs a value" in fragment(response)


def test_the_global_policy_form_saves_all_values(client_as, key) -> None:
    client = client_as("admin")
    form_page = fragment(client.get(reverse("policy_global")))
    values = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form_page))
    values.pop("csrfmiddlewaretoken", None)
    values.update(
        {
            "keep_rounds": "6",
            "cache_ttl": "5m",
            "nudge_text": "Re-read the plan.",
            "prune_exclude_tools": "",
        }
    )
    response = client.post(reverse("policy_global"), values)
    assert response.status_code == 302, fragment(response)
    policy = effective_policy(key.profile)
    assert policy.keep_rounds == 6 and policy.nudge_text == "Re-read the plan."


def test_an_admin_creates_a_profile_through_the_service(client_as) -> None:
    client = client_as("admin")
    response = client.post(reverse("profile_create"), {"name": "night-shift"})
    assert response.status_code == 302
    assert response["Location"] == reverse("policy_profile", args=["night-shift"])
    bad = client.post(reverse("profile_create"), {"name": "Bad Name!"})
    assert bad.status_code == 200 and "lowercase" in fragment(bad)


def test_an_unknown_profile_is_404(client_as) -> None:
    assert client_as("admin").get(reverse("policy_profile", args=["nope"])).status_code == 404


# --- catalogue (admins) --------------------------------------------------------------------------


def _catalogue_values(row: CatalogueModel, **changes: str) -> dict[str, str]:
    values = {
        "model": row.model,
        "provider": row.provider,
        "family": row.family,
        "window_tokens": str(row.window_tokens),
        "input": str(row.input),
        "output": str(row.output),
        "cache_read": str(row.cache_read),
        "cache_write_5m": str(row.cache_write_5m or ""),
        "cache_write_1h": str(row.cache_write_1h or ""),
        "long_context_threshold": "",
        "lc_input": "",
        "lc_output": "",
        "lc_cache_read": "",
        "lc_cache_write_5m": "",
        "lc_cache_write_1h": "",
    }
    values.update(changes)
    return values


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"input": "-1"}, "input"),
        ({"cache_write_1h": "-0.5"}, "cache_write_1h"),
        ({"window_tokens": "0"}, "window_tokens"),
        ({"lc_input": "6"}, "long_context_threshold"),
        ({"long_context_threshold": "200000"}, "lc_input"),
    ],
)
def test_invalid_catalogue_rows_are_refused_naming_the_field(
    client_as, key, changes, field
) -> None:
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    response = client_as("admin").post(
        reverse("catalogue_edit", args=[row.pk]), _catalogue_values(row, **changes)
    )
    assert response.status_code == 200
    assert f'id="id_{field}-error"' in fragment(response)
    assert CatalogueModel.objects.get(pk=row.pk).input == row.input


def test_an_admin_edits_and_adds_catalogue_rows(client_as, key) -> None:
    client = client_as("admin")
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    response = client.post(
        reverse("catalogue_edit", args=[row.pk]), _catalogue_values(row, input="1.10")
    )
    assert response.status_code == 302
    assert CatalogueModel.objects.get(pk=row.pk).input == Decimal("1.10")
    new = _catalogue_values(row, model="house-model", family="house-model", window_tokens="64000")
    assert client.post(reverse("catalogue_new"), new).status_code == 302
    assert CatalogueModel.objects.get(model="house-model").window_tokens == 64_000


def test_a_saved_price_is_what_the_next_catalogue_read_prices_with(key) -> None:
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    with pytest.raises(FieldError) as refused:
        save_price(row=row, values={"input": Decimal("2"), "pk": 1})
    assert refused.value.field == "pk"
    assert CatalogueModel.objects.get(pk=row.pk).input == row.input
    save_price(row=row, values={"input": Decimal("2.5")})
    priced = {price.model: price for price in load_catalogue()}
    assert priced["claude-haiku-4-5"].input == Decimal("2.5")


# --- agent keys (admins) -------------------------------------------------------------------------


def test_a_created_key_is_shown_once_and_works(client_as, key) -> None:
    client = client_as("admin")
    response = client.post(reverse("keys"), {"profile": "default", "name": "ci", "compact": "on"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    found = re.search(r'<code class="secret" id="issued-key">([^<]+)</code>', fragment(response))
    assert found is not None
    plaintext = found.group(1)
    issued = find_active_key(plaintext)
    assert issued is not None and issued.name == "ci" and issued.scopes == ["ingest", "compact"]
    assert plaintext not in fragment(client.get(reverse("keys")))


def test_an_admin_revokes_a_key(client_as, key) -> None:
    response = client_as("admin").post(reverse("key_revoke", args=[key.pk]))
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert client_as("admin").post(reverse("key_revoke", args=[987_654])).status_code == 404


def test_key_creation_needs_a_known_profile(client_as) -> None:
    response = client_as("admin").post(reverse("keys"), {"profile": "nope"})
    assert response.status_code == 200
    assert "Select a valid choice" in fragment(response)
    assert 'id="issued-key"' not in fragment(response)
    assert AgentKey.objects.count() == 0


# --- static files --------------------------------------------------------------------------------


def test_collectstatic_takes_the_vendored_plotly_bundle_and_nothing_else_of_it(tmp_path, settings):
    from django.core.management import call_command

    from console.plotly_bundle import bundle

    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / bundle().static_name).is_file()
    # the bundle, its hashed copy and their .gz: not the licence, README or bundle.json
    stem = bundle().file.removesuffix(".js")
    collected = [p.name for p in (tmp_path / "plotly").iterdir()]
    assert collected and all(name.startswith(f"{stem}.") for name in collected), collected
    paths = json.loads((tmp_path / "staticfiles.json").read_text())["paths"]
    for name in (bundle().static_name, "console/console.js", "django_htmx/htmx-2.min.js"):
        assert name in paths


# --- compaction on the session page: surface, runs, Compact now ---------------------------------

FAILING_ARCHIVE = "compaction.archives.FailingArchive"


def append(
    session: AgentSession, messages: list[dict[str, Any]], system: str | None = None
) -> None:
    """Append through the log's one write path, as the HTTP API does (original bytes kept)."""
    append_messages(
        session=session,
        fmt="anthropic",
        system=None if system is None else Span(system, json.dumps(system)),
        messages=[Span(message, json.dumps(message)) for message in messages],
    )


def worked_session(
    key: AgentKey, session_id: str = "work-1", *, compact: bool = True
) -> AgentSession:
    """An agent's session as it happens: turn 0 reported before any transcript, a transcript of
    eight tool rounds (surface v1) that turn 1 used, a manual compaction (v2) seen by turn 2.

    The profile prunes all but 2 rounds and summarizes all but 4: the compacted surface holds a
    summary and pruned stubs."""
    update_policy(profile=key.profile, values={"keep_rounds": 2, "keep_rounds_verbatim": 4})
    session = make_session(key, session_id, turns=1)
    append(session, tool_transcript(8, result_chars=8_000), system="You are a build engineer.")
    report(key, [call(session_id, 1, surface_version=1)])
    if compact:
        compact_session(session_id=session.pk, mode="manual", trigger="test", requested_by="test")
        report(key, [call(session_id, 2, surface_version=2)])
    session.refresh_from_db()
    return session


def state_of(session: AgentSession) -> tuple[Any, ...]:
    """Everything a compaction could change: the log, the surface, the operations."""
    surface = Surface.objects.get(session=session)
    return (
        list(LogMessage.objects.filter(session=session).order_by("seq").values_list("seq", "raw")),
        surface.body,
        surface.version,
        list(CompactionOperation.objects.filter(session=session).values_list("pk", "data")),
    )


def htmx(target: str) -> dict[str, str]:
    return {"HX-Request": "true", "HX-Target": target}


@pytest.fixture
def worked(key: AgentKey) -> AgentSession:
    return worked_session(key)


def _compaction_pages(session: AgentSession) -> list[tuple[str, dict[str, str]]]:
    """Every compaction page, partial and download a viewer may read: (URL, headers)."""
    page = reverse("session", args=[session.pk])
    archive = Archive.objects.get(session=session)
    return [
        (page, {}),
        (page + "?surface_turn=1", {}),
        (page + "?surface_turn=1", htmx("surface")),
        (page, htmx("surface")),
        (page, htmx("runs")),
        (page, htmx("archives")),
        (reverse("archives"), {}),
        (reverse("archives") + "?q=nightly", {}),
        (reverse("archives") + "?q=nightly", htmx("results")),
        (reverse("archives") + f"?session={session.pk}", {}),
        (reverse("archive", args=[archive.pk]), {}),
        (reverse("archive_download", args=[archive.pk, "json"]), {}),
        (reverse("archive_download", args=[archive.pk, "jsonl"]), {}),
    ]


@pytest.mark.parametrize("role", [None, "viewer", "operator", "admin"])
def test_every_compaction_page_and_partial_answers_by_role(client_as, worked, role) -> None:
    client = client_as(role)
    for url, headers in _compaction_pages(worked):
        response = client.get(url, headers=headers)
        assert response.status_code == (403 if role is None else 200), (role, url, headers)


def test_anonymous_visitors_are_sent_to_sign_in_from_every_compaction_page(
    client: Client, worked
) -> None:
    for url, headers in _compaction_pages(worked):
        response = client.get(url, headers=headers)
        if headers:
            assert response["HX-Redirect"].startswith(reverse("login") + "?next="), url
        else:
            assert response.status_code == 302, url
            assert response["Location"].startswith(reverse("login") + "?next="), url


def test_fragments_are_fragments(client_as, worked) -> None:
    client = client_as("viewer")
    url = reverse("session", args=[worked.pk])
    for target, start in (
        ("surface", '<section id="surface"'),
        ("runs", '<div id="runs"'),
        ("archives", '<div id="archives"'),
    ):
        body = fragment(client.get(url, headers=htmx(target)))
        assert body.lstrip().startswith(start) and "<html" not in body, target
    results = fragment(client.get(reverse("archives"), {"q": "build"}, headers=htmx("results")))
    assert results.lstrip().startswith('<div id="results"') and "<html" not in results


def test_compaction_markers_sit_where_the_compaction_took_effect(client_as, worked) -> None:
    page = fragment(client_as("viewer").get(reverse("session", args=[worked.pk])))
    shapes = _figure(page, "pressure")["layout"]["shapes"]
    # turns 0 and 1 had ended when the compaction finished: it took effect at turn 2
    assert [s["x0"] for s in shapes if s["xref"] == "x"] == [2]
    notes = _figure(page, "pressure")["layout"]["annotations"]
    assert CompactionRun.objects.get().action == "prune+summarize"
    assert "summarize (manual)" in [n["text"] for n in notes]


def test_refused_and_noop_runs_are_not_marked(client_as, key, settings) -> None:
    session = worked_session(key, compact=False)
    settings.COMPACTION_ARCHIVE_BACKEND = FAILING_ARCHIVE
    with pytest.raises(CompactionRefused):
        compact_session(session_id=session.pk, mode="manual")
    page = fragment(client_as("viewer").get(reverse("session", args=[session.pk])))
    assert [s for s in _figure(page, "pressure")["layout"]["shapes"] if s["xref"] == "x"] == []


def test_the_surface_now_marks_stubs_and_turn_1_shows_what_the_model_saw_then(
    client_as, worked
) -> None:
    client = client_as("viewer")
    url = reverse("session", args=[worked.pk])
    now = fragment(client.get(url, {"surface": "inline"}))  # (deferred without it)
    assert "Surface as the model sees it now" in now
    assert "version 2 · 11 messages" in now
    assert now.count('<span class="tag pruned" title=') == 2
    assert now.count('<details class="block result pruned">') == 2
    assert 'class="msg role-system"' in now and 'class="msg role-user"' in now
    assert 'class="msg role-assistant"' in now
    assert '<details class="block call">' in now and "<code>read_log</code>" in now
    assert "[tool result pruned: read_log returned" in now

    then = fragment(client.get(url, {"surface_turn": 1}, headers=htmx("surface")))
    assert "Surface as the model saw it on turn 1" in then and "version 1 ·" in then
    assert "pruned" not in then
    assert then.count("part 0 line " + "x" * 60) == 8_000 // 75  # the whole result

    assert "Turn 0: its calls did not name a surface version." in fragment(
        client.get(url, {"surface_turn": 0}, headers=htmx("surface"))
    )
    assert "Turn 99: there is no such turn." in fragment(
        client.get(url, {"surface_turn": 99, "surface": "inline"})
    )
    # the turns table links each turn to the surface it used, with a real href
    assert 'href="?surface_turn=2#surface" hx-get="?surface_turn=2"' in now


def test_a_summary_is_marked_on_the_surface(client_as, worked) -> None:
    url = reverse("session", args=[worked.pk])
    page = fragment(client_as("viewer").get(url, headers=htmx("surface")))
    assert page.count('class="msg role-user is-summary"') == 1
    assert '<span class="tag summary" title=' in page
    assert (
        "summary of seq 2–9</span>" in page and "[Summary of 8 earlier messages (seq 2-9)" in page
    )


def test_a_session_without_a_transcript_says_so(client_as, session) -> None:
    url = reverse("session", args=[session.pk])
    page = fragment(client_as("viewer").get(url, {"surface": "inline"}))
    assert "no transcript has been appended to this session yet" in page
    assert "No compaction runs yet." in page and "No archives" in page


def test_operators_see_compact_now_and_viewers_see_it_disabled_with_a_reason(
    client_as, worked
) -> None:
    url = reverse("session", args=[worked.pk])
    viewer = fragment(client_as("viewer").get(url))
    assert re.search(
        r'<button type="button" class="primary" disabled title="Compacting needs the operator '
        r'role; you are a viewer.">Compact now</button>',
        viewer,
    )
    assert reverse("session_compact", args=[worked.pk]) not in viewer
    operator = fragment(client_as("operator").get(url))
    compact_url = reverse("session_compact", args=[worked.pk])
    assert f'action="{compact_url}"' in operator and f'hx-post="{compact_url}"' in operator
    assert "hx-confirm=" in operator and 'name="csrfmiddlewaretoken"' in operator


@pytest.mark.parametrize("role", [None, "viewer"])
def test_compact_now_is_forbidden_below_operator_and_changes_nothing(
    client_as, worked, role
) -> None:
    before = state_of(worked)
    runs = CompactionRun.objects.count()
    response = client_as(role).post(
        reverse("session_compact", args=[worked.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 403
    assert state_of(worked) == before and CompactionRun.objects.count() == runs


def test_compact_now_needs_a_post_a_sign_in_and_a_known_session(client: Client, client_as, worked):
    url = reverse("session_compact", args=[worked.pk])
    assert client.post(url).status_code == 302
    operator = client_as("operator")
    assert operator.get(url).status_code == 405
    assert operator.post(reverse("session_compact", args=[999_999])).status_code == 404


def test_compact_now_needs_the_csrf_token(client_as, key) -> None:
    session = worked_session(key, compact=False)
    client = client_as("operator", enforce_csrf=True)
    url = reverse("session_compact", args=[session.pk])
    before = state_of(session)
    assert client.post(url, headers={"HX-Request": "true"}).status_code == 403
    assert state_of(session) == before and not CompactionRun.objects.exists()
    page = fragment(client.get(reverse("session", args=[session.pk])))
    found = re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'>", page)
    assert found is not None
    response = client.post(url, headers={"HX-Request": "true", "X-CSRFToken": found.group(1)})
    assert response.status_code == 200
    assert CompactionRun.objects.get().status == "applied"


def test_compact_now_compacts_shows_the_result_and_swaps_the_other_parts(client_as, key) -> None:
    session = worked_session(key, compact=False)
    client = client_as("operator")
    response = client.post(
        reverse("session_compact", args=[session.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    body = fragment(response)
    run = CompactionRun.objects.get()
    assert (run.mode, run.trigger, run.status, run.archived) == (
        "manual",
        "console",
        "applied",
        True,
    )
    assert run.requested_by.startswith("user:user-operator-")
    assert body.lstrip().startswith('<div id="compact"') and "<html" not in body
    assert "<strong>Compacted</strong>" in body
    assert f"{run.tokens_before:,} → {run.tokens_after:,} tokens, surface v1 → v2" in body
    assert f'href="/archives/{run.archive_id}/"' in body
    swapped_parts = (
        '<section id="live"',
        '<section id="surface"',
        '<div id="runs"',
        '<div id="archives"',
    )
    for swapped in swapped_parts:
        start = body.index(swapped)
        assert 'hx-swap-oob="true"' in body[start : body.index(">", start)], swapped
    assert "version 2 ·" in body and "pruned stub" in body
    assert "user:user-operator-" in body
    # the live figures follow at once: the surface estimate replaced the projection (D6)
    assert f"{run.tokens_after:,}</span>" in body


def test_compact_now_without_javascript_redirects_back_with_the_outcome(client_as, key) -> None:
    session = worked_session(key, compact=False)
    client = client_as("admin")
    response = client.post(reverse("session_compact", args=[session.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("session", args=[session.pk]) + "#compaction"
    assert "Compacted — prune+summarize: " in fragment(response)


def test_a_refusal_shows_its_reason_in_place_and_changes_nothing(client_as, key, settings) -> None:
    session = worked_session(key, compact=False)
    settings.COMPACTION_ARCHIVE_BACKEND = FAILING_ARCHIVE
    before = state_of(session)
    response = client_as("operator").post(
        reverse("session_compact", args=[session.pk]), headers={"HX-Request": "true"}
    )
    # an answer, not an error: the page shows it where the button is
    assert response.status_code == 200
    body = fragment(response)
    assert "<strong>Refused</strong>" in body
    assert "archive failed, nothing changed: ArchiveError: archive store unavailable" in body
    assert state_of(session) == before
    assert not Archive.objects.exists()
    run = CompactionRun.objects.get()
    assert run.status == "refused" and not run.archived
    runs = body[body.index('<div id="runs"') :]
    assert '<span class="outcome refused">refused</span>' in runs
    assert "archive failed</span>" in runs


def test_a_refusal_without_javascript_is_an_error_message(client_as, key, settings) -> None:
    session = worked_session(key, compact=False)
    settings.COMPACTION_ARCHIVE_BACKEND = FAILING_ARCHIVE
    response = client_as("operator").post(
        reverse("session_compact", args=[session.pk]), follow=True
    )
    assert '<li class="error">Refused — archive failed, nothing changed' in fragment(response)


def test_the_runs_table_shows_each_outcome_and_compacted_without_archive(
    client_as, key, settings
) -> None:
    session = worked_session(key, compact=False)
    empty = make_session(key, "no-log", turns=1)
    compact_session(session_id=empty.pk, mode="manual", requested_by="user:someone")
    settings.COMPACTION_ARCHIVE_BACKEND = FAILING_ARCHIVE
    with pytest.raises(CompactionRefused):
        compact_session(session_id=session.pk, mode="manual", requested_by="user:ops")
    # D5: the automatic and overflow paths compact even when the archive fails
    report_overflow(session=session, surface_version=None, detail="prompt is too long")
    client = client_as("viewer")
    runs = fragment(client.get(reverse("session", args=[session.pk]), headers=htmx("runs")))
    rows = runs.split("<tr class=")[1:]
    assert len(rows) == 2
    assert rows[0].startswith('"run-applied unarchived"')
    assert "compacted without archive</span>" in rows[0] and "overflow" in rows[0]
    assert "ArchiveError: archive store unavailable" in rows[0]
    assert rows[1].startswith('"run-refused"') and "user:ops" in rows[1]
    assert re.search(r"\d+ / \d+ / — ms", rows[1])  # planned and tried to archive, never applied
    noop = fragment(client.get(reverse("session", args=[empty.pk]), headers=htmx("runs")))
    assert '<span class="outcome noop">nothing to do</span>' in noop
    assert "the session has no transcript log to compact" in noop


def test_the_session_page_costs_the_same_queries_with_a_short_or_long_transcript(
    client_as, key, held_remembered_reads
) -> None:
    client = client_as("viewer")
    short = worked_session(key, "short-t", compact=True)
    long = worked_session(key, "long-t", compact=True)
    append(long, tool_transcript(20, result_chars=2_000, first_seq=18, first_round=8))
    compact_session(session_id=long.pk, mode="manual")

    def count(session: AgentSession) -> int:
        client.get(reverse("session", args=[session.pk]))
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("session", args=[session.pk])).status_code == 200
        return len(queries)

    assert count(long) == count(short)


# --- archives: search, transcript viewer, downloads ---------------------------------------------

HOSTILE = '<script>alert("owned")</script> zebrafish <mark onclick="x()">hi</mark> </mark>'


@pytest.fixture
def hostile(key: AgentKey) -> AgentSession:
    """A compacted session whose archived transcript carries markup an agent should not inject."""
    update_policy(profile=key.profile, values={"keep_rounds": 2, "keep_rounds_verbatim": 4})
    session = make_session(key, "hostile-1", turns=1)
    messages = tool_transcript(6, result_chars=4_000)
    messages[0]["content"] = f"Please look at {HOSTILE} in the page."
    append(session, messages, system="You read web pages.")
    compact_session(session_id=session.pk, mode="manual")
    return session


def test_safe_snippet_keeps_only_balanced_marks() -> None:
    assert safe_snippet("a <mark>b</mark> <script>x</script>") == (
        "a <mark>b</mark> &lt;script&gt;x&lt;/script&gt;"
    )
    assert safe_snippet('</mark><mark onclick="x">y <mark>z') == (
        "&lt;mark onclick=&quot;x&quot;&gt;y <mark>z</mark>"
    )
    # the archive's snippets arrive escaped: "&amp;" is an "&" in the text, shown as such
    assert safe_snippet("&amp; &lt;b&gt;") == "&amp; &lt;b&gt;"
    assert safe_snippet("&amp; <b>") == "&amp; &lt;b&gt;"


def test_search_highlights_hits_and_never_injects_the_transcripts_markup(
    client_as, hostile
) -> None:
    client = client_as("viewer")
    page = fragment(client.get(reverse("archives"), {"q": "zebrafish"}))
    assert "1 hit for “zebrafish”" in page
    assert "<mark>zebrafish</mark>" in page
    # PostgreSQL's highlighter drops tags it recognises, SQLite's keeps them: either way
    # nothing but a bare <mark> reaches the page as markup
    assert "<script" not in page.split("</head>", 1)[1]
    assert re.findall(r"<mark[^>]*>", page) == ["<mark>"]
    archive = Archive.objects.get(session=hostile)
    assert f'href="/archives/{archive.pk}/?q=zebrafish#log-seq-1"' in page  # opens marked
    # the query itself is escaped too
    echoed = fragment(client.get(reverse("archives"), {"q": "<script>alert(1)</script>"}))
    assert "<script>alert(1)" not in echoed and "&lt;script&gt;alert(1)&lt;/script&gt;" in echoed


def test_the_transcript_viewer_escapes_and_marks_roles_calls_results_and_stubs(
    client_as, hostile
) -> None:
    archive = Archive.objects.get(session=hostile)
    page = fragment(client_as("viewer").get(reverse("archive", args=[archive.pk])))
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;owned&quot;)" in page
    log = page[page.index('id="log"') : page.index('id="archived-surface"')]
    assert log.count('class="msg role-assistant"') == 6
    assert log.count('<details class="block call">') == 6
    assert log.count('<details class="block result">') == 6
    assert 'id="log-seq-1"' in log and 'id="log-seq-12"' in log
    assert "chat-archive:default:hostile-1" in page
    assert reverse("archive_download", args=[archive.pk, "jsonl"]) in page
    # a later compaction archives a surface that carries stubs and a summary: both are marked
    append(hostile, tool_transcript(4, result_chars=4_000, first_seq=14, first_round=6))
    compact_session(session_id=hostile.pk, mode="manual")
    newer = Archive.objects.filter(session=hostile).order_by("-pk").first()
    assert newer is not None and newer.pk != archive.pk
    page = fragment(client_as("viewer").get(reverse("archive", args=[newer.pk])))
    surface = page[page.index('id="archived-surface"') :]
    assert '<details class="block result pruned">' in surface
    assert 'class="msg role-user is-summary"' in surface and "summary of seq 2–" in surface


def test_downloads_are_the_archive_as_json_and_its_log_as_jsonl(client_as, hostile) -> None:
    archive = Archive.objects.get(session=hostile)
    client = client_as("viewer")
    whole = client.get(reverse("archive_download", args=[archive.pk, "json"]))
    assert whole["Content-Type"] == "application/json; charset=utf-8"
    assert whole["Content-Disposition"] == (
        f'attachment; filename="archive-{archive.pk}-hostile-1.json"'
    )
    assert json.loads(whole.content) == archive_document(archive)
    lines = client.get(reverse("archive_download", args=[archive.pk, "jsonl"]))
    assert lines["Content-Disposition"] == (
        f'attachment; filename="archive-{archive.pk}-hostile-1.jsonl"'
    )
    decoded = [json.loads(line) for line in lines.content.decode().splitlines()]
    assert [m["seq"] for m in decoded] == list(range(14))  # the system prompt is seq 0
    assert decoded == archive_document(archive)["log"]
    assert HOSTILE in decoded[1]["content"]
    assert client.get(f"/archives/{archive.pk}/download.xml").status_code == 404
    assert client.get(reverse("archive_download", args=[999_999, "json"])).status_code == 404
    assert client.get(reverse("archive", args=[999_999])).status_code == 404


def test_a_download_name_keeps_only_safe_characters(client_as, key) -> None:
    session = make_session(key, 'we"ird\\..\\id\n', turns=1)  # ids cannot hold '/' (issue 16)
    append(session, tool_transcript(6, result_chars=4_000), system="You read web pages.")
    compact_session(session_id=session.pk, mode="manual")
    archive = Archive.objects.get(session=session)
    response = client_as("viewer").get(reverse("archive_download", args=[archive.pk, "json"]))
    assert response["Content-Disposition"] == (
        f'attachment; filename="archive-{archive.pk}-we_ird_.._id.json"'
    )


def test_every_profiles_archives_are_listed_and_searchable(client_as, key, worked) -> None:
    fleet = create_agent_key(profile_name="fleet").key
    other = worked_session(fleet, "fleet-work")
    client = client_as("viewer")
    listing = fragment(client.get(reverse("archives")))
    assert "work-1" in listing and "fleet-work" in listing and "Latest archives" in listing
    hits = fragment(client.get(reverse("archives"), {"q": "nightly build"}))
    assert "default/" in hits and "fleet/" in hits
    scoped = fragment(client.get(reverse("archives"), {"q": "nightly build", "session": other.pk}))
    assert "fleet/" in scoped and "default/" not in scoped
    assert "only fleet/fleet-work" in scoped
    per_session = fragment(
        client.get(reverse("session", args=[worked.pk]), headers=htmx("archives"))
    )
    archive = Archive.objects.get(session=worked)
    assert f'href="/archives/{archive.pk}/"' in per_session
    assert f'href="/archives/{archive.pk}/download.jsonl" download' in per_session
    assert "fleet-work" not in per_session


def test_search_pages_through_many_hits(client_as, key) -> None:
    session = make_session(key, "chatty", turns=1)
    append(session, tool_transcript(30, result_chars=300), system="You read logs.")
    compact_session(session_id=session.pk, mode="manual")
    client = client_as("viewer")
    first = fragment(client.get(reverse("archives"), {"q": "part"}))
    assert "Hits 1–50 for “part”" in first and first.count('<li class="hit">') == 50
    assert 'href="?q=part&amp;page=2" hx-get="?q=part&amp;page=2"' in first
    second = fragment(
        client.get(reverse("archives"), {"q": "part", "page": 2}, headers=htmx("results"))
    )
    assert "Hits 51–" in second and "← previous hits" in second and "next hits" not in second


def test_a_summarizer_outage_shows_a_failed_run_in_place_and_changes_nothing(
    client_as, key, settings
) -> None:
    session = worked_session(key, compact=False)
    settings.COMPACTION_SUMMARIZER_URL = "http://127.0.0.1:9"  # nothing listens there
    before = state_of(session)
    response = client_as("operator").post(
        reverse("session_compact", args=[session.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert "Not applied" in fragment(response)
    assert state_of(session) == before
    assert CompactionRun.objects.get().status == "failed"
