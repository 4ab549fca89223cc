"""A NUL character in any text an OTLP span or log record carries is refused for that item,
naming the attribute (PostgreSQL cannot store NUL in text, nor jsonb `\\u0000`), down into
arrays and key-value lists; the export's other items are stored and nothing is a 500. An
unknown event's name is echoed escaped."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from telemetry.models import AgentSession, ContextEvent, LLMCall
from tests.db.test_otlp import LOGS, T0, TRACES, _any, pb_span, pb_traces, post
from tests.db.test_otlp_sources import (
    CC_SPAN,
    EVENT,
    GENAI,
    TRACE,
    _logs,
    _named,
    _platform,
    _rejected,
    _traces,
)


def _cc_span(attrs: dict[str, Any]) -> bytes:
    return _traces(_named(pb_span(attrs, trace=TRACE), "claude_code.llm_request"))


def _sdk_span(attrs: dict[str, Any]) -> bytes:
    return _traces(_named(pb_span(attrs, trace=TRACE), "chat claude-sonnet-4-5"))


def _texts(attrs: dict[str, Any]) -> list[str]:
    """The attributes of `attrs` that are text (a NUL can only be in those)."""
    return [name for name, value in attrs.items() if isinstance(value, str)]


CASES = [
    *((TRACES, _cc_span, CC_SPAN, name) for name in _texts(CC_SPAN)),
    *((TRACES, _sdk_span, GENAI, name) for name in _texts(GENAI)),
    *((TRACES, _platform, GENAI, name) for name in _texts(GENAI)),
    # (a NUL in `event.name` names no event we read: the record is ignored, nothing is stored)
    *((LOGS, _logs, EVENT, name) for name in _texts(EVENT) if name != "event.name"),
    (TRACES, _cc_span, {**CC_SPAN, "prompt.id": "p-1"}, "prompt.id"),
    (TRACES, _cc_span, {**CC_SPAN, "speed": "fast"}, "speed"),
]


@pytest.mark.parametrize(
    ("path", "build", "attrs", "name"),
    CASES,
    ids=[f"{b.__name__}-{n}" for _, b, _, n in CASES],
)
def test_a_nul_in_any_text_attribute_is_refused_not_a_500(make_agent, path, build, attrs, name):
    value = attrs[name]
    agent = make_agent()
    response = post(agent, path, build({**attrs, name: value[:1] + "\x00" + value[1:]}))
    assert response.status_code in (200, 400), response.content[:300]
    rejected, message = _rejected(response)
    assert rejected == 1, message
    assert f"{name}: must not contain NUL characters" in message, message
    assert not LLMCall.objects.exists()


COMPACTION = {
    "event.name": "compaction",
    "session.id": "cc-1",
    "prompt.id": "p-1",
    "trigger": "auto",
}
OVERFLOW = {
    "event.name": "api_error",
    "session.id": "cc-1",
    "prompt.id": "p-1",
    "error": "prompt is too long: 210000 tokens > 200000 maximum",
}


@pytest.mark.parametrize(
    ("attrs", "name"),
    [
        (COMPACTION, "prompt.id"),
        (COMPACTION, "trigger"),
        (OVERFLOW, "error"),
        (OVERFLOW, "prompt.id"),
    ],
)
def test_a_nul_in_an_events_text_is_refused_naming_it(make_agent, attrs, name):
    agent = make_agent()
    value = attrs[name]
    response = post(agent, LOGS, _logs({**attrs, name: value + "\x00"}))
    assert response.status_code == 200
    assert _rejected(response) == (
        1,
        f"rejected 1 log records: item 0: {name}: must not contain NUL characters",
    )


def test_a_nul_in_the_resource_refuses_its_items_and_the_other_items_are_stored(make_agent):
    agent = make_agent()
    nul = pb_traces(
        _named(pb_span(CC_SPAN, trace=TRACE), "claude_code.llm_request"),
        resource={"service.name": "my-app", "user.email": "a\x00@example.com"},
    )
    response = post(agent, TRACES, nul)
    assert _rejected(response)[1].endswith("resource.user.email: must not contain NUL characters")
    clean = _cc_span(CC_SPAN)
    assert _rejected(post(agent, TRACES, clean)) == (0, "")
    assert LLMCall.objects.count() == 1


# --- values nested in arrays and key-value lists, bytes, a span's name: both encodings --------


def _value(value: Any) -> AnyValue:
    """`value` as an OTLP AnyValue: lists as arrays, dicts as key-value lists, bytes as bytes."""
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[_value(v) for v in value]))
    if isinstance(value, dict):
        pairs = [KeyValue(key=k, value=_value(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    return _any(value)


def _pairs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in attrs.items()]


def _span_export(*spans: tuple[str, dict[str, Any]], resource: dict[str, Any]) -> Message:
    """One resource's spans, each (name, attributes), span ids 01, 02, ..."""
    export = ExportTraceServiceRequest()
    resource_spans = export.resource_spans.add()
    resource_spans.resource.attributes.extend(_pairs(resource))
    for n, (name, attrs) in enumerate(spans, 1):
        span = pb_span({}, trace=TRACE, span=f"{n:016x}")
        span.name = name
        span.attributes.extend(_pairs(attrs))
        resource_spans.scope_spans.add().spans.append(span)
    return export


