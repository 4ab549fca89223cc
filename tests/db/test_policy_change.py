"""A policy or window change on the real database: its preview counts reserve and window changes
with ingest's rules, a reserve no window in use leaves room for is refused naming both, and the
stored pressure is recomputed after the save (batched, idempotent, by a real worker)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from telemetry.errors import FieldError
from telemetry.keys import forget_key_checks
from telemetry.models import AgentProfile, AgentSession, Policy
from telemetry.policy_store import effective_policy, forget_policies, update_policy
from telemetry.profiles import set_window_overrides
from telemetry.session_state import recompute_pressure_batch
from tests.db.conftest import signed_in, wait_until

SONNET = "claude-sonnet-4-5-20250929"  # a 200,000-token catalogue window
SMALL_MODEL = "claude-haiku-4-5"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def record(session_id: str, context: int, **extra: Any) -> dict[str, Any]:
    """A call of `context` tokens with a 500-token reply: the next request is context + 500."""
    return {
        "session_id": session_id,
        "turn": 1,
        "model": SONNET,
        "usage": {"input_tokens": context, "output_tokens": 500},
        "appended_chars": 0,
        **extra,
    }


def admin() -> Client:
    return signed_in("admin", "policy-admin")


def page_text(response: Any) -> str:
    """The page's text as read (tags dropped, spaces collapsed); the confirm's digest kept."""
    html = response.content.decode()
    digest = re.search(r'name="confirm" value="([0-9a-f]+)"', html)
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    text = re.sub(r" ([.,;:)])", r"\1", text)
    return text + (f' name="confirm" value="{digest.group(1)}"' if digest else "")


def pressure_of(session_id: str) -> float | None:
    return AgentSession.objects.get(external_id=session_id).pressure


@pytest.mark.django_db
def test_case_2_the_preview_counts_a_reserve_change_and_the_save_asks_to_confirm(agent) -> None:
    agent.post("/api/v1/telemetry", record("at-45", 82_300))  # 82,800 / 184,000 = 45 %
    assert pressure_of("at-45") == pytest.approx(0.45)
    client = admin()
    values = {"reserved_output_tokens": "120000"}
    preview = page_text(client.post(reverse("policy_profile_preview", args=["default"]), values))
    assert "1 session would change band" in preview and "ok → over: 1" in preview
    assert "reserve of default 16,000 → 120,000" in preview
    response = client.post(reverse("policy_profile", args=["default"]), values)
    page = page_text(response)
    assert response.status_code == 200 and "Not saved yet" in page
    assert (
        effective_policy(AgentProfile.objects.get(name="default")).reserved_output_tokens == 16_000
    )
    digest = re.search(r'name="confirm" value="([0-9a-f]+)"', page)
    assert digest is not None
    response = client.post(
        reverse("policy_profile", args=["default"]), values | {"confirm": digest.group(1)}
    )
    assert response.status_code == 302
    policy = effective_policy(AgentProfile.objects.get(name="default"))
    assert policy.reserved_output_tokens == 120_000


@pytest.mark.django_db
def test_a_ttl_change_is_a_billing_change_and_asks_to_confirm(
    agent,
) -> None:
    agent.post("/api/v1/telemetry", record("billed", 10_000))
    # Claude Code's untiered writes stay at 5 minutes whatever the TTL: not a billing change
    agent.post("/api/v1/telemetry", record("claude", 10_000, metadata={"agent": "claude-code"}))
    assert AgentSession.objects.get(external_id="claude").agent_name == "claude-code"
    client = admin()
    preview = page_text(
        client.post(reverse("policy_profile_preview", args=["default"]), {"cache_ttl": "1h"})
    )
    assert "1 session would be billed at another cache tier: default 5m → 1h" in preview
    response = client.post(reverse("policy_profile", args=["default"]), {"cache_ttl": "1h"})
    assert response.status_code == 200 and "Not saved yet" in page_text(response)


@pytest.mark.django_db
def test_case_3_a_reserve_at_or_above_a_window_in_use_is_refused_naming_both(agent) -> None:
    agent.post("/api/v1/telemetry", record("small", 20_000, window_tokens=60_000))
    client = admin()
    values = {"reserved_output_tokens": "120000"}
    preview = page_text(client.post(reverse("policy_profile_preview", args=["default"]), values))
    assert "Would be refused" in preview
    response = client.post(reverse("policy_profile", args=["default"]), values)
    page = page_text(response)
    assert response.status_code == 200
    assert f"reserve 120,000 ≥ window 60,000 of model {SONNET}" in page
    profile = AgentProfile.objects.get(name="default")
    assert effective_policy(profile).reserved_output_tokens == 16_000
    # the write path refuses it whoever calls it (the global policy names the profile)
    with pytest.raises(FieldError) as refused:
        update_policy(profile=None, values={"reserved_output_tokens": 60_000})
    assert refused.value.field == "reserved_output_tokens"
    assert "reserve 60,000 ≥ window 60,000" in refused.value.message
    assert "(profile default)" in refused.value.message
    update_policy(profile=profile, values={"reserved_output_tokens": 59_999})
    # a configured window below the reserve is refused the same way
    with pytest.raises(FieldError) as refused:
        set_window_overrides(profile=profile, overrides={"*": 50_000})
    assert "reserve 59,999 ≥ window 50,000 of the profile's default window (*)" in str(
        refused.value
    )
    assert AgentProfile.objects.get(name="default").window_overrides == {}


@pytest.mark.django_db
def test_the_windows_form_previews_and_confirms_a_window_change(agent) -> None:
    agent.post("/api/v1/telemetry", record("windowed", 82_300))
    client = admin()
    url = reverse("profile_windows", args=["default"])
    response = client.post(url, {"windows": "* = 100000"})
    page = page_text(response)
    assert response.status_code == 200 and "Not saved yet" in page
    assert "1 session would change band" in page and "ok → compact: 1" in page
    assert "would get another usable window" in page
    assert AgentProfile.objects.get(name="default").window_overrides == {}
    digest = re.search(r'name="confirm" value="([0-9a-f]+)"', page)
    assert digest is not None
    stale = client.post(url, {"windows": "* = 90000", "confirm": digest.group(1)})
    assert stale.status_code == 200 and "changed since the preview" in page_text(stale)
    response = client.post(url, {"windows": "* = 100000", "confirm": digest.group(1)})
    assert response.status_code == 302
    assert AgentProfile.objects.get(name="default").window_overrides == {"*": 100_000}
    # refused in the form, naming both
    refused = client.post(url, {"windows": "* = 10000"})
    assert "reserve 16,000 ≥ window 10,000" in page_text(refused)


def left_unknown(profile: AgentProfile) -> None:
    """The state case 3 found: a reserve above the sessions' window, saved (a release without
    the refusal let it through; here written straight to the row), recomputed into "pressure
    unknown"."""
    Policy.objects.update_or_create(profile=profile, defaults={"reserved_output_tokens": 120_000})
    forget_policies()
    forget_key_checks()
    while recompute_pressure_batch(profile.pk) is not None:
        pass


