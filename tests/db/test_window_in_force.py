"""The window in force on the real database: catalogue standard vs opt-in, profile settings, a
limit learned from an overflow error, and what the API and the console say about it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from telemetry.keys import forget_key_checks
from telemetry.models import AgentProfile, AgentSession, CatalogueModel
from tests.db.conftest import signed_in

pytestmark = pytest.mark.django_db

OPUS = "claude-opus-4-6"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def record(session_id: str = "w-1", **overrides: Any) -> dict[str, Any]:
    # 165,000 tokens of context (1,000 + 160,000 read + 4,000 written) and a 500-token reply.
    base: dict[str, Any] = {
        "session_id": session_id,
        "turn": 0,
        "model": OPUS,
        "usage": {
            "input_tokens": 1_000,
            "cache_read_input_tokens": 160_000,
            "cache_creation_input_tokens": 4_000,
            "output_tokens": 500,
        },
        "appended_chars": 0,
    }
    base.update(overrides)
    return base


def set_windows(overrides: dict[str, int]) -> None:
    AgentProfile.objects.filter(name="default").update(window_overrides=overrides)
    forget_key_checks()  # keys (and their profile) are remembered per process for a second


def admin_client() -> Client:
    return signed_in("admin", "windows-admin")


def test_the_seeded_catalogue_keeps_opus_standard_window_and_its_opt_in_maximum_apart(agent):
    row = CatalogueModel.objects.get(model=OPUS)
    assert (row.window_tokens, row.max_window_tokens) == (200_000, 1_000_000)


def test_golden_a_200k_profile_override_turns_165k_into_pressure_above_080(agent):
    # The catalogue says 1M (what the model *can* take, as the old seed said): 17% pressure.
    CatalogueModel.objects.filter(model=OPUS).update(window_tokens=1_000_000)
    agent.post("/api/v1/telemetry", record("w-catalogue"))
    body = agent.get("/api/v1/sessions/w-catalogue").json()
    assert (body["window_tokens"], body["window_source"]) == (1_000_000, "catalogue")
    # projected = 165,000 + 500 reply; usable = 1,000,000 − 16,000 reserved
    assert body["pressure"] == pytest.approx(165_500 / 984_000)
    assert body["pressure_band"] == "ok"

    set_windows({OPUS: 200_000})
    agent.post("/api/v1/telemetry", record("w-profile"))
    body = agent.get("/api/v1/sessions/w-profile").json()
    assert (body["window_tokens"], body["window_source"]) == (200_000, "profile_model")
    assert body["window_source_label"] == "the profile's setting for this model"
    # 165,500 / (200,000 − 16,000) = 0.8995
    assert body["pressure"] == pytest.approx(165_500 / 184_000)
    assert body["pressure"] >= 0.8
    assert body["pressure_band"] == "compact"


def test_a_profile_default_applies_to_models_it_does_not_name(agent):
    set_windows({"*": 400_000})
    agent.post("/api/v1/telemetry", record())
    body = agent.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (400_000, "profile_default")
    agent.post("/api/v1/telemetry", record(turn=1, window_tokens=1_000_000))
    body = agent.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (1_000_000, "record")


def test_golden_an_overflow_text_teaches_the_session_its_window(agent, compactor):
    CatalogueModel.objects.filter(model=OPUS).update(window_tokens=1_000_000)
    compactor.post("/api/v1/telemetry", record())
    assert compactor.get("/api/v1/sessions/w-1").json()["pressure_band"] == "ok"

    response = compactor.post(
        "/api/v1/sessions/w-1/overflow",
        {"detail": "prompt is too long: 210345 tokens > 200000 maximum"},
    )
    assert response.status_code == 200, response.content
    body = compactor.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (200_000, "overflow")
    assert body["pressure"] == pytest.approx(165_500 / 184_000)
    session = AgentSession.objects.get(external_id="w-1")
    assert (session.learned_window_tokens, session.learned_window_model) == (200_000, OPUS)

    # The next report keeps the learned window, above the catalogue (and the profile).
    set_windows({"*": 900_000})
    compactor.post("/api/v1/telemetry", record(turn=1))
    body = compactor.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (200_000, "overflow")


def test_an_overflow_without_a_stated_limit_changes_no_window(compactor):
    compactor.post("/api/v1/telemetry", record())
    compactor.post("/api/v1/sessions/w-1/overflow", {"detail": "prompt is too long"})
    body = compactor.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (200_000, "catalogue")


def test_openai_wording_is_learned_too(compactor):
    compactor.post(
        "/api/v1/telemetry",
        record(
            model="gpt-5",
            usage={"input_tokens": 100_000, "output_tokens": 10, "total_tokens": 100_010},
        ),
    )
    compactor.post(
        "/api/v1/sessions/w-1/overflow",
        {
            "detail": "This model's maximum context length is 272000 tokens. However, your "
            "messages resulted in 280123 tokens."
        },
    )
    body = compactor.get("/api/v1/sessions/w-1").json()
    assert (body["window_tokens"], body["window_source"]) == (272_000, "overflow")


def test_admins_edit_a_profiles_windows_in_the_console_and_the_session_page_names_the_source(
    agent,
):
    client = admin_client()
    url = reverse("profile_windows", args=["default"])
    assert client.get(url).status_code == 200
    bad = client.post(url, {"windows": f"{OPUS} = 200000\nnonsense"})
    assert bad.status_code == 200
    assert "line 2" in bad.content.decode()
    assert AgentProfile.objects.get(name="default").window_overrides == {}

    saved = client.post(url, {"windows": f"{OPUS} = 200_000\n* = 300000"})
    assert saved.status_code == 302
    assert AgentProfile.objects.get(name="default").window_overrides == {
        "*": 300_000,
        OPUS: 200_000,
    }
    assert f"* = 300000\n{OPUS} = 200000" in client.get(url).content.decode()
    policy_page = client.get(reverse("policy")).content.decode()
    assert reverse("profile_windows", args=["default"]) in policy_page

    agent.post("/api/v1/telemetry", record())
    session = AgentSession.objects.get(external_id="w-1")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert 'data-window-source="profile_model"' in page
    assert "the profile&#x27;s setting for this model" in page
