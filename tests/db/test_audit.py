"""The audit trail (issue 39, item 4): each change of a policy, a price, a profile, a key, a user
or a group is recorded with who made it (console form, admin, API) and each field before → after;
a key's secret and hash and a password hash never appear; /audit/ shows it to admins only.
And the per-call page and its API route."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from console.audit import AuditActorMiddleware
from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentProfile, AgentSession, CatalogueModel, LLMCall, Policy
from telemetry.money import money_text
from telemetry.policy_store import update_policy
from tests.db.conftest import make_user, sign_in
from tests.db.test_console_views import (
    SONNET,
    _catalogue_values,
    call,
    fragment,
    make_session,
    report,
)

pytestmark = pytest.mark.django_db


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


def entries_for(model: type[Any]) -> list[LogEntry]:
    return list(
        LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(model)).order_by(
            "pk"
        )
    )


def admin_client(name: str = "alice") -> tuple[Client, User]:
    user = make_user(name, "admin")
    return sign_in(user), user


def everything_logged() -> str:
    return json.dumps(
        [
            [entry.changes, entry.changes_text, entry.object_repr, entry.additional_data]
            for entry in LogEntry.objects.all()
        ],
        default=str,
    )


# --- what is recorded, and who made it ------------------------------------------------------


def test_a_policy_change_through_the_console_names_the_admin_and_the_field(key) -> None:
    client, alice = admin_client()
    form_page = fragment(client.get(reverse("policy_global")))
    values = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form_page))
    values.pop("csrfmiddlewaretoken", None)
    values.update(
        {"keep_rounds": "6", "cache_ttl": "5m", "nudge_text": "Re-read.", "prune_exclude_tools": ""}
    )
    before = Policy.objects.get(is_global=True).keep_rounds
    assert client.post(reverse("policy_global"), values).status_code == 302
    entry = entries_for(Policy)[-1]
    assert entry.actor == alice
    assert entry.action == LogEntry.Action.UPDATE
    assert entry.changes["keep_rounds"] == [before, 6]
    assert "updated_at" not in entry.changes


def test_a_profile_override_through_the_service_without_a_request_is_the_systems(key) -> None:
    update_policy(profile=key.profile, values={"keep_rounds": 9})
    entry = entries_for(Policy)[-1]
    assert entry.actor is None and entry.additional_data is None
    assert entry.changes["keep_rounds"] == [None, 9]


def test_a_price_change_through_the_console_is_recorded_before_and_after(key) -> None:
    client, alice = admin_client()
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    old = str(row.input)
    response = client.post(
        reverse("catalogue_edit", args=[row.pk]), _catalogue_values(row, input="1.10")
    )
    assert response.status_code == 302
    entry = entries_for(CatalogueModel)[-1]
    assert entry.actor == alice and entry.object_repr == "claude-haiku-4-5"
    before, after = entry.changes["input"]
    assert before == old and after in {"1.10", "1.100000"}


def test_a_key_created_and_revoked_in_the_console_never_records_its_secret_or_hash(key) -> None:
    client, alice = admin_client()
    profile = AgentProfile.objects.get(name="default")
    response = client.post(reverse("keys"), {"profile": profile.name, "name": "ci-bot"})
    assert response.status_code == 200
    plaintext = re.search(r'id="issued-key">([^<]+)<', fragment(response)).group(1)  # type: ignore[union-attr]
    new_key = AgentKey.objects.get(name="ci-bot")
    created = entries_for(AgentKey)[-1]
    assert created.action == LogEntry.Action.CREATE and created.actor == alice
    assert created.changes["name"] == [None, "ci-bot"]
    assert "key_hash" not in created.changes and "last_used_at" not in created.changes

    assert client.post(reverse("key_revoke", args=[new_key.pk])).status_code == 302
    revoked = entries_for(AgentKey)[-1]
    assert revoked.action == LogEntry.Action.UPDATE and revoked.actor == alice
    assert revoked.changes["revoked_at"][0] is None and revoked.changes["revoked_at"][1]

    logged = everything_logged()
    secret = plaintext.split("_", 2)[2]  # token_urlsafe may itself hold "_"
    assert len(secret) >= 40
    assert secret not in logged and new_key.key_hash not in logged
    assert "key_hash" not in logged


def test_a_key_used_by_an_agent_adds_no_entry(key) -> None:
    issued = create_agent_key(profile_name="default", name="quiet")
    count = LogEntry.objects.count()
    response = Client().get(
        "/api/v1/policy", headers={"Authorization": f"Bearer {issued.plaintext}"}
    )
    assert response.status_code == 200
    assert AgentKey.objects.get(pk=issued.key.pk).last_used_at is not None
    assert LogEntry.objects.count() == count


def test_admin_changes_of_users_groups_and_keys_name_the_admin(key) -> None:
    client, alice = admin_client()
    alice.is_superuser = True
    alice.is_staff = True
    alice.save()
    bob = make_user("bob", None)
    viewers = Group.objects.get_or_create(name="viewer")[0]
    page = client.get(reverse("admin:auth_user_change", args=[bob.pk]))
    assert page.status_code == 200
    response = client.post(
        reverse("admin:auth_user_change", args=[bob.pk]),
        {
            "username": "bob",
            "first_name": "Bob",
            "last_name": "",
            "email": "bob@example.com",
            "is_active": "on",
            "groups": [str(viewers.pk)],
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
            "initial-date_joined_0": "2026-01-01",
            "initial-date_joined_1": "00:00:00",
        },
    )
    assert response.status_code == 302, fragment(response)[:2000]
    user_entries = entries_for(User)
    changed = [e for e in user_entries if e.object_pk == str(bob.pk) and e.actor == alice]
    fields = {name for e in changed for name in (e.changes or {})}
    assert {"first_name", "email", "groups"} <= fields
    groups_entry = next(e for e in changed if "groups" in e.changes)
    assert groups_entry.changes["groups"]["operation"] == "add"
    assert groups_entry.changes["groups"]["objects"] == ["viewer"]

    # a password change shows that it changed, never any part of either hash
    old_hash = User.objects.get(pk=bob.pk).password
    response = client.post(
        reverse("admin:auth_user_password_change", args=[bob.pk]),
        {"password1": "another-long-password-456", "password2": "another-long-password-456"},
    )
    assert response.status_code == 302, fragment(response)[:2000]
    new_hash = User.objects.get(pk=bob.pk).password
    password_entry = entries_for(User)[-1]
    assert password_entry.actor == alice
    assert password_entry.changes["password"] == ["(hidden)", "(hidden)"]
    logged = everything_logged()
    for digest in (old_hash, new_hash):
        assert digest.rsplit("$", 1)[-1] not in logged

    # a key renamed in the admin (a save, so the trail sees it)
    response = client.post(
        reverse("admin:telemetry_agentkey_change", args=[key.pk]), {"name": "renamed"}
    )
    assert response.status_code == 302, fragment(response)[:2000]
    renamed = entries_for(AgentKey)[-1]
    assert renamed.actor == alice and renamed.changes["name"] == ["", "renamed"]

    # a group created in the admin
    response = client.post(reverse("admin:auth_group_add"), {"name": "auditors"})
    assert response.status_code == 302
    assert entries_for(Group)[-1].actor == alice


def test_an_api_request_names_its_agent_key(key) -> None:
    """The middleware reads the key the API authenticated with when the entry is written."""

    def view(request: Any) -> HttpResponse:
        request.auth = key  # what ninja's AgentKeyAuth sets, inside the view
        update_policy(profile=key.profile, values={"keep_rounds": 3})
        return HttpResponse("ok")

    request = RequestFactory().get("/api/v1/anything")
    request.user = type("Anon", (), {"is_authenticated": False})()  # an API request: no user
    AuditActorMiddleware(view)(request)
    entry = entries_for(Policy)[-1]
    assert entry.actor is None
    assert entry.additional_data == {"actor": f"api:{key.prefix}"}


# --- the audit page -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["viewer", "operator", None])
def test_only_admins_see_the_audit_page(client_as, role) -> None:
    client = client_as(role)
    assert client.get(reverse("audit")).status_code == 403
    assert 'href="/audit/"' not in fragment(client.get(reverse("sessions")))


def test_anonymous_visitors_are_sent_to_sign_in() -> None:
    response = Client().get(reverse("audit"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_audit_page_lists_changes_newest_first_with_before_and_after(key) -> None:
    client, alice = admin_client()
    assert 'href="/audit/"' in fragment(client.get(reverse("sessions")))
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    client.post(reverse("catalogue_edit", args=[row.pk]), _catalogue_values(row, input="1.10"))
    update_policy(profile=key.profile, values={"keep_rounds": 9})
    page = fragment(client.get(reverse("audit")))
    # newest first
    assert page.index('<td class="wrap">policy of default</td>') < page.index(
        '<td class="wrap">claude-haiku-4-5</td>'
    )
    assert re.search(
        r"keep rounds</span>: <span class=\"before\">—</span> → <span class=\"after\">9<", page
    )
    assert re.search(
        r"input</span>: <span class=\"before\">1\.0+</span> → <span class=\"after\">1\.10*<", page
    )
    assert "alice" in page and "system" in page


def test_the_audit_page_filters_by_type_who_and_period(key) -> None:
    client, alice = admin_client()
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    client.post(reverse("catalogue_edit", args=[row.pk]), _catalogue_values(row, input="1.10"))
    update_policy(profile=key.profile, values={"keep_rounds": 9})

    prices = fragment(client.get(reverse("audit"), {"type": "price"}))
    assert "claude-haiku-4-5" in prices and "keep rounds" not in prices
    by_alice = fragment(client.get(reverse("audit"), {"actor": "alice"}))
    assert "claude-haiku-4-5" in by_alice and "keep rounds" not in by_alice
    by_system = fragment(client.get(reverse("audit"), {"actor": "system", "type": "policy"}))
    assert "keep rounds" in by_system and "claude-haiku-4-5" not in by_system

    LogEntry.objects.filter(object_repr="claude-haiku-4-5").update(
        timestamp=timezone.now() - timedelta(days=10)
    )
    week = fragment(client.get(reverse("audit"), {"period": "7d"}))
    assert "keep rounds" in week and "claude-haiku-4-5" not in week
    old_day = (timezone.now() - timedelta(days=10)).date().isoformat()
    that_day = fragment(client.get(reverse("audit"), {"since": old_day, "until": old_day}))
    assert "claude-haiku-4-5" in that_day and "keep rounds" not in that_day
    # From and To are the operator's days: 23:30 UTC on 2026-12-01 is 2026-12-02 in Tokyo
    LogEntry.objects.filter(object_repr="claude-haiku-4-5").update(
        timestamp=datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    )
    day = {"since": "2026-12-02", "until": "2026-12-02"}
    assert "claude-haiku-4-5" not in fragment(client.get(reverse("audit"), day))
    client.cookies["console_tz"] = "Asia/Tokyo"
    tokyo = fragment(client.get(reverse("audit"), day))
    assert "claude-haiku-4-5" in tokyo and "2026-12-02 08:30" in tokyo


def test_bad_audit_filters_are_refused_naming_the_field(key) -> None:
    client, _ = admin_client()
    response = client.get(reverse("audit"), {"since": "2026-02-01", "until": "2026-01-01"})
    assert response.status_code == 422
    assert "To: must not be before From" in fragment(response)
    response = client.get(reverse("audit"), {"period": "2y"})
    assert response.status_code == 422 and "Period:" in fragment(response)


def test_the_audit_page_is_paged(key) -> None:
    client, _ = admin_client()
    for rounds in range(1, 56):
        update_policy(profile=key.profile, values={"keep_rounds": rounds})
    # the override row's creation, then 55 changes
    assert len(entries_for(Policy)) == 56
    first = fragment(client.get(reverse("audit"), {"type": "policy"}))
    assert "56 changes · page 1 of 2" in first and "next →" in first
    assert first.count('class="changes"') == 50
    second = fragment(client.get(reverse("audit"), {"type": "policy", "page": "2"}))
    assert "page 2 of 2" in second and second.count('class="changes"') == 6


# --- the per-call page and API ---------------------------------------------------------------


@pytest.fixture
def called(key: AgentKey) -> AgentSession:
    seed_catalogue()
    report(
        key,
        [
            call("chat-calls", 0, request_id="req_first"),
            call("chat-calls", 1, request_id="req_second", call=0),
            call(
                "chat-calls",
                1,
                request_id="req_third",
                call=1,
                usage={
                    "input_tokens": 30_000,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 90,
                    "duration_ms": 1234,
                },
            ),
        ],
    )
    return AgentSession.objects.get(external_id="chat-calls")


def test_the_turns_table_links_each_turn_to_its_first_call(client_as, called) -> None:
    page = fragment(client_as("viewer").get(reverse("session", args=[called.pk])))
    first = LLMCall.objects.get(session=called, turn=1, call=0)
    assert f'href="{reverse("call", args=[called.pk, first.pk])}"' in page


def test_the_call_page_shows_everything_stored_about_the_call(client_as, called) -> None:
    target = LLMCall.objects.get(session=called, turn=1, call=1)
    response = client_as("viewer").get(reverse("call", args=[called.pk, target.pk]))
    assert response.status_code == 200
    page = fragment(response)
    assert SONNET in page and "req_third" in page
    assert "1234 ms" in page
    assert "Uncached input" in page and "Cache read" in page and "Output" in page
    assert "&quot;duration_ms&quot;: 1234" in page  # the raw usage as received
    assert 'class="cache-outcome">miss<' in page  # read nothing of what call 0 left
    sibling = LLMCall.objects.get(session=called, turn=1, call=0)
    assert f'href="{reverse("call", args=[called.pk, sibling.pk])}"' in page


def test_a_call_of_another_session_is_404(client_as, called, key) -> None:
    other = make_session(key, "chat-other", turns=1)
    foreign = LLMCall.objects.filter(session=other).first()
    assert foreign is not None
    client = client_as("viewer")
    assert client.get(reverse("call", args=[called.pk, foreign.pk])).status_code == 404


def test_the_call_api_answers_the_same_facts(make_agent, called, key) -> None:
    agent = make_agent("default")
    target = LLMCall.objects.get(session=called, turn=1, call=1)
    response = agent.get(f"/api/v1/sessions/chat-calls/calls/{target.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == target.pk and body["turn"] == 1 and body["call"] == 1
    assert body["request_id"] == "req_third" and body["model"] == SONNET
    assert body["latency_ms"] == 1234
    assert body["raw_usage"]["duration_ms"] == 1234
    assert body["cache_outcome"] == "miss" and body["miss"]["cause"]
    assert [b["bucket"] for b in body["buckets"]] == [
        "uncached_input",
        "cache_read",
        "cache_write_5m",
        "cache_write_1h",
        "output",
    ]
    assert body["buckets"][0]["tokens"] == 30_000
    assert target.cost_usd is not None
    assert body["cost_usd"] == money_text(target.cost_usd)

    outsider = make_agent("outsiders")
    assert outsider.get(f"/api/v1/sessions/chat-calls/calls/{target.pk}").status_code == 404
    assert agent.get("/api/v1/sessions/chat-calls/calls/999999999").status_code == 404
    assert agent.get("/api/v1/sessions/chat-calls/calls/0").status_code == 422


def test_the_call_route_is_in_the_openapi_document(client) -> None:
    schema = client.get("/api/openapi.json").json()
    assert "/api/v1/sessions/{session_id}/calls/{call_id}" in schema["paths"]
