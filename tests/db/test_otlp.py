"""The OTLP/HTTP on-ramp end to end: the real OpenTelemetry SDK exporters against a live
server, and hand-built payloads for the edges (protobuf and JSON, gzip, replays, bad bodies)."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client, override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from pytest_django.live_server_helper import LiveServer

from telemetry.models import AgentSession, ContextEvent, LLMCall, TurnKey
from telemetry.seeding import ensure_defaults
from tests.db.conftest import signed_in

TRACES = "/api/v1/otlp/v1/traces"
LOGS = "/api/v1/otlp/v1/logs"
METRICS = "/api/v1/otlp/v1/metrics"
T0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z

DONE_WHEN: dict[str, Any] = {
    "gen_ai.conversation.id": "s1",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "gen_ai.usage.input_tokens": 1167,
    "gen_ai.usage.cache_creation.input_tokens": 1163,
    "gen_ai.usage.output_tokens": 50,
}


# --- hand-built payloads -----------------------------------------------------------------------


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def pb_span(attrs: dict[str, Any], *, trace: str = "1" * 32, span: str = "a" * 16, start=T0):
    return PbSpan(
        trace_id=bytes.fromhex(trace),
        span_id=bytes.fromhex(span),
        name="chat",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000_000,
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
    )


def pb_traces(*spans: PbSpan, resource: dict[str, Any] | None = None) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for k, v in (resource or {}).items():
        resource_spans.resource.attributes.append(KeyValue(key=k, value=_any(v)))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def json_span(attrs: dict[str, Any], *, trace="1" * 32, span="a" * 16, start=T0) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}  # int64 as a string, as OTLP JSON writes it
        return {"stringValue": str(v)}

    return {
        "traceId": trace,
        "spanId": span,
        "name": "chat",
        "kind": 3,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000_000),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
    }


def json_traces(*spans: dict[str, Any]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()


def post(agent, path: str, body: bytes, *, json_body=False, gzipped=False, **headers):
    extra = {"Content-Encoding": "gzip"} if gzipped else {}
    return agent.client.post(
        path,
        gzip.compress(body) if gzipped else body,
        content_type="application/json" if json_body else "application/x-protobuf",
        headers={**agent.headers(), **extra, **headers},
    )


def partial(response) -> tuple[int, str]:
    if response["Content-Type"].startswith("application/json"):
        found = json.loads(response.content).get("partialSuccess", {})
        count = found.get("rejectedSpans", found.get("rejectedLogRecords", 0))
        return int(count), found.get("errorMessage", "")
    parsed = ExportTraceServiceResponse.FromString(response.content)
    return parsed.partial_success.rejected_spans, parsed.partial_success.error_message


# --- the "done when", through hand-built protobuf ---------------------------------------


def test_done_when_a_genai_span_shows_as_4_uncached_and_1163_written_priced_and_once(make_agent):
    agent = make_agent()
    body = pb_traces(pb_span(DONE_WHEN))

    first = post(agent, TRACES, body)
    again = post(agent, TRACES, body)

    assert first.status_code == again.status_code == 200
    assert first["Content-Type"] == "application/x-protobuf"
    assert partial(first) == (0, "")
    detail = agent.get("/api/v1/sessions/s1").json()
    assert detail["calls"] == 1
    (turn,) = detail["turns_series"]
    assert (turn["uncached_input"], turn["cache_write_5m"], turn["output"]) == (4, 1163, 50)
    assert Decimal(detail["cost_usd"]) > 0
    call = LLMCall.objects.get()
    assert call.request_id == f"{'1' * 32}/{'a' * 16}" and call.flags == []


def test_json_encoding_int64_strings_gzip_and_an_answer_in_json(make_agent):
    agent = make_agent()
    attrs = {**DONE_WHEN, "gen_ai.conversation.id": "js"}
    response = post(agent, TRACES, json_traces(json_span(attrs)), json_body=True, gzipped=True)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {}
    assert agent.get("/api/v1/sessions/js").json()["turns_series"][0]["uncached_input"] == 4


def test_non_genai_spans_are_ignored_not_rejected_and_missing_attributes_are_rejected(make_agent):
    agent = make_agent()
    no_model = {k: v for k, v in DONE_WHEN.items() if k != "gen_ai.request.model"}
    bad_count = {**DONE_WHEN, "gen_ai.usage.output_tokens": "many"}
    body = pb_traces(
        pb_span({"http.route": "/"}, span="b" * 16),
        pb_span(no_model, span="c" * 16),
        pb_span(bad_count, span="d" * 16),
        pb_span(DONE_WHEN, span="e" * 16),
    )
    response = post(agent, TRACES, body)
    assert response.status_code == 200
    rejected, message = partial(response)
    assert rejected == 2
    assert "item 1: gen_ai.request.model: is required" in message
    assert "item 2: usage.gen_ai.usage.output_tokens" in message
    assert "ignored 1 spans that are not LLM calls" in message
    assert LLMCall.objects.count() == 1
    # A session whose every call was refused is not left behind, empty.
    refused = {**bad_count, "gen_ai.conversation.id": "refused"}
    assert partial(post(agent, TRACES, pb_traces(pb_span(refused, span="f" * 16))))[0] == 1
    assert not AgentSession.objects.filter(external_id="refused").exists()


def test_a_session_or_model_sent_as_an_array_or_a_map_is_refused_naming_it(make_agent):
    """OTLP lets an attribute be a kvlistValue or arrayValue; as a session id or a model it names
    nothing, so the span is refused naming the attribute, in protobuf and in JSON, and the rest
    of the export is stored."""
    agent = make_agent()
    nested = pb_span(DONE_WHEN, span="b" * 16)
    for attribute in nested.attributes:
        if attribute.key == "gen_ai.conversation.id":
            attribute.value.CopyFrom(
                AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=_any("v"))]))
            )
    response = post(agent, TRACES, pb_traces(nested, pb_span(DONE_WHEN, span="c" * 16)))
    assert partial(response)[0] == 1
    assert "item 0: gen_ai.conversation.id: must be a single value" in partial(response)[1]

    listed = json_span({**DONE_WHEN, "gen_ai.conversation.id": "json"}, span="d" * 16)
    for attribute in listed["attributes"]:
        if attribute["key"] == "gen_ai.request.model":
            attribute["value"] = {"arrayValue": {"values": [{"stringValue": "claude"}]}}
    answered = post(agent, TRACES, json_traces(listed), json_body=True)
    assert partial(answered)[0] == 1
    assert "item 0: gen_ai.request.model: must be a single value" in partial(answered)[1]
    assert list(LLMCall.objects.values_list("session__external_id", "model")) == [
        (DONE_WHEN["gen_ai.conversation.id"], DONE_WHEN["gen_ai.request.model"])
    ]


def test_exclusive_and_inclusive_counts(make_agent):
    agent = make_agent()
    inclusive = {**DONE_WHEN, "gen_ai.conversation.id": "inc"}
    exclusive = {**DONE_WHEN, "gen_ai.conversation.id": "exc", "gen_ai.usage.input_tokens": 4}
    post(agent, TRACES, pb_traces(pb_span(inclusive), pb_span(exclusive, span="b" * 16)))
    inc = LLMCall.objects.get(session__external_id="inc")
    exc = LLMCall.objects.get(session__external_id="exc")
    assert (inc.uncached_input, inc.cache_write_5m, inc.flags) == (4, 1163, [])
    assert (exc.uncached_input, exc.cache_write_5m) == (4, 1163)
    assert exc.flags == ["otel_input_exclusive"]


def test_turns_are_traces_numbered_by_start_and_calls_by_start_within_them(make_agent):
    agent = make_agent()
    attrs = {**DONE_WHEN, "gen_ai.conversation.id": "t"}
    # Export 1: two calls of trace B (started later) and the second call of trace A.
    post(
        agent,
        TRACES,
        pb_traces(
            pb_span(attrs, trace="b" * 32, span="b1" * 8, start=T0 + 100),
            pb_span(attrs, trace="b" * 32, span="b2" * 8, start=T0 + 200),
            pb_span(attrs, trace="a" * 32, span="a2" * 8, start=T0 + 20),
        ),
    )
    # Export 2: trace A's first call arrives late; a replay of b2 comes along.
    post(
        agent,
        TRACES,
        pb_traces(
            pb_span(attrs, trace="a" * 32, span="a1" * 8, start=T0 + 10),
            pb_span(attrs, trace="b" * 32, span="b2" * 8, start=T0 + 200),
        ),
    )
    rows = {
        (c.request_id or "").split("/")[1][:2]: (c.turn, c.call)
        for c in LLMCall.objects.filter(session__external_id="t")
    }
    # numbered from 0, as on every door (docs/concepts.md)
    assert rows == {"a2": (0, 0), "b1": (1, 0), "b2": (1, 1), "a1": (0, 1)}
    assert TurnKey.objects.filter(session__external_id="t").count() == 2


def test_5000_spans_in_one_export_are_5000_calls_and_a_replay_adds_none(make_agent, settings):
    agent = make_agent()
    settings.OTLP_MAX_ITEMS_PER_EXPORT = 5002  # a raised cap is honoured: 5000 and 2 envelopes
    spans = [
        pb_span(
            {**DONE_WHEN, "gen_ai.conversation.id": f"big-{i % 10}"},
            trace=f"{i // 50:032x}",
            span=f"{i + 1:016x}",
            start=T0 + i,
        )
        for i in range(5000)
    ]
    body = pb_traces(*spans)
    assert post(agent, TRACES, body, gzipped=True).status_code == 200
    assert LLMCall.objects.count() == 5000
    replay = post(agent, TRACES, body, gzipped=True)
    assert partial(replay) == (0, "")
    assert LLMCall.objects.count() == 5000
    assert AgentSession.objects.get(external_id="big-3").calls_count == 500


def test_a_span_again_in_a_later_chunk_of_its_export_is_its_duplicate_or_conflict(
    make_agent, settings
):
    """An export of more calls than one ingest chunk (`store.CHUNK`): a span again in a later
    chunk, of a call the first chunk stored or one stored before, is a duplicate, and a changed
    one a conflict of its request id, as within one chunk."""
    from telemetry.otlp.store import CHUNK

    agent = make_agent()
    settings.OTLP_MAX_ITEMS_PER_EXPORT = CHUNK + 4  # and the resource and scope envelopes

    def span(i: int, output: int = 50) -> Any:
        attrs = {
            **DONE_WHEN,
            "gen_ai.conversation.id": "chunks",
            "gen_ai.usage.output_tokens": output,
        }
        return pb_span(attrs, trace=f"{i // 10:032x}", span=f"{i + 1:016x}", start=T0 + i)

    first = [span(i) for i in range(CHUNK)]
    response = post(agent, TRACES, pb_traces(*first, span(0)))
    assert response.status_code == 200 and partial(response) == (0, "")
    assert LLMCall.objects.count() == CHUNK
    response = post(agent, TRACES, pb_traces(span(CHUNK), *first[1:], span(1), span(CHUNK, 51)))
    rejected, message = partial(response)
    assert response.status_code == 200 and rejected == 1, message
    assert f"item {CHUNK + 1}: request_id: already stored with different content" in message
    assert LLMCall.objects.count() == CHUNK + 1


def test_a_changed_span_under_a_stored_id_is_rejected_as_a_conflict(make_agent):
    agent = make_agent()
    post(agent, TRACES, pb_traces(pb_span(DONE_WHEN)))
    changed = {**DONE_WHEN, "gen_ai.usage.output_tokens": 51}
    rejected, message = partial(post(agent, TRACES, pb_traces(pb_span(changed))))
    assert rejected == 1 and "already stored with different content" in message


def test_compacted_span_shows_in_the_session_compaction_history(make_agent):
    agent = make_agent()
    big = {**DONE_WHEN, "gen_ai.usage.input_tokens": 90_000}
    compacted = {**DONE_WHEN, "gen_ai.conversation.compacted": True}
    export = pb_traces(pb_span(big, span="1" * 16, start=T0), pb_span(compacted, start=T0 + 5))
    post(agent, TRACES, export)
    post(agent, TRACES, export)
    (event,) = ContextEvent.objects.all()
    assert (event.kind, event.origin, event.source, event.turn) == (
        "compaction",
        "agent",
        "otlp",
        0,
    )
    assert event.call == LLMCall.objects.get(call=1)
    # Before: the previous call's request; after: the compacted call's own.
    assert (event.tokens_before, event.tokens_after) == (90_000, 1167)


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"this is not OTLP", "application/x-protobuf", 400),
        (b'{"records": [1]}', "application/json", 400),
        (b"{broken", "application/json", 400),
        (b"hello", "text/plain", 415),
    ],
)
def test_a_body_that_is_not_otlp_is_refused_with_a_status_body(
    make_agent, body, content_type, status
):
    agent = make_agent()
    response = agent.client.post(TRACES, body, content_type=content_type, headers=agent.headers())
    assert response.status_code == status
    if content_type == "application/json":
        assert json.loads(response.content)["message"].startswith("body: ")


def test_keys_auth_and_profiles(make_agent):
    agent = make_agent("fleet")
    outsider = make_agent("desktop")
    body = pb_traces(pb_span(DONE_WHEN))
    no_key = Client().post(TRACES, body, content_type="application/x-protobuf")
    assert no_key.status_code == 401 and no_key["WWW-Authenticate"] == "Bearer"
    wrong = Client().post(
        TRACES,
        body,
        content_type="application/x-protobuf",
        headers={"Authorization": "Bearer clc_nope_nope"},
    )
    assert wrong.status_code == 401
    assert post(agent, TRACES, body).status_code == 200
    # A key of another profile neither sees nor touches the first profile's session.
    assert outsider.get("/api/v1/sessions/s1").status_code == 404
    assert post(outsider, TRACES, body).status_code == 200
    assert sorted(AgentSession.objects.values_list("profile__name", "calls_count")) == [
        ("desktop", 1),
        ("fleet", 1),
    ]


def test_over_the_size_limit_is_413_and_a_gzip_bomb_too(make_agent, settings):
    agent = make_agent()
    settings.TELEMETRY_MAX_REQUEST_BYTES = 64 * 1024
    settings.OTLP_MAX_DECODED_BYTES = 256 * 1024
    big = post(agent, TRACES, b"\0" * (65 * 1024))
    assert big.status_code == 413
    bomb = post(agent, TRACES, b"\0" * (300 * 1024), gzipped=True)
    assert bomb.status_code == 413


def test_the_item_cap_defaults_to_the_json_apis_batch_cap(settings):
    from telemetry.schemas import MAX_BATCH

    assert settings.OTLP_MAX_ITEMS_PER_EXPORT == MAX_BATCH


@pytest.mark.parametrize("json_body", [False, True])
def test_an_export_over_the_item_cap_is_413_naming_the_limit_and_nothing_is_stored(
    make_agent, settings, json_body
):
    agent = make_agent()
    settings.OTLP_MAX_ITEMS_PER_EXPORT = 10
    spans = [
        {**DONE_WHEN, "gen_ai.response.id": f"r{i}", "gen_ai.conversation.id": "cap"}
        for i in range(9)  # with its resource and scope: 11 > 10
    ]

    def body(attrs: list[dict[str, Any]]) -> bytes:
        if json_body:
            return json_traces(*(json_span(a, span=f"{i:016x}") for i, a in enumerate(attrs)))
        return pb_traces(*(pb_span(a, span=f"{i:016x}") for i, a in enumerate(attrs)))

    over = post(agent, TRACES, body(spans), json_body=json_body)
    at_cap = post(agent, TRACES, body(spans[:8]), json_body=json_body)

    assert over.status_code == 413
    if json_body:
        assert "OTLP_MAX_ITEMS_PER_EXPORT=10" in json.loads(over.content)["message"]
    else:
        assert b"OTLP_MAX_ITEMS_PER_EXPORT=10" in over.content
    assert at_cap.status_code == 200 and partial(at_cap) == (0, "")
    assert LLMCall.objects.count() == 8


def test_a_million_empty_spans_in_a_small_body_are_counted_before_decoding(make_agent):
    agent = make_agent()
    # 10**6 empty spans, two bytes each on the wire, in one scope, then bytes no decoder
    # accepts: the count refuses the export (413) before a decoder sees it (it would say 400).
    spans = b"\x12\x00" * 10**6
    scope = b"\x12" + _varint(len(spans)) + spans
    body = b"\x0a" + _varint(len(scope)) + scope + b"\xff" * 16

    response = post(agent, TRACES, body)

    assert response.status_code == 413
    assert b"OTLP_MAX_ITEMS_PER_EXPORT=1000" in response.content


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_a_gzip_bomb_is_inflated_only_to_the_cap(make_agent, settings):
    agent = make_agent()
    cap = 1024 * 1024
    settings.OTLP_MAX_DECODED_BYTES = cap
    inflated = 256 * cap
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * cap
    bomb = b"".join(packer.compress(chunk) for _ in range(inflated // cap)) + packer.flush()
    assert len(bomb) < cap  # under the wire limit: only the inflated size refuses it
    assert post(agent, TRACES, b"").status_code == 200  # imports and first-request caches
    tracemalloc.start()
    try:
        response = agent.client.post(
            TRACES,
            bomb,
            content_type="application/x-protobuf",
            headers={**agent.headers(), "Content-Encoding": "gzip"},
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 413
    assert b"limit of 1048576 bytes" in response.content
    assert peak < 3 * cap, peak  # the cap and the body's copies, not the 256 x cap it inflates to


def test_rate_limited_exports_get_429_with_retry_after(make_agent, settings):
    from django.core.cache import cache

    cache.clear()
    agent = make_agent()
    settings.API_RATE_LIMIT_PER_MINUTE = 1
    body = pb_traces(pb_span(DONE_WHEN))
    assert post(agent, TRACES, body).status_code == 200
    limited = post(agent, TRACES, body)
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1


def test_metrics_are_answered_200_with_every_point_rejected(make_agent):
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint

    agent = make_agent()
    request = ExportMetricsServiceRequest()
    request.resource_metrics.add().scope_metrics.add().metrics.append(
        Metric(name="x", gauge=Gauge(data_points=[NumberDataPoint(as_int=1)] * 4))
    )
    response = post(agent, METRICS, request.SerializeToString(), json_body=False)
    assert response.status_code == 200
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    answer = ExportMetricsServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_data_points == 4
    assert "export traces" in answer.partial_success.error_message


# --- the real SDK exporters against a live server -----------------------------------------------


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server with the HTTPS redirect off (see tests/db/test_simulate.py)."""
    with override_settings(SECURE_SSL_REDIRECT=False):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


