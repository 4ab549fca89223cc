"""The sessions list reads no more than it shows: a capped count, models by index probes, and a
version built from the rows it draws (issue 18: the list at 100,000 sessions)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.forms import SessionFilterForm
from console.selectors import session_list as queries
from console.selectors.policies import load_policies
from console.selectors.session_list import session_models, sessions_page
from telemetry.models import AgentProfile, AgentSession
from telemetry.profiles import get_or_create_profile
from tests.db.conftest import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def _sessions(count: int, *, models: tuple[str, ...] = ("m-a",)) -> None:
    profile = get_or_create_profile(name="default")
    AgentSession.objects.bulk_create(
        AgentSession(profile=profile, external_id=f"s-{i:05d}", model=models[i % len(models)])
        for i in range(count)
    )


def _viewer() -> Client:
    return signed_in("viewer", "viewer-list")


def test_the_count_stops_at_the_cap_and_the_list_says_so(monkeypatch: Any) -> None:
    monkeypatch.setattr(queries, "SESSIONS_COUNT_CAP", 30)
    _sessions(31)
    listing = sessions_page(SessionFilterForm({}).filters())
    assert listing.page.paginator.count == 30
    assert listing.page.paginator.capped  # type: ignore[attr-defined]
    page = _viewer().get(reverse("sessions")).content.decode()
    assert "30+ sessions" in page


def test_under_the_cap_the_count_is_exact(monkeypatch: Any) -> None:
    monkeypatch.setattr(queries, "SESSIONS_COUNT_CAP", 30)
    _sessions(30)
    listing = sessions_page(SessionFilterForm({}).filters())
    assert listing.page.paginator.count == 30
    assert not listing.page.paginator.capped  # type: ignore[attr-defined]


def test_models_are_listed_once_each_sorted_without_the_empty_one() -> None:
    _sessions(40, models=("gpt-5", "", "claude-sonnet-4-5", "gpt-5", "claude-opus-4-6"))
    assert session_models() == ["claude-opus-4-6", "claude-sonnet-4-5", "gpt-5"]


def test_the_version_changes_with_a_shown_row_and_not_with_a_hidden_one(monkeypatch: Any) -> None:
    _sessions(30)
    filters = SessionFilterForm({}).filters()
    before = sessions_page(filters).version
    assert sessions_page(filters).version == before
    shown = sessions_page(filters).sessions[0]
    AgentSession.objects.filter(pk=shown.pk).update(pressure=0.91)
    changed = sessions_page(filters).version
    assert changed != before
    hidden = AgentSession.objects.exclude(
        pk__in=[s.pk for s in sessions_page(filters).sessions]
    ).first()
    assert hidden is not None
    AgentSession.objects.filter(pk=hidden.pk).update(model="other-model")
    assert sessions_page(filters).version == changed


def test_the_list_costs_the_same_queries_at_30_and_at_300_sessions(
    held_remembered_reads: None,
) -> None:
    client = _viewer()
    path = reverse("sessions")
    _sessions(30)
    client.get(path)
    with CaptureQueriesContext(connection) as small:
        assert client.get(path).status_code == 200
    AgentSession.objects.all().delete()
    _sessions(300, models=("a", "b", "c"))
    with CaptureQueriesContext(connection) as large:
        assert client.get(path).status_code == 200
    assert len(small.captured_queries) == len(large.captured_queries)


@pytest.mark.parametrize("query", [{}, {"q": "s-0001"}, {"q": "nothing"}, {"sort": "pressure"}])
def test_a_page_read_with_its_count_equals_counting_then_paging(
    monkeypatch: Any, query: dict[str, str]
) -> None:
    monkeypatch.setattr(queries, "SESSIONS_COUNT_CAP", 60)
    _sessions(80)
    filters = SessionFilterForm(query).filters()
    profiles = list(AgentProfile.objects.order_by("name"))
    policies = load_policies()

    def paginator() -> queries.CappedPaginator:
        return queries.CappedPaginator(
            queries.filtered_sessions(filters, profiles, policies),
            queries.SESSIONS_PER_PAGE,
            cap=60,
            matching=queries.matching_sessions(filters, profiles, policies),
        )

    for number in (1, 2, 3, 4, 99):
        counted, plain = paginator().counted_page(number), paginator().get_page(number)
        assert counted.number == plain.number
        assert [s.pk for s in counted.object_list] == [s.pk for s in plain.object_list]
        assert counted.paginator.count == plain.paginator.count
        assert counted.paginator.capped == plain.paginator.capped  # type: ignore[attr-defined]
    first = paginator()
    with CaptureQueriesContext(connection) as one:
        first.counted_page(1)
        assert first.count >= 0
    assert len(one.captured_queries) == 1  # the count rides along with the page's rows
