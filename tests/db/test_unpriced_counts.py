"""Every spend figure says how many calls it could not price, linked to the catalogue, where the
"Unpriced models" table lists each missing model with a link to add it (issue 38, case 5).
PostgreSQL and SQLite alike."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from console.overview import load_overview
from console.selectors.unpriced import unpriced_calls, unpriced_models
from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession, CatalogueModel
from tests.db.conftest import signed_in
from tests.db.test_console_views import report
from tests.db.test_overview import calls

pytestmark = pytest.mark.django_db
UNKNOWN = "acme-coder-70b"
NOTE = "· 3 calls unpriced"


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
def admin() -> Client:
    return signed_in("admin", "keeper")


@pytest.fixture
def mixed(key: AgentKey) -> AgentSession:
    """A session of two priced calls and three of a model the catalogue has no price for."""
    start = timezone.now() - timedelta(minutes=50)
    priced = calls("mixed", 2, start=start)
    unknown = [
        {**record, "turn": record["turn"] + 2, "model": UNKNOWN}
        for record in calls("mixed", 3, start=start + timedelta(minutes=20))
    ]
    report(key, priced + unknown)
    report(key, calls("all-priced", 2, start=start))
    return AgentSession.objects.get(external_id="mixed")


def _link(html: str) -> bool:
    return f'href="{reverse("catalogue")}#unpriced"' in html


def test_the_selector_counts_unpriced_calls_from_the_rollups(mixed: AgentSession) -> None:
    assert mixed.unpriced_calls == 3 and mixed.cost_usd is not None
    assert unpriced_calls() == 3
    assert unpriced_calls(profile=mixed.profile) == 3
    assert unpriced_calls(since=timezone.now() + timedelta(hours=2)) == 0
    (model,) = unpriced_models()
    assert (model.model, model.calls, model.provider, model.priced_now) == (UNKNOWN, 3, None, False)


def test_the_overview_says_how_many_calls_its_spend_leaves_out(
    mixed: AgentSession, admin: Client
) -> None:
    found = load_overview("24h")
    assert found.unpriced == 3 and found.calls == 7
    (line,) = [line for line in found.lines if line.name == "default"]
    assert line.unpriced == 3
    html = admin.get("/", {"range": "24h"}).content.decode()
    assert html.count(NOTE) == 2  # the spend figure and the profile's row
    assert _link(html)


def test_the_sessions_list_session_page_and_cache_pages_say_it(
    mixed: AgentSession, admin: Client
) -> None:
    listing = admin.get(reverse("sessions")).content.decode()
    assert listing.count(NOTE) == 1 and _link(listing)  # the mixed session's row only
    page = admin.get(reverse("session", args=[mixed.pk])).content.decode()
    assert NOTE in page and _link(page)
    cache = admin.get(reverse("cache")).content.decode()
    assert NOTE in cache
    summary = admin.get(reverse("cache_summary")).content.decode()
    assert NOTE in summary


def test_the_api_counts_unpriced_calls_per_session_and_turn(mixed: AgentSession) -> None:
    key = create_agent_key(profile_name="default")
    client = Client()
    detail = client.get(
        "/api/v1/sessions/mixed", headers={"Authorization": f"Bearer {key.plaintext}"}
    ).json()
    assert detail["unpriced_calls"] == 3
    assert [t["unpriced_calls"] for t in detail["turns_series"]] == [0, 0, 1, 1, 1]
    assert [t["cost_usd"] is None for t in detail["turns_series"]] == [False] * 2 + [True] * 3


def test_the_catalogue_lists_unpriced_models_and_adds_one_from_its_link(
    mixed: AgentSession, admin: Client
) -> None:
    page = admin.get(reverse("catalogue"))
    (model,) = page.context["unpriced"]
    html = page.content.decode()
    add = f"{reverse('catalogue_new')}?model={UNKNOWN}"
    assert 'id="unpriced"' in html and f'href="{add}"' in html
    form = admin.get(add).context["form"]
    assert form.initial["model"] == form.initial["family"] == UNKNOWN
    # the form's price, once saved, prices calls from then on; the earlier ones stay unpriced
    response = admin.post(
        reverse("catalogue_new"),
        {
            "model": UNKNOWN,
            "provider": "openai",
            "family": UNKNOWN,
            "window_tokens": 128_000,
            "input": "1",
            "output": "2",
            "cache_read": "0.1",
        },
    )
    assert response.status_code == 302
    assert CatalogueModel.objects.filter(model=UNKNOWN).exists()
    (model,) = admin.get(reverse("catalogue")).context["unpriced"]
    assert model.priced_now and model.calls == 3


def test_a_fully_priced_fleet_shows_no_note(key: AgentKey, admin: Client) -> None:
    report(key, calls("all-priced", 3, start=timezone.now() - timedelta(minutes=30)))
    html = admin.get("/").content.decode()
    assert "unpriced-note" not in html
    catalogue = admin.get(reverse("catalogue")).content.decode()
    assert "Every call so far was priced." in catalogue