def _tracer(exporter):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "otlp-test"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=512))
    return provider


def _emit_chat_spans(provider, conversation: str, n: int) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        for _ in range(n):
            with tracer.start_as_current_span(
                "chat claude-sonnet-4-5",
                attributes={**DONE_WHEN, "gen_ai.conversation.id": conversation},
            ):
                pass
    assert provider.force_flush(10_000)
    provider.shutdown()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_sdk_span_exporters_store_the_calls(
    make_agent, live_server, monkeypatch, encoding, compression
):
    ensure_defaults()
    agent = make_agent()
    # Exactly the environment docs/connect.md documents.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{live_server.url}/api/v1/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {agent.plaintext}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    from opentelemetry.exporter.otlp.json.http.trace_exporter import (
        OTLPSpanExporter as JsonSpanExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter_class: Any = OTLPSpanExporter if encoding == "protobuf" else JsonSpanExporter
    conversation = f"sdk-{encoding}-{compression}"

    _emit_chat_spans(_tracer(exporter_class()), conversation, 3)

    session = AgentSession.objects.get(external_id=conversation)
    assert (session.calls_count, session.turns_count) == (3, 1)
    assert session.cost_usd is not None and session.cost_usd > 0
    calls = LLMCall.objects.filter(session=session)
    assert {(c.uncached_input, c.cache_write_5m, c.output) for c in calls} == {(4, 1163, 50)}
    assert sorted(c.call for c in calls) == [0, 1, 2]