def _log_export(*records: dict[str, Any], resource: dict[str, Any]) -> Message:
    export = ExportLogsServiceRequest()
    resource_logs = export.resource_logs.add()
    resource_logs.resource.attributes.extend(_pairs(resource))
    for attrs in records:
        resource_logs.scope_logs.add().log_records.append(
            LogRecord(time_unix_nano=T0, attributes=_pairs(attrs))
        )
    return export


def _send(agent, export: Message, encoding: str) -> tuple[int, str]:
    """Post `export` in `encoding`; (rejected items, the partial-success message)."""
    path = TRACES if isinstance(export, ExportTraceServiceRequest) else LOGS
    if encoding == "protobuf":
        response = post(agent, path, export.SerializeToString())
        assert response.status_code == 200, response.content[:300]
        return _rejected(response)
    obj = json_format.MessageToDict(export)
    for resource in obj.get("resourceSpans", []):
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId"):  # OTLP JSON writes ids in hex
                    span[key] = base64.b64decode(span[key]).hex()
    response = post(agent, path, json.dumps(obj).encode(), json_body=True)
    assert response.status_code == 200, response.content[:300]
    found = json.loads(response.content).get("partialSuccess", {})
    count = found.get("rejectedSpans", found.get("rejectedLogRecords", 0))
    return int(count), found.get("errorMessage", "")


ENCODINGS = ["protobuf", "json"]
SDK = "chat claude-sonnet-4-5"
CC = "claude_code.llm_request"
APP = {"service.name": "my-app"}
# Where a NUL sits, and the path the refusal names. The first two made a 500 (a request or
# prompt id as bytes, read as text); a NUL in a span's name made one for a compacted span (its
# event's detail is jsonb). The nested ones reached storage as their text or were refused under
# the record's field (`usage: ...`), not the attribute.
NESTED: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    ("span", SDK, GENAI, {"anthropic.request.id": b"req\x00A"}, "anthropic.request.id"),
    ("log", "", EVENT, {"prompt.id": b"p\x001"}, "prompt.id"),
    ("span", SDK, GENAI, {"gen_ai.usage.details": ["a", "b\x00"]}, "gen_ai.usage.details.1"),
    ("span", CC, CC_SPAN, {"speed": {"mode": ["fast", "x\x00"]}}, "speed.mode.1"),
    ("span", SDK, GENAI, {"cache_miss_reason": {"type": "a\x00"}}, "cache_miss_reason.type"),
    ("log", "", EVENT, {"user.email": ["a\x00@example.com"]}, "user.email.0"),
    ("log", "", EVENT, {"query_source": {"from\x00": "x\x00"}}, "query_source.from\\x00"),
]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    ("kind", "name", "base", "nul", "path"), NESTED, ids=[case[-1] for case in NESTED]
)
def test_a_nul_in_bytes_or_nested_in_an_attribute_is_refused_naming_its_path(
    make_agent, encoding, kind, name, base, nul, path
):
    agent = make_agent()
    clean = {**base, "session.id": "clean-1", "request_id": "req_clean"}
    if kind == "span":
        clean["anthropic.request.id"] = "req_clean"
        export = _span_export((name, {**base, **nul}), (name, clean), resource=APP)
    else:
        export = _log_export({**base, **nul}, clean, resource=APP)

    rejected, message = _send(agent, export, encoding)

    noun = "spans" if kind == "span" else "log records"
    refused = f"rejected 1 {noun}: item 0: {path}: must not contain NUL characters"
    assert (rejected, message) == (1, refused)
    assert list(LLMCall.objects.values_list("session__external_id", flat=True)) == ["clean-1"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_nul_nested_in_the_resource_refuses_its_items(make_agent, encoding):
    agent = make_agent()
    resource = {**APP, "host.tags": {"team": ["infra", "a\x00"]}}
    rejected, message = _send(agent, _span_export((SDK, GENAI), resource=resource), encoding)
    assert (rejected, message) == (
        1,
        "rejected 1 spans: item 0: resource.host.tags.team.1: must not contain NUL characters",
    )
    assert not LLMCall.objects.exists()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_nul_in_a_compacted_spans_name_is_refused_not_a_500(make_agent, encoding):
    agent = make_agent()
    compacted = {"session.id": "cc-1", "gen_ai.conversation.compacted": True}
    export = _span_export(
        ("compact\x00", compacted),
        ("compact", {**compacted, "session.id": "clean-1"}),
        resource=APP,
    )
    rejected, message = _send(agent, export, encoding)
    assert (rejected, message) == (
        1,
        "rejected 1 spans: item 0: name: must not contain NUL characters",
    )
    assert list(ContextEvent.objects.values_list("detail", flat=True)) == [
        {"attribute": "gen_ai.conversation.compacted", "span": "compact"}
    ]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_unknown_events_name_is_echoed_with_its_control_characters_escaped(make_agent, encoding):
    agent = make_agent()
    names = ["x\x00y", "\x1b[2J\x1b[31mred\r\nline", "long" * 100]
    export = _log_export(*({"event.name": n, "session.id": "s"} for n in names), resource=APP)

    rejected, message = _send(agent, export, encoding)

    assert rejected == 0
    assert message == (
        "ignored 3 log records that are not Claude Code events we read; unknown events: "
        f"\\x1b[2J\\x1b[31mred\\x0d\\x0aline x1, {'long' * 25}… x1, x\\x00y x1"
    )
    assert not AgentSession.objects.exists()
