"""Claude Code's and the Claude platform's own spans as calls, and one request from three sources.

OTLP exports in, stored calls out, on PostgreSQL and SQLite alike.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from telemetry.models import LLMCall, TurnKey
from tests.db.test_otlp import LOGS, T0, TRACES, _any, pb_span, pb_traces, post

TRACE = "2" * 32

# A `claude_code.llm_request` span (Claude Code's beta tracing): flat counts, string ints.
CC_SPAN: dict[str, Any] = {
    "session.id": "cc-1",
    "model": "claude-sonnet-4-5",
    "gen_ai.system": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "query_source": "repl_main_thread",
    "duration_ms": "4100",
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": "2000",
    "request_id": "req_011A",
}

# The same request as the Claude SDK's span and the Claude platform's span report it.
GENAI: dict[str, Any] = {
    "session.id": "cc-1",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "gen_ai.usage.input_tokens": 42012,
    "gen_ai.usage.cache_read.input_tokens": 40000,
    "gen_ai.usage.cache_creation.input_tokens": 2000,
    "gen_ai.usage.output_tokens": 300,
    "anthropic.request.id": "req_011A",
}

# And as Claude Code's `api_request` log event.
EVENT: dict[str, Any] = {
    "event.name": "api_request",
    "session.id": "cc-1",
    "prompt.id": "prompt-1",
    "model": "claude-sonnet-4-5",
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": "2000",
    "cost_usd": "0.0291",
    "request_id": "req_011A",
}


def _named(span, name: str):
    span.name = name
    return span


def _traces(*spans, service: str = "my-app") -> bytes:
    return pb_traces(*spans, resource={"service.name": service})


def _platform(attrs: dict[str, Any], *, span: str = "c" * 16) -> bytes:
    return _traces(
        _named(pb_span(attrs, trace=TRACE, span=span), "anthropic.messages.create"),
        service="claude-platform",
    )


def _logs(attrs: dict[str, Any]) -> bytes:
    export = ExportLogsServiceRequest()
    export.resource_logs.add().scope_logs.add().log_records.append(
        LogRecord(
            time_unix_nano=T0,
            body=AnyValue(string_value="claude_code.api_request"),
            attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
        )
    )
    return export.SerializeToString()


def _rejected(response) -> tuple[int, str]:
    if response.request["PATH_INFO"].endswith("/logs"):
        logs = ExportLogsServiceResponse.FromString(response.content).partial_success
        return logs.rejected_log_records, logs.error_message
    traces = ExportTraceServiceResponse.FromString(response.content).partial_success
    return traces.rejected_spans, traces.error_message


def test_a_claude_code_llm_request_span_is_a_call_with_anthropic_buckets(make_agent):
    agent = make_agent()
    body = _traces(_named(pb_span(CC_SPAN, trace=TRACE), "claude_code.llm_request"))

    first = post(agent, TRACES, body)
    again = post(agent, TRACES, body)

    assert first.status_code == again.status_code == 200
    assert _rejected(first) == (0, "")
    detail = agent.get("/api/v1/sessions/cc-1").json()
    assert detail["calls"] == 1
    (turn,) = detail["turns_series"]
    assert (turn["uncached_input"], turn["cache_read"], turn["cache_write_5m"]) == (12, 40000, 2000)
    assert turn["output"] == 300
    assert Decimal(detail["cost_usd"]) > 0
    call = LLMCall.objects.get()
    assert (call.request_id, call.provider) == ("cc:req_011A", "anthropic")
    assert call.usage_as_sent["duration_ms"] == 4100


def test_a_claude_platform_span_is_a_call(make_agent):
    agent = make_agent()

    response = post(agent, TRACES, _platform(GENAI))

    assert response.status_code == 200 and _rejected(response) == (0, "")
    call = LLMCall.objects.get()
    assert (call.uncached_input, call.cache_read, call.cache_write_5m, call.output) == (
        12,
        40000,
        2000,
        300,
    )
    assert call.request_id == "cc:req_011A"


def test_one_request_as_a_claude_code_event_an_sdk_span_and_a_platform_span_is_one_call(
    make_agent,
):
    agent = make_agent()

    event = post(agent, LOGS, _logs(EVENT))
    sdk = post(agent, TRACES, _traces(pb_span(GENAI, trace=TRACE, span="b" * 16)))
    platform = post(agent, TRACES, _platform(GENAI))

    assert event.status_code == sdk.status_code == platform.status_code == 200
    for response in (event, sdk, platform):
        assert _rejected(response) == (0, "")  # a duplicate, never a conflict
    (call,) = LLMCall.objects.all()
    assert call.request_id == "cc:req_011A"
    assert call.usage_as_sent["cost_usd"] == "0.0291"  # the event's, the richest report
    assert (call.uncached_input, call.cache_read, call.cache_write_5m, call.output) == (
        12,
        40000,
        2000,
        300,
    )
    # the spans' trace opened no turn of its own: the call sits in the prompt's turn
    assert list(TurnKey.objects.values_list("key", flat=True)) == ["prompt:prompt-1"]
    assert agent.get("/api/v1/sessions/cc-1").json()["calls"] == 1


def test_reports_of_one_request_arriving_together_keep_the_richer(make_agent):
    agent = make_agent()
    sdk = pb_span(GENAI, trace=TRACE, span="b" * 16)
    cc_span = _named(pb_span(CC_SPAN, trace=TRACE, span="d" * 16), "claude_code.llm_request")
    windowed = {**GENAI, "gen_ai.context.window_size": "180000"}  # a digit string, as JS sends
    together = pb_traces(
        sdk, cc_span, _named(pb_span(windowed, trace=TRACE, span="c" * 16), "platform")
    )

    first = post(agent, TRACES, together)
    later = post(agent, LOGS, _logs(EVENT))

    assert _rejected(first) == (0, "") and _rejected(later) == (0, "")
    (call,) = LLMCall.objects.all()
    assert call.window_tokens == 180000  # the span that carried the window was kept
    # The event, later, is a duplicate: the stored figures stay; only Claude Code's own cost,
    # which the stored report lacked and no total holds, is filled in.
    assert call.usage_as_sent["cost_usd"] == "0.0291"
    assert (
        "gen_ai.usage.input_tokens" in call.usage_as_sent
        and "input_tokens" not in call.usage_as_sent
    )
    answer = agent.get("/api/v1/sessions/cc-1/agent-cost").json()
    assert (answer["calls"], Decimal(answer["agent_cost_usd"])) == (1, Decimal("0.0291"))


def test_gen_ai_context_window_size_is_the_window_in_force_for_the_session(make_agent):
    agent = make_agent()
    attrs = {**GENAI, "anthropic.request.id": "", "gen_ai.context.window_size": 180000}

    assert post(agent, TRACES, _traces(pb_span(attrs, trace=TRACE))).status_code == 200

    detail = agent.get("/api/v1/sessions/cc-1").json()
    assert (detail["window_tokens"], detail["window_source"]) == (180000, "record")