CC_ATTRS = {
    "event.name": "api_request",
    "session.id": "cc-sdk",
    "prompt.id": "prompt-1",
    "model": "claude-sonnet-4-5",
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": "2000",
    "cost_usd": "0.0291",
    "duration_ms": "4100",
    "query_source": "main",
}


def _logger(exporter):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": "claude-code"}))
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_sdk_log_exporters_carry_claude_code_events(make_agent, live_server, encoding):
    ensure_defaults()
    agent = make_agent()
    endpoint = f"{live_server.url}/api/v1/otlp/v1/logs"
    exporter: Any
    headers = {"Authorization": f"Bearer {agent.plaintext}"}
    if encoding == "protobuf":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(endpoint=endpoint, headers=headers, compression=Compression.Gzip)
    else:
        from opentelemetry.exporter.otlp.common.http import Compression as JsonCompression
        from opentelemetry.exporter.otlp.json.http._log_exporter import (
            OTLPLogExporter as JsonLogExporter,
        )

        exporter = JsonLogExporter(
            endpoint=endpoint, headers=headers, compression=JsonCompression.GZIP
        )
    provider = _logger(exporter)
    logger = provider.get_logger("com.anthropic.claude_code")
    for seq, (prompt, request_id) in enumerate(
        [("prompt-1", "req_1"), ("prompt-1", "req_2"), ("prompt-2", "req_3")]
    ):
        logger.emit(
            body="claude_code.api_request",
            attributes={
                **CC_ATTRS,
                "prompt.id": prompt,
                "request_id": request_id,
                "event.sequence": seq,
                "event.timestamp": f"2025-12-01T00:00:0{seq}.000Z",
            },
        )
    logger.emit(
        body="claude_code.compaction",
        attributes={
            "event.name": "compaction",
            "session.id": "cc-sdk",
            "prompt.id": "prompt-2",
            "event.timestamp": "2025-12-01T00:00:09.000Z",
            "event.sequence": 9,
            "trigger": "auto",
            "success": "true",
            "pre_tokens": "160000",
            "post_tokens": "22000",
            "duration_ms": "30000",
        },
    )
    logger.emit(body="claude_code.user_prompt", attributes={"event.name": "user_prompt"})
    logger.emit(body="claude_code.something_new", attributes={"event.name": "something_new"})
    assert provider.force_flush(10_000)
    provider.shutdown()

    session = AgentSession.objects.get(external_id="cc-sdk")
    assert (session.calls_count, session.turns_count) == (3, 2)
    first = LLMCall.objects.get(session=session, request_id="cc:req_1")
    assert (first.turn, first.call) == (0, 0)
    assert (first.uncached_input, first.cache_read, first.cache_write_5m, first.output) == (
        12,
        40000,
        2000,
        300,
    )
    # Cache hit: 40,000 read of 42,012 sent.
    assert session.cache_hit_ratio == pytest.approx(40000 / 42012)
    assert first.usage_as_sent["cost_usd"] == "0.0291"
    assert first.cost_usd is not None and first.cost_usd > 0
    (event,) = ContextEvent.objects.filter(session=session)
    assert (event.kind, event.origin, event.source, event.trigger) == (
        "compaction",
        "agent",
        "claude-code",
        "auto",
    )
    assert (event.tokens_before, event.tokens_after, event.turn) == (160000, 22000, 1)


