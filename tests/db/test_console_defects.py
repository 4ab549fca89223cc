"""The numbered defects of issue 14 that a server-side test can pin (the browser suite covers
the rest in Chromium)."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from console.roles import Role, role_of
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession
from tests.db.conftest import signed_in
from tests.db.test_console_views import fragment, report

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def test_3_a_key_records_when_it_was_last_used() -> None:
    issued = create_agent_key(profile_name="default")
    assert issued.key.last_used_at is None
    response = Client().get(
        "/api/v1/policy", headers={"Authorization": f"Bearer {issued.plaintext}"}
    )
    assert response.status_code == 200
    used = AgentKey.objects.get(pk=issued.key.pk).last_used_at
    assert used is not None
    page = fragment(signed_in("admin").get(reverse("keys")))
    assert used.strftime("%Y-%m-%d %H:%M") in page


def test_8_create_console_user_gives_one_role_and_a_password() -> None:
    out = StringIO()
    call_command("create_console_user", "alice", "--role", "operator", stdout=out)
    password = out.getvalue().split("password ")[1].strip()
    user = authenticate(username="alice", password=password)
    assert user is not None and role_of(user) is Role.OPERATOR
    call_command("create_console_user", "alice", "--role", "viewer", stdout=StringIO())
    user = authenticate(username="alice", password=password)  # the password stays
    assert user is not None and role_of(user) is Role.VIEWER


def test_9_telemetry_without_a_transcript_says_compaction_needs_one(key_with_session) -> None:
    session = key_with_session
    page = fragment(signed_in("viewer").get(reverse("session", args=[session.pk])))
    assert "Automatic compaction needs the transcript" in page
    assert f"/api/v1/sessions/{session.external_id}/messages" in page


@pytest.fixture
def key_with_session() -> AgentSession:
    from telemetry.catalogue import seed_catalogue

    seed_catalogue()
    key = create_agent_key(profile_name="default").key
    report(
        key,
        [
            {
                "session_id": "telemetry-only",
                "turn": 1,
                "model": SONNET,
                "usage": {"input_tokens": 150_000, "output_tokens": 10},
            }
        ],
    )
    return AgentSession.objects.get(external_id="telemetry-only")


def test_13_missing_pages_are_the_consoles_own_and_get_on_a_post_route_explains() -> None:
    client = signed_in("admin")
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    page = fragment(response)
    assert 'id="not-found"' in page and "/no/such/page/" in page
    assert "urlpatterns" not in page.lower()  # never the URL list
    assert client.get(reverse("profile_create")).status_code == 200  # GET shows the form
    response = client.get(reverse("key_revoke", args=[1]))
    assert response.status_code == 405
    assert "This address takes POST" in fragment(response)
    # the API keeps its JSON
    assert Client().get("/api/v1/nope").status_code == 404


def test_14_the_surface_turn_box_offers_the_sessions_turns(key_with_session) -> None:
    client = signed_in("viewer")
    url = reverse("session", args=[key_with_session.pk])
    page = fragment(client.get(url, headers={"HX-Request": "true", "HX-Target": "surface"}))
    assert 'min="1" max="1" placeholder="1–1"' in page
    # without JavaScript, the link in the deferred surface shows it inline
    assert 'min="1" max="1"' in fragment(client.get(url, {"surface": "inline"}))


def test_16_wording_calls_labels_and_thresholds_in_percent(key_with_session) -> None:
    client = signed_in("admin")
    page = fragment(client.get(reverse("session", args=[key_with_session.pk])))
    assert "1 call ·" in page and "1 calls" not in page
    form = fragment(client.get(reverse("catalogue_new")))
    assert "Long-context input ($/MTok)" in form and "Lc input" not in form
    policy = fragment(client.get(reverse("policy_global")))
    assert 'name="prune_threshold" value="60"' in policy
    response = client.post(
        reverse("policy_profile", args=["default"]),
        {"prune_threshold": "80", "summarize_threshold": "70"},
    )
    # the field's own message, in percent and without the ADR's jargon (the page around it holds
    # a random CSRF token, which may spell "D4")
    found = re.search(r'id="id_summarize_threshold-error">([^<]*)<', fragment(response))
    assert found is not None
    error = found.group(1)
    assert "must not be below prune_threshold (80%)" in error and "D4" not in error
    # a share typed into the percent field (0.3 for 30 %) is refused, saying what to type
    shared = client.post(
        reverse("policy_profile", args=["default"]),
        {"prune_threshold": "0.3", "summarize_threshold": "95"},
    )
    found = re.search(r'id="id_prune_threshold-error">([^<]*)<', fragment(shared))
    assert found is not None and "type 30 for 30 %" in found.group(1), found
    from telemetry.policy_store import effective_policy

    assert effective_policy(key_with_session.profile).prune_threshold != 0.003


def test_4_a_policy_change_says_how_many_sessions_it_moves_before_saving(key_with_session) -> None:
    from telemetry.policy_store import effective_policy

    profile = key_with_session.profile
    key = AgentKey.objects.get(profile=profile)
    calm = {
        "session_id": "calm",
        "turn": 1,
        "model": SONNET,
        "usage": {"input_tokens": 20_000, "output_tokens": 10},
    }
    report(key, [calm])
    pressures = sorted(p for p in AgentSession.objects.values_list("pressure", flat=True) if p)
    assert pressures[0] < 0.3 < 0.6 < pressures[1]  # one ok session, one already at compact
    lower = {"prune_threshold": "5", "summarize_threshold": "10"}
    client = signed_in("admin")
    preview = fragment(client.post(reverse("policy_profile_preview", args=["default"]), lower))
    assert "2 sessions at or above prune" in preview and "1 newly" in preview
    response = client.post(reverse("policy_profile", args=["default"]), lower)
    assert response.status_code == 200  # not saved: the impact is shown first
    page = fragment(response)
    assert "Not saved yet" in page and "Save anyway" in page and "1 newly" in page
    assert effective_policy(profile).prune_threshold == 0.6
    digest = re.search(r'name="confirm" value="([0-9a-f]+)"', page)
    assert digest is not None
    # a confirm not bound to these values is stale: previewed again, not saved
    stale = client.post(reverse("policy_profile", args=["default"]), lower | {"confirm": "1"})
    assert stale.status_code == 200 and "changed since the preview" in fragment(stale)
    other = {"prune_threshold": "6", "summarize_threshold": "10"}
    moved = client.post(
        reverse("policy_profile", args=["default"]), other | {"confirm": digest.group(1)}
    )
    assert moved.status_code == 200 and effective_policy(profile).prune_threshold == 0.6
    response = client.post(
        reverse("policy_profile", args=["default"]), lower | {"confirm": digest.group(1)}
    )
    assert response.status_code == 302
    assert effective_policy(profile).prune_threshold == 0.05
    # a change that moves nobody's band, usable window or billing saves at once
    rounds = lower | {"keep_rounds": "6"}
    assert client.post(reverse("policy_profile", args=["default"]), rounds).status_code == 302
    # moving sessions down a band is a change too: it asks first
    higher = {"prune_threshold": "90", "summarize_threshold": "95"}
    assert client.post(reverse("policy_profile", args=["default"]), higher).status_code == 200


def test_15_a_hit_opens_marked_long_messages_read_whole_stubs_link_their_original() -> None:
    from compaction.models import Archive
    from telemetry.catalogue import seed_catalogue
    from tests.db.test_console_views import worked_session

    seed_catalogue()
    key = create_agent_key(profile_name="default").key
    session = worked_session(key)  # compacted: pruned stubs and a summary, archive first
    archive = Archive.objects.get(session=session)
    client = signed_in("viewer")
    hits = fragment(client.get(reverse("archives"), {"q": "line"}))
    assert f"/archives/{archive.pk}/?q=line#log-seq-" in hits  # the hit link carries the query
    assert "in all, best match first" in hits  # the total count
    page = fragment(client.get(reverse("archive", args=[archive.pk]), {"q": "line"}))
    assert '<details class="block result" open>' in page  # the result holding it opens
    assert "<mark>line</mark>" in page
    # a message longer than the page shows is readable whole on its own page
    whole = client.get(reverse("archive_message", args=[archive.pk, 3]))
    assert whole.status_code == 200 and 'id="whole-message"' in fragment(whole)
    assert client.get(reverse("archive_message", args=[archive.pk, 999])).status_code == 404
    # the pruned stubs of the surface now link to their whole original in the archive
    surface = fragment(
        client.get(
            reverse("session", args=[session.pk]),
            headers={"HX-Request": "true", "HX-Target": "surface"},
        )
    )
    assert f'class="original-link" href="/archives/{archive.pk}/#log-seq-' in surface


def test_11_the_session_page_defers_the_transcript_and_shows_a_long_one_in_parts() -> None:
    from compaction.rawjson import Span
    from compaction.transcripts import append_messages
    from telemetry.catalogue import seed_catalogue

    seed_catalogue()
    key = create_agent_key(profile_name="default").key
    report(
        key,
        [
            {
                "session_id": "chatty",
                "turn": 0,
                "model": SONNET,
                "usage": {"input_tokens": 9, "output_tokens": 1},
            }
        ],
    )
    session = AgentSession.objects.get(external_id="chatty")
    messages = [
        {"seq": i, "role": "user" if i % 2 else "assistant", "content": f"message {i}"}
        for i in range(1, 101)
    ]
    append_messages(
        session=session,
        fmt="anthropic",
        system=Span("Be brief.", '"Be brief."'),
        messages=[Span(m, __import__("json").dumps(m)) for m in messages],
    )
    client = signed_in("viewer")
    url = reverse("session", args=[session.pk])
    page = fragment(client.get(url))
    assert "message 50" not in page and 'hx-trigger="load"' in page  # not inline
    part = fragment(client.get(url, headers={"HX-Request": "true", "HX-Target": "surface"}))
    assert "The latest 60 of 101 messages" in part
    assert "message 100" in part and "message 40<" not in part
    whole = fragment(
        client.get(
            url, {"surface_all": "1"}, headers={"HX-Request": "true", "HX-Target": "surface"}
        )
    )
    assert "message 1<" in whole and "The latest 60" not in whole
