"""Provider-side compaction and context editing through the ingest API on the real database:
billed in full, recorded in the session's history with origin "provider", idempotent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from telemetry.models import AgentSession, ContextEvent, LLMCall
from tests.db.conftest import signed_in
from tests.unit.telemetry.test_provider_context import COMPACTED

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def record(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": "p-1",
        "turn": 3,
        "call": 0,
        "model": SONNET,
        "request_id": "req_compacted",
        "usage": COMPACTED,
        "appended_chars": 0,
        "at": "2026-11-30T22:00:00Z",
    }
    base.update(overrides)
    return base


def test_golden_a_compacted_anthropic_call_is_billed_in_full_and_recorded(agent):
    response = agent.post("/api/v1/telemetry", record())
    assert response.status_code == 201, response.content
    call = LLMCall.objects.get()
    # context = the final iteration: 3,000 uncached + 20,000 written
    assert (call.context_tokens, call.uncached_input, call.cache_write_5m) == (
        23_000,
        3_000,
        20_000,
    )
    assert "billed_iterations" in call.flags
    # hand-computed: $0.039 input + $0.051 read + $0.075 write + $0.0705 output
    assert call.cost_usd == Decimal("0.2355")
    assert (call.cost_uncached_input, call.cost_output) == (Decimal("0.039"), Decimal("0.0705"))
    assert call.no_cache_cost_usd == Decimal("0.6795")
    session = agent.get("/api/v1/sessions/p-1").json()
    assert session["cost_usd"] == "0.235500000"
    assert session["current_context_tokens"] == 23_000

    (event,) = ContextEvent.objects.all()
    assert (event.kind, event.origin, event.source) == ("compaction", "provider", "telemetry")
    assert (event.tokens_before, event.tokens_after, event.turn) == (180_000, 23_000, 3)
    assert event.call_id == call.pk
    assert event.source_key == "req_compacted:iteration:0"

    replay = agent.post("/api/v1/telemetry", record())
    assert replay.json()["items"][0]["status"] == "duplicate"
    assert ContextEvent.objects.count() == 1 and LLMCall.objects.count() == 1


def test_applied_edits_are_recorded_as_provider_context_edits(agent):
    edits = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 8,
                "cleared_input_tokens": 50_000,
            }
        ]
    }
    usage = {
        "input_tokens": 1_200,
        "cache_read_input_tokens": 45_000,
        "cache_creation_input_tokens": 3_000,
        "output_tokens": 800,
    }
    response = agent.post(
        "/api/v1/telemetry", record(usage=usage, context_management=edits, request_id=None)
    )
    assert response.status_code == 201, response.content
    (event,) = ContextEvent.objects.all()
    assert (event.kind, event.origin, event.trigger) == (
        "context_edit",
        "provider",
        "clear_tool_uses_20250919",
    )
    assert (event.tokens_before, event.tokens_after) == (99_200, 49_200)
    assert event.detail["cleared_tool_uses"] == 8
    assert event.summary == "cleared 8 tool uses, 50,000 input tokens"
    assert event.source_key == "turn:3:call:0:edit:0"


def test_an_openai_compaction_item_and_the_compact_endpoints_usage(agent):
    usage = {
        "input_tokens": 120_000,
        "input_tokens_details": {"cached_tokens": 100_000},
        "output_tokens": 2_000,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 122_000,
    }
    items = [{"type": "compaction", "id": "cmp_001", "encrypted_content": "gAAAA"}]
    response = agent.post(
        "/api/v1/telemetry",
        record(model="gpt-5", usage=usage, output_items=items, request_id="resp_compact"),
    )
    assert response.status_code == 201, response.content
    # 20,000 × $1.25 + 100,000 × $0.125 + 2,000 × $10 per million
    assert LLMCall.objects.get().cost_usd == Decimal("0.0575")
    (event,) = ContextEvent.objects.all()
    assert (event.kind, event.origin, event.tokens_before, event.tokens_after) == (
        "compaction",
        "provider",
        120_000,
        None,
    )


def test_bad_iterations_are_refused_naming_the_field(agent):
    bad = {**COMPACTED, "iterations": [{"type": "compaction", "output_tokens": 5}]}
    response = agent.post("/api/v1/telemetry", record(usage=bad))
    assert response.status_code == 422
    assert "usage.iterations.0.input_tokens" in response.content.decode()
    assert not LLMCall.objects.exists() and not ContextEvent.objects.exists()


def test_the_session_page_lists_the_provider_compaction(agent):
    agent.post("/api/v1/telemetry", record())
    client = signed_in("viewer", "viewer-p")
    session = AgentSession.objects.get(external_id="p-1")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert 'class="event-provider"' in page
    assert "180,000" in page and "server-side compaction" in page


def test_a_long_request_id_keeps_every_event_of_the_call_apart(agent):
    edits = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_input_tokens": 10}]}
    response = agent.post(
        "/api/v1/telemetry", record(request_id="r" * 200, context_management=edits)
    )
    assert response.status_code == 201, response.content
    keys = sorted(ContextEvent.objects.values_list("source_key", flat=True))
    assert len(keys) == 2 and all(len(key) <= 200 for key in keys)
    assert keys[0].endswith(":edit:0") and keys[1].endswith(":iteration:0")
    agent.post("/api/v1/telemetry", record(request_id="r" * 200, context_management=edits))
    assert ContextEvent.objects.count() == 2