def test_claude_code_logs_replayed_and_overflow(make_agent):
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

    agent = make_agent()
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for body, attrs in (
        ("claude_code.api_request", {**CC_ATTRS, "request_id": "req_x"}),
        (
            "claude_code.api_error",
            {
                "event.name": "api_error",
                "session.id": "cc-sdk",
                "prompt.id": "prompt-1",
                "event.sequence": "5",
                "event.timestamp": "2025-12-01T00:01:00Z",
                "error": "prompt is too long: 201234 tokens > 200000 maximum",
                "status_code": "400",
            },
        ),
        ("claude_code.mystery", {"event.name": "mystery"}),
    ):
        records.append(
            LogRecord(
                time_unix_nano=T0,
                body=AnyValue(string_value=body),
                attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
            )
        )
    payload = request.SerializeToString()
    first = post(agent, LOGS, payload)
    second = post(agent, LOGS, payload)
    assert first.status_code == second.status_code == 200
    answer = ExportLogsServiceResponse.FromString(second.content)
    assert answer.partial_success.rejected_log_records == 0
    assert "unknown events: mystery x1" in answer.partial_success.error_message
    assert LLMCall.objects.count() == 1
    (overflow,) = ContextEvent.objects.all()
    assert (overflow.kind, overflow.origin, overflow.tokens_before) == (
        "overflow",
        "provider",
        201234,
    )
    assert overflow.detail["window_tokens"] == 200000


