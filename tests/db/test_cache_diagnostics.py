"""The providers' own cache diagnostics from every door (JSON records, OTLP spans and Claude Code
events, Claude Code transcripts, the client's records): stored with the call, shown beside our
inferred cause in `GET …/cache/misses` and on the Cache panel, the provider's verdict as the
cause, and the agreement between the two per profile on the Cache page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from compaction.imports.store import import_file
from telemetry.models import AgentSession, LLMCall
from tests.db.conftest import signed_in
from tests.db.test_otlp import LOGS, T0, TRACES, _any, pb_span, pb_traces, post

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SONNET = "claude-sonnet-4-5"
MESSAGES_CHANGED = {
    "cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 12016}
}


def record(turn: int, *, read: int = 0, write: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "turn": turn,
        "model": SONNET,
        "at": (AT + timedelta(minutes=turn)).isoformat(),
        "usage": {
            "input_tokens": 100,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 200,
        },
        **extra,
    }


def ingest(agent, *records: dict[str, Any]) -> Any:
    response = agent.post("/api/v1/telemetry", {"records": list(records)})
    assert response.status_code in (200, 201), response.content
    return response.json()


def stored(session_id: str = "s1", turn: int = 1) -> tuple[Any, ...]:
    call = LLMCall.objects.get(session__external_id=session_id, turn=turn)
    return call.provider_miss_type, call.provider_missed_tokens, call.provider_diagnostics


# --- JSON records ---------------------------------------------------------------------------------


def test_a_json_records_anthropic_diagnostics_are_the_cause_and_ours_stays_inferred(agent):
    body = ingest(
        agent, record(0, write=50_000), record(1, write=52_000, diagnostics=MESSAGES_CHANGED)
    )
    assert [item["status"] for item in body["items"]] == ["created", "created"]
    assert stored() == ("messages_changed", 12016, {"anthropic": MESSAGES_CHANGED})
    assert stored(turn=0) == (None, None, None)

    response = agent.get("/api/v1/sessions/s1/cache/misses")

    assert response.status_code == 200
    (miss,) = response.json()["misses"]
    assert miss["cause"] == "prefix_break"
    assert miss["inferred_cause"] == "unexplained"
    assert (miss["provider_type"], miss["provider_missed_tokens"]) == ("messages_changed", 12016)
    assert miss["provider_cause"] == "prefix_break"
    assert miss["provider_diagnostics"] == {"anthropic": MESSAGES_CHANGED}
    assert miss["agrees"] is False
    assert miss["readings"] == "provider: messages_changed, 12,016 tokens; ours: unexplained"
    assert response.json()["agreement"] == {"compared": 1, "agreed": 0, "rate": 0.0}
    assert response.json()["premium_by_cause_usd"]["prefix_break"] == miss["premium_usd"]


def test_openai_responses_prompt_cache_diagnostics_are_read(agent):
    diagnostics = {
        "type": "cache_miss",
        "reason": "model_changed",
        "cache_missed_tokens": 40_000,
        "comparison_reusable_tokens": 40_000,
    }
    openai = {
        "session_id": "o1",
        "model": "gpt-5.1",
        "provider": "openai_responses",
    }
    usage = {"input_tokens": 41_000, "output_tokens": 10, "input_tokens_details": {}}
    ingest(
        agent,
        openai
        | {
            "turn": 0,
            "at": AT.isoformat(),
            "usage": usage | {"input_tokens_details": {"cached_tokens": 0}},
        },
        openai
        | {
            "turn": 1,
            "model": "gpt-5.1-mini",
            "at": (AT + timedelta(minutes=1)).isoformat(),
            "usage": usage | {"input_tokens_details": {"cached_tokens": 0}},
            "prompt_cache_diagnostics": diagnostics,
        },
    )
    assert stored("o1") == ("model_changed", 40_000, {"openai": diagnostics})

    (miss,) = agent.get("/api/v1/sessions/o1/cache/misses").json()["misses"]

    assert miss["cause"] == miss["inferred_cause"] == "model_switch"
    assert miss["agrees"] is True


def test_diagnostics_inside_the_usage_are_read_too(agent):
    usage_extra = {"diagnostics": MESSAGES_CHANGED}
    first = record(0, write=50_000)
    second = record(1, write=52_000)
    second["usage"] = {**second["usage"], **usage_extra}

    ingest(agent, first, second)

    assert stored()[:2] == ("messages_changed", 12016)


def test_a_provider_without_verdict_leaves_our_cause(agent):
    ingest(
        agent,
        record(0, write=50_000),
        record(1, write=52_000, diagnostics={"cache_miss_reason": {"type": "unavailable"}}),
    )

    (miss,) = agent.get("/api/v1/sessions/s1/cache/misses").json()["misses"]

    assert miss["cause"] == miss["inferred_cause"] == "unexplained"
    assert (miss["provider_type"], miss["provider_cause"], miss["agrees"]) == (
        "unavailable",
        None,
        None,
    )


def test_unreadable_diagnostics_are_a_422_naming_the_field_and_store_nothing(agent):
    bad = record(
        0,
        diagnostics={
            "cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": -3}
        },
    )

    response = agent.post("/api/v1/telemetry", bad)

    assert response.status_code == 422
    payload = response.json()
    named = payload.get("field") or payload["items"][0]["field"]
    assert named == "diagnostics.cache_miss_reason.cache_missed_input_tokens", payload
    assert not LLMCall.objects.exists()


def test_a_replay_with_its_diagnostics_is_a_duplicate(agent):
    one = record(0, write=50_000, diagnostics=MESSAGES_CHANGED)
    ingest(agent, one)

    body = ingest(agent, one)

    assert body["items"][0]["status"] == "duplicate"


# --- OTLP: spans and Claude Code events -----------------------------------------------------------

GENAI = {
    "gen_ai.conversation.id": "span-1",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "gen_ai.request.model": SONNET,
    "gen_ai.usage.input_tokens": 52_100,
    "gen_ai.usage.cache_creation.input_tokens": 52_000,
    "gen_ai.usage.output_tokens": 300,
}


def test_a_genai_span_carries_the_diagnosis_in_its_attributes(make_agent):
    agent = make_agent()
    spans = [
        pb_span(GENAI, trace="1" * 32, span="a" * 16),
        pb_span(
            GENAI
            | {
                "anthropic.diagnostics.cache_miss_reason.type": "system_changed",
                "anthropic.diagnostics.cache_miss_reason.cache_missed_input_tokens": 51_000,
            },
            trace="2" * 32,
            span="b" * 16,
            start=T0 + 60_000_000_000,
        ),
    ]

    response = post(agent, TRACES, pb_traces(*spans))

    assert response.status_code == 200
    calls = LLMCall.objects.filter(session__external_id="span-1").order_by("turn")
    assert [c.provider_miss_type for c in calls] == [None, "system_changed"]
    assert calls[1].provider_missed_tokens == 51_000
    (miss,) = agent.get("/api/v1/sessions/span-1/cache/misses").json()["misses"]
    assert miss["cause"] == "prefix_break" and miss["provider_type"] == "system_changed"


def _cc_event(attrs: dict[str, Any], at: int) -> LogRecord:
    return LogRecord(
        time_unix_nano=at,
        body=AnyValue(string_value="claude_code.api_request"),
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
    )


def test_a_claude_code_api_request_event_carries_the_diagnosis(make_agent):
    agent = make_agent()
    event = {
        "event.name": "api_request",
        "session.id": "cc-1",
        "prompt.id": "p1",
        "model": SONNET,
        "input_tokens": "12",
        "output_tokens": "300",
        "cache_read_tokens": "0",
        "cache_creation_tokens": "50000",
    }
    export = ExportLogsServiceRequest()
    export.resource_logs.add().scope_logs.add().log_records.extend(
        [
            _cc_event(event | {"request_id": "req_1"}, T0),
            _cc_event(
                event
                | {
                    "request_id": "req_2",
                    "prompt.id": "p2",
                    "cache_creation_tokens": "52000",
                    "cache_miss_reason": "tools_changed",
                    "cache_missed_input_tokens": "49000",
                },
                T0 + 60_000_000_000,
            ),
        ]
    )

    response = post(agent, LOGS, export.SerializeToString())

    assert response.status_code == 200
    call = LLMCall.objects.get(request_id="cc:req_2")
    assert (call.provider_miss_type, call.provider_missed_tokens) == ("tools_changed", 49_000)
    assert call.provider_diagnostics == {
        "anthropic": {
            "cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": "49000"}
        }
    }


# --- Claude Code transcripts ----------------------------------------------------------------------


def transcript_lines(session: str = "d1a2b3c4-1111-4222-8333-944455556666") -> str:
    def line(obj: dict[str, Any]) -> str:
        return json.dumps(obj) + "\n"

    def user(uuid: str, text: str, at: str) -> str:
        return line(
            {
                "type": "user",
                "uuid": uuid,
                "sessionId": session,
                "timestamp": at,
                "message": {"role": "user", "content": text},
            }
        )

    def assistant(uuid: str, msg: str, at: str, usage: dict[str, Any], **message: Any) -> str:
        return line(
            {
                "type": "assistant",
                "uuid": uuid,
                "sessionId": session,
                "timestamp": at,
                "requestId": f"req_{msg}",
                "message": {
                    "id": msg,
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5-20250929",
                    "content": [{"type": "text", "text": f"answer {msg}"}],
                    "stop_reason": "end_turn",
                    "usage": usage,
                    **message,
                },
            }
        )

    def usage(read: int, write: int) -> dict[str, Any]:
        return {
            "input_tokens": 10,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 50,
        }

    return (
        user("u1", "first", "2026-11-30T10:00:00.000Z")
        + assistant("a1", "msg_1", "2026-11-30T10:00:01.000Z", usage(0, 50_000))
        + user("u2", "second", "2026-11-30T10:01:00.000Z")
        + assistant(
            "a2",
            "msg_2",
            "2026-11-30T10:01:01.000Z",
            usage(0, 52_000),
            diagnostics=MESSAGES_CHANGED,
        )
    )


def run_import(profile: Any, path: Path) -> Any:
    with path.open("rb") as handle:
        return import_file(profile=profile, path=str(path), handle=handle)


def test_a_claude_code_transcripts_message_diagnostics_are_stored_with_the_call(
    make_agent, tmp_path
):
    agent = make_agent("imports")
    path = tmp_path / "d1a2b3c4-1111-4222-8333-944455556666.jsonl"
    path.write_text(transcript_lines())

    report = run_import(agent.key.profile, path)

    assert report.status == "imported" and report.calls == 2, report.as_dict()
    session = AgentSession.objects.get(profile=agent.key.profile)
    call = LLMCall.objects.get(session=session, provider_miss_type__isnull=False)
    assert (call.provider_miss_type, call.provider_missed_tokens) == ("messages_changed", 12016)


def test_a_transcripts_unreadable_diagnostics_are_noted_and_the_call_imported(make_agent, tmp_path):
    agent = make_agent("imports")
    path = tmp_path / "d1a2b3c4-1111-4222-8333-944455556666.jsonl"
    path.write_text(transcript_lines().replace('"type": "messages_changed"', '"type": 7'))

    report = run_import(agent.key.profile, path)

    assert report.calls == 2
    assert any("cache diagnostics not read" in text for _, text in report.notes)
    assert not LLMCall.objects.filter(provider_miss_type__isnull=False).exists()


# --- the client's records -------------------------------------------------------------------------


def test_the_clients_record_carries_a_responses_prompt_cache_diagnostics():
    from context_console.records import build_record

    response = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5.6",
        "usage": {"input_tokens": 2000, "output_tokens": 5},
        "prompt_cache_diagnostics": {"type": "cache_miss", "reason": "input_changed"},
    }

    built = build_record(response, session_id="c", turn=0, call=0)

    assert built["prompt_cache_diagnostics"] == response["prompt_cache_diagnostics"]
    assert "diagnostics" not in built


# --- the console ----------------------------------------------------------------------------------


@pytest.fixture
def viewer(db, settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    return signed_in("viewer", "viewer")


def test_the_cache_panel_shows_both_readings(agent, viewer):
    ingest(agent, record(0, write=50_000), record(1, write=52_000, diagnostics=MESSAGES_CHANGED))
    session = AgentSession.objects.get(external_id="s1")

    html = viewer.get(f"/sessions/{session.pk}/cache", headers={"HX-Request": "true"}).content
    text = html.decode()

    assert "provider: messages_changed, 12,016 tokens; ours: unexplained" in text
    assert "prefix changed" in text and "from the provider, ours differs" in text
    assert "our own reading agreed on 0 (0 %)" in text


def test_the_cache_page_reports_the_agreement_rate_per_profile(make_agent, viewer):
    from django.utils import timezone

    now = timezone.now() - timedelta(hours=1)
    agent = make_agent()
    fleet = make_agent("fleet")
    at = [(now + timedelta(minutes=m)).isoformat() for m in range(4)]
    ingest(
        agent,
        record(0, write=50_000) | {"at": at[0]},
        # the model switch both readings name: agreed
        record(1, write=52_000, model="claude-haiku-4-5")
        | {"at": at[1], "diagnostics": {"cache_miss_reason": {"type": "model_changed"}}},
        # ours: unexplained, the provider: the messages changed: differs
        record(2, write=54_000, model="claude-haiku-4-5")
        | {"at": at[2], "diagnostics": MESSAGES_CHANGED},
    )
    ingest(fleet, record(0, write=50_000) | {"at": at[0]}, record(1, write=52_000) | {"at": at[1]})

    html = viewer.get("/cache/").content.decode()

    assert "Agreement with provider" in html
    assert "50 %" in html and "1 of 2" in html
    assert "no provider verdicts" in html  # the fleet profile sent none


def test_the_benchs_miss_fields_are_the_reports():
    from bench.cache import FIELDS
    from compaction.cache_report import _CALL_FIELDS

    assert FIELDS == _CALL_FIELDS


def test_a_span_whose_diagnosis_does_not_read_is_rejected_naming_the_field(make_agent):
    agent = make_agent()
    attrs = GENAI | {"cache_miss_reason": "tools_changed", "cache_missed_input_tokens": "many"}

    response = post(agent, TRACES, pb_traces(pb_span(attrs)))

    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1
    assert "diagnostics.cache_miss_reason.cache_missed_input_tokens" in partial.error_message
    assert not LLMCall.objects.exists()