@pytest.mark.django_db
def test_the_recompute_is_batched_idempotent_and_recovers_an_unknown_pressure(agent) -> None:
    profile = AgentProfile.objects.get(name="default")
    for n in range(4):
        agent.post("/api/v1/telemetry", record(f"s-{n}", 30_000 + n, window_tokens=100_000))
    agent.post("/api/v1/telemetry", record("s-wide", 40_000))
    left_unknown(profile)
    assert [pressure_of(f"s-{n}") for n in range(4)] == [None] * 4  # 100,000 ≤ 120,000 reserved
    assert pressure_of("s-wide") == pytest.approx(40_500 / 80_000)
    # revert; the recompute's own write path is run here in batches of two
    with transaction.atomic():
        update_policy(profile=profile, values={"reserved_output_tokens": None})
    assert recompute_pressure_batch(profile.pk, limit=2) == "s-1"
    assert pressure_of("s-0") == pytest.approx(30_500 / 84_000)
    assert pressure_of("s-2") is None  # not yet: the next batch
    after: str | None = "s-1"
    while after is not None:
        after = recompute_pressure_batch(profile.pk, after=after, limit=2)
    assert pressure_of("s-3") == pytest.approx(30_503 / 84_000)
    assert pressure_of("s-wide") == pytest.approx(40_500 / 184_000)
    session = AgentSession.objects.get(external_id="s-3")
    assert (session.window_tokens, session.window_source) == (100_000, "record")
    before = list(AgentSession.objects.order_by("pk").values_list("pressure", "window_tokens"))
    assert recompute_pressure_batch(profile.pk) is None  # a second run changes nothing
    assert list(AgentSession.objects.order_by("pk").values_list("pressure", "window_tokens")) == (
        before
    )


@pytest.mark.django_db
def test_a_window_change_is_recomputed_into_the_stored_window_and_its_source(agent) -> None:
    agent.post("/api/v1/telemetry", record("w", 82_300))
    profile = AgentProfile.objects.get(name="default")
    set_window_overrides(profile=profile, overrides={"*": 100_000})
    recompute_pressure_batch(profile.pk)
    session = AgentSession.objects.get(external_id="w")
    assert (session.window_tokens, session.window_source) == (100_000, "profile_default")
    assert session.pressure == pytest.approx(82_800 / 84_000)


@pytest.mark.celery_worker
def test_a_saved_revert_has_the_real_worker_recover_the_unknown_pressure(
    celery_worker, agent
) -> None:
    profile = AgentProfile.objects.get(name="default")
    agent.post("/api/v1/telemetry", record("stuck", 26_400, window_tokens=60_000))
    left_unknown(profile)
    assert pressure_of("stuck") is None
    # the revert through the console: it previews the recovery, asks to confirm, saves
    client = admin()
    url = reverse("policy_profile", args=["default"])
    revert = {"reserved_output_tokens": ""}  # blank: inherit the global 16,000 again
    page = page_text(client.post(url, revert))
    assert "Pressure becomes known again for 1 session" in page
    digest = re.search(r'name="confirm" value="([0-9a-f]+)"', page)
    assert digest is not None
    assert client.post(url, revert | {"confirm": digest.group(1)}).status_code == 302
    wait_until(lambda: pressure_of("stuck") is not None, what="the recomputed pressure")
    assert pressure_of("stuck") == pytest.approx(26_900 / 44_000)  # 60,000 − 16,000 reserved