def _cc_export(*requests: tuple[str, str]) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

    export = ExportLogsServiceRequest()
    records = export.resource_logs.add().scope_logs.add().log_records
    for request_id, cost in requests:
        attrs = {**CC_ATTRS, "session.id": "cc-cost", "request_id": request_id, "cost_usd": cost}
        records.append(
            LogRecord(
                time_unix_nano=T0,
                body=AnyValue(string_value="claude_code.api_request"),
                attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
            )
        )
    return export.SerializeToString()


def test_claude_codes_own_cost_sits_beside_ours_and_differences_are_listed(make_agent):
    from telemetry.otlp.claude_code import cost_difference

    agent = make_agent()
    assert post(agent, LOGS, b"").status_code == 200  # an empty export is fine
    assert post(agent, LOGS, _cc_export(("req_a", "0.0291"))).status_code == 200
    ours = LLMCall.objects.get(request_id="cc:req_a").cost_usd
    assert ours is not None
    # The same usage priced by Claude Code exactly as we price it, and once wildly off.
    assert post(agent, LOGS, _cc_export(("req_b", str(ours)), ("req_c", "9.5"))).status_code == 200

    answer = agent.get("/api/v1/sessions/cc-cost/agent-cost").json()

    assert answer["calls"] == 3
    assert Decimal(answer["agent_cost_usd"]) == Decimal("0.0291") + ours + Decimal("9.5")
    assert Decimal(answer["our_cost_usd"]) == 3 * ours  # exact, as stored
    expected = {"cc:req_c"} | (
        {"cc:req_a"} if cost_difference(ours, Decimal("0.0291")) is not None else set()
    )
    assert {row["request_id"] for row in answer["differing_calls"]} == expected
    off = next(r for r in answer["differing_calls"] if r["request_id"] == "cc:req_c")
    assert Decimal(off["difference_usd"]) == ours - Decimal("9.5")
    assert make_agent("desktop").get("/api/v1/sessions/cc-cost/agent-cost").status_code == 404

    # The session page says the same to an operator.
    from django.urls import reverse

    browser = signed_in("viewer", "viewer-otlp")
    session = AgentSession.objects.get(external_id="cc-cost")
    page = browser.get(reverse("session", args=[session.pk])).content.decode()
    differing = len(expected)
    assert "Claude Code's own figure" in page
    assert f"differs on {differing} call" in page
    plain = AgentSession.objects.create(profile=session.profile, external_id="plain")
    assert "own figure" not in browser.get(reverse("session", args=[plain.pk])).content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_database_that_cannot_answer_is_a_503_with_retry_after(make_agent):
    """Real lock contention, no mock: another connection holds the sessions table; this one
    gives up after 200 ms, and the exporter is told to retry."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("lock_timeout is PostgreSQL's")
    import psycopg

    agent = make_agent()
    settings_dict = connection.settings_dict
    other = psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"],
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
    )
    try:
        other.execute("LOCK TABLE telemetry_agentsession IN ACCESS EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        response = post(agent, TRACES, pb_traces(pb_span(DONE_WHEN)))
    finally:
        other.rollback()
        other.close()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert post(agent, TRACES, pb_traces(pb_span(DONE_WHEN))).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_done_when_through_the_sdk_exporter_s1_shows_4_uncached_1163_written_and_twice_is_once(
    make_agent, live_server
):
    """The issue's first "done when", word for word, through the SDK's own exporter: the same
    export sent twice (a retry) counts once."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    ensure_defaults()
    agent = make_agent()
    captured = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(captured))
    with provider.get_tracer("t").start_as_current_span("chat", attributes=DONE_WHEN):
        pass
    spans = captured.get_finished_spans()
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/api/v1/otlp/v1/traces", headers=agent.headers()
    )

    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert exporter.export(spans) is SpanExportResult.SUCCESS

    detail = agent.get("/api/v1/sessions/s1").json()
    assert (detail["calls"], detail["turns"]) == (1, 1)
    (turn,) = detail["turns_series"]
    assert (turn["uncached_input"], turn["cache_write_5m"], turn["output"]) == (4, 1163, 50)
    assert Decimal(detail["cost_usd"]) > 0 and detail["model"] == "claude-sonnet-4-5"


