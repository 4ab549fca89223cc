"""Agent- and provider-side context events: one write path, idempotent, shown on the session page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.urls import reverse

from telemetry.catalogue import seed_catalogue
from telemetry.events import record_context_event, session_context_events
from telemetry.ingest.pipeline import ingest_records
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession, ContextEvent
from tests.db.conftest import signed_in

pytestmark = pytest.mark.django_db
AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def session() -> AgentSession:
    seed_catalogue()
    key = create_agent_key(profile_name="default").key
    record = {
        "session_id": "ev-1",
        "turn": 1,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 900, "output_tokens": 100},
    }
    ingest_records(key=key, raw_items=[record], batch=True)
    return AgentSession.objects.get(external_id="ev-1")


def test_a_replayed_event_is_stored_once(session: AgentSession) -> None:
    first, created = record_context_event(
        session,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="line-7",
        at=AT,
        trigger="auto",
        tokens_before=167_000,
        tokens_after=36_000,
        summary="The user asked for a refactor of the billing module.",
    )
    again, created_again = record_context_event(
        session,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="line-7",
        at=AT,
    )
    assert created and not created_again
    assert again.pk == first.pk and again.tokens_freed == 131_000
    assert list(session_context_events(session)) == [first]


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("kind", {"kind": "rewrite"}),
        ("origin", {"origin": "operator"}),
        ("source_key", {"source_key": ""}),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    session: AgentSession, field: str, values: dict[str, str]
) -> None:
    arguments: dict[str, Any] = {
        "kind": "compaction",
        "origin": "provider",
        "source": "telemetry",
        "source_key": "k",
        "at": AT,
        **values,
    }
    with pytest.raises(ValueError, match=f"^{field}:"):
        record_context_event(session, **arguments)
    assert ContextEvent.objects.count() == 0


def test_the_session_page_lists_agent_and_provider_compactions(session: AgentSession) -> None:
    record_context_event(
        session,
        kind="compaction",
        origin="provider",
        source="telemetry",
        source_key="req-1#0",
        at=AT,
        tokens_before=180_000,
        tokens_after=20_000,
        summary="Summary of the work so far",
    )
    client = signed_in("viewer", "viewer-1")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert "Agent and provider compactions" in page
    assert "Summary of the work so far" in page
    assert "180,000" in page or "180k" in page