def test_last_turns_reads_each_sessions_end_of_its_turn_index(make_agent):
    """`otlp.store.last_turns` (the number after which an export opens new turns): the larger of
    a session's last derived turn and last turn key, None for neither; on PostgreSQL each read is a
    LIMIT 1 walk of the (session, turn) index, never an aggregate over all the session's turns."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from telemetry.models import Turn
    from telemetry.otlp.store import last_turns

    profile = make_agent().key.profile
    turns_only, keys_ahead, empty = (
        AgentSession.objects.create(profile=profile, external_id=name)
        for name in ("lt-turns", "lt-keys", "lt-empty")
    )

    def turn_row(session: AgentSession, turn: int) -> None:
        from django.utils import timezone

        values: dict[str, Any] = {}
        for f in Turn._meta.concrete_fields:
            if f.null or f.has_default() or f.primary_key or f.is_relation:
                continue
            kind = f.get_internal_type()
            values[f.attname] = (
                timezone.now() if kind == "DateTimeField" else "m" if kind == "CharField" else 0
            )
        Turn.objects.create(**{**values, "session": session, "turn": turn})

    for turn in (0, 3, 9):
        turn_row(turns_only, turn)
    turn_row(keys_ahead, 2)
    TurnKey.objects.create(session=keys_ahead, key="k-a", turn=2)
    TurnKey.objects.create(session=keys_ahead, key="k-b", turn=5)
    TurnKey.objects.create(session=turns_only, key="k-c", turn=4)
    ids = [turns_only.pk, keys_ahead.pk, empty.pk]
    with CaptureQueriesContext(connection) as queries:
        assert last_turns(ids) == {turns_only.pk: 9, keys_ahead.pk: 5, empty.pk: None}
    assert len(queries) == 1
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + queries[0]["sql"])
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "GroupAggregate" not in plan and "HashAggregate" not in plan, plan
        assert plan.count("Limit") == 2 and "Backward" in plan, plan


def test_the_one_statement_read_of_an_export_is_the_orms_three(make_agent):
    """On PostgreSQL an export reads the calls under its identities, its keys' turns with their
    last calls and the sessions' last turns in one statement (`_stored_read`): the same rows as
    the ingest's read of stored keys (`stored_call_keys`) and the ORM's, the ORM's key read
    (`_turn_keys_orm`) and `last_turns`, over a key whose turn holds calls, a key without
    calls, a key asked of another session, a session ahead by its keys and one with nothing
    stored, and identities stored, not stored and stored in another session."""
    from django.db import connection

    from telemetry.ingest.call_keys import stored_call_keys
    from telemetry.models import LLMCall
    from telemetry.otlp.store import _stored_read, _turn_keys_orm, last_turns

    if connection.vendor != "postgresql":
        pytest.skip("the one-statement read is PostgreSQL's; elsewhere the ORM's reads are used")
    agent = make_agent()
    attrs = {**DONE_WHEN, "gen_ai.conversation.id": "one"}
    post(
        agent,
        TRACES,
        pb_traces(
            pb_span(attrs, trace="a" * 32, span="a1" * 8, start=T0 + 10),
            pb_span(attrs, trace="a" * 32, span="a2" * 8, start=T0 + 20),
            pb_span(attrs, trace="b" * 32, span="b1" * 8, start=T0 + 30),
        ),
    )
    one = AgentSession.objects.get(external_id="one")
    profile = one.profile
    ahead, empty = (
        AgentSession.objects.create(profile=profile, external_id=name)
        for name in ("one-ahead", "one-empty")
    )
    TurnKey.objects.create(session=one, key="k-none", turn=7)  # no calls in its turn
    TurnKey.objects.create(session=ahead, key="k-ahead", turn=4)
    ids = {one.pk, ahead.pk, empty.pk}
    keys = {f"trace:{'a' * 32}", f"trace:{'b' * 32}", "k-none", "k-ahead", "k-missing"}
    a2, b1 = f"{'a' * 32}/{'a2' * 8}", f"{'b' * 32}/{'b1' * 8}"
    # the identities of a session holding calls, and of two holding none (not probed)
    requests = sorted(
        [(one.pk, a2), (one.pk, b1), (one.pk, "none"), (ahead.pk, a2), (empty.pk, b1)]
    )
    read = _stored_read({(sid, key) for sid in ids for key in keys}, requests)
    assert read is not None
    assert sorted(read.keys) == sorted(_turn_keys_orm(ids, keys))
    assert read.ends == last_turns(ids) == {one.pk: 7, ahead.pk: 4, empty.pk: None}
    assert sorted(read.keys) == sorted(
        [
            (one.pk, f"trace:{'a' * 32}", 0, 1),
            (one.pk, f"trace:{'b' * 32}", 1, 0),
            (one.pk, "k-none", 7, None),
            (ahead.pk, "k-ahead", 4, None),
        ]
    )
    orm = LLMCall.objects.filter(session_id=one.pk, request_id__in=[a2, b1]).values_list(
        "session_id", "turn", "call", "request_id", "payload_hash"
    )
    assert sorted(read.calls) == sorted(stored_call_keys(LLMCall, [], requests) or [])
    assert sorted(read.calls) == sorted((*row[:4], bytes(row[4])) for row in orm)
    assert [row[:4] for row in sorted(read.calls)] == [(one.pk, 0, 1, a2), (one.pk, 1, 0, b1)]
    nothing = _stored_read(set(), [])
    assert nothing is not None and (nothing.calls, nothing.keys, nothing.ends) == ([], [], {})


@pytest.mark.parametrize("stored", [2_000, 30_000])
def test_the_one_statement_read_probes_its_keys_not_the_tables(make_agent, stored):
    """`_stored_read` reads the turn keys of the (session, key) pairs it asks for and each
    session's last key, however many keys the table holds: as `session = ANY(…) AND
    key = ANY(…)` the planner, with no statistics yet, read and filtered every key of the table
    on every export."""
    from django.db import connection

    from telemetry.ingest.call_keys import requests_arrays
    from telemetry.otlp.store import _stored_read, _stored_read_sql

    if connection.vendor != "postgresql":
        pytest.skip("the statement is PostgreSQL's")
    profile = make_agent().key.profile
    one, other = (
        AgentSession.objects.create(profile=profile, external_id=name) for name in ("k1", "k2")
    )
    half = stored // 2
    TurnKey.objects.bulk_create(
        [TurnKey(session=one, key=f"k-{i}", turn=i) for i in range(half)]
        + [TurnKey(session=other, key=f"k-{i}", turn=i) for i in range(stored - half)]
    )
    pairs = sorted({(one.pk, "k-7"), (one.pk, f"k-{half - 1}"), (other.pk, "k-none")})
    ids = sorted({one.pk, other.pk})
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {_stored_read_sql()}",
            [*requests_arrays(pairs), ids, *requests_arrays([]), []],
        )
        (plan,) = cursor.fetchone()[0]
    # a probe a pair, and one row a session for its last key's turn
    assert _session_rows_read(plan["Plan"], TurnKey._meta.db_table) <= len(pairs) + len(ids)
    read = _stored_read(set(pairs), [])
    assert read is not None
    assert sorted(read.keys) == sorted(
        [(one.pk, "k-7", 7, None), (one.pk, f"k-{half - 1}", half - 1, None)]
    )


def test_the_stored_sessions_read_is_the_orms(make_agent):
    """`_stored_sessions` (which sessions an export did not open): on PostgreSQL a fixed
    statement, the same ids as the ORM's `__in` over the profile's sessions, not another
    profile's, one not stored, and an id with a quote."""
    from telemetry.otlp.store import _stored_sessions

    profile = make_agent().key.profile
    other = make_agent("ss-other").key.profile
    assert other.pk != profile.pk
    for name in ("ss-a", "ss-'b"):
        AgentSession.objects.create(profile=profile, external_id=name)
    AgentSession.objects.create(profile=other, external_id="ss-c")
    wanted = {"ss-a", "ss-'b", "ss-c", "ss-none"}
    orm = set(
        AgentSession.objects.filter(profile=profile, external_id__in=wanted).values_list(
            "external_id", flat=True
        )
    )
    assert _stored_sessions(profile.pk, wanted) == orm == {"ss-a", "ss-'b"}
    assert _stored_sessions(profile.pk, set()) == set()


def _session_rows_read(plan: dict[str, Any], table: str) -> int:
    """The rows an `EXPLAIN (ANALYZE, FORMAT JSON)` plan's scans of `table` read, those their
    filters then removed included."""
    read = 0
    if plan.get("Relation Name") == table:
        kept = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        read += (kept + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
    for child in plan.get("Plans", []):
        read += _session_rows_read(child, table)
    return read


@pytest.mark.parametrize("sessions", [2_000, 30_000])
def test_the_stored_sessions_read_probes_the_ids_not_the_profiles_sessions(make_agent, sessions):
    """`_stored_sessions` on PostgreSQL reads the rows of the ids it asks for, however many
    sessions the profile holds: as `external_id = ANY(…)` beside the profile the planner, with
    no statistics yet, read and filtered every session of the profile on every export; as an
    equality probe of each id it took another index on the profile as readily as the unique
    one while the table was small (the bench's first thousands of sessions), and filtered
    them all per id."""
    from django.db import connection

    from telemetry.ingest.values import text_array
    from telemetry.otlp.store import _stored_sessions, _stored_sessions_sql

    if connection.vendor != "postgresql":
        pytest.skip("the statement is PostgreSQL's")
    profile = make_agent().key.profile
    # as many sessions as a day of exports opens: the planner sees a table of their size
    AgentSession.objects.bulk_create(
        [AgentSession(profile=profile, external_id=f"many-{i}") for i in range(sessions)]
    )
    wanted = ["many-7", f"many-{sessions - 1}", "many-none"]
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {_stored_sessions_sql()}",
            [text_array(wanted), profile.pk],
        )
        (plan,) = cursor.fetchone()[0]
    # (a scan's rows are its loops' mean, rounded: at most one a probe)
    assert _session_rows_read(plan["Plan"], AgentSession._meta.db_table) <= len(wanted)
    assert _stored_sessions(profile.pk, set(wanted)) == {"many-7", f"many-{sessions - 1}"}


@pytest.mark.django_db
def test_any_of_finds_what_in_finds():
    """`__any_of` (one array on PostgreSQL, what the OTLP store reads its identities with) is
    `__in` on a field and on a foreign key, None and repeats included."""
    ensure_defaults()
    from telemetry.models import AgentProfile

    profile = AgentProfile.objects.get(name="default")
    made = [AgentSession.objects.create(profile=profile, external_id=f"any-{i}") for i in range(4)]
    wanted = ["any-1", "any-3", "any-3", None, "missing"]
    by_in = set(AgentSession.objects.filter(external_id__in=wanted))
    assert by_in == set(AgentSession.objects.filter(external_id__any_of=wanted))
    assert by_in == {made[1], made[3]}
    assert set(AgentSession.objects.filter(profile__any_of=[profile.pk])) == set(made)
    assert set(AgentSession.objects.filter(profile_id__any_of=[profile.pk, -1])) == set(made)
    assert not AgentSession.objects.filter(external_id__any_of=[]).exists()


@pytest.mark.django_db
@examples(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
            st.sampled_from(["", "NULL", '"', "\\", '\\"', "{a,b}", " x ", ",", "é✓", "a\tb\nc"]),
        ),
        max_size=8,
    )
)
def test_a_text_array_literal_is_the_array_the_driver_adapts(values):
    """`text_array` (the request ids, session ids and turn keys an OTLP export reads with) is
    the same `text[]` as the list psycopg adapts: quotes, backslashes, braces, commas, spaces,
    the word NULL, the empty text and no text at all."""
    from django.db import connection

    from telemetry.ingest.statements import run
    from telemetry.ingest.values import text_array

    if connection.vendor != "postgresql":
        pytest.skip("array literals are PostgreSQL's")
    literal, adapted = run("SELECT %s::text[], %s::text[]", [text_array(values), values])[0]
    assert literal == adapted == values


def test_a_new_turn_keys_values_are_in_the_order_of_its_columns():
    """`_insert_turn_keys` COPYs (session, key, turn) tuples: TurnKey's columns, in order."""
    from telemetry.otlp.store import TURN_KEY_FIELDS

    columns = [f.attname for f in TurnKey._meta.concrete_fields if not f.primary_key]
    assert tuple(columns) == TURN_KEY_FIELDS
