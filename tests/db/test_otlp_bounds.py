"""OTLP exports where one record is bad: the others are stored and the answer's
`partial_success` names the bad one's field, in protobuf as in JSON; times past the console's
clock plus TELEMETRY_CLOCK_SKEW_SECONDS refused per record, as the JSON API refuses such an `at`.

The payloads are real protobuf messages built with opentelemetry-proto's classes; a record
protobuf itself refuses is made by changing one byte of a serialized one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from telemetry.models import AgentSession, ContextEvent, LLMCall
from tests.db.test_otlp import CC_ATTRS, DONE_WHEN, LOGS, T0, TRACES, _any, partial, pb_span, post

pytestmark = pytest.mark.django_db

MAX_UINT64 = 2**64 - 1
# An attribute whose value is bytes (AnyValue field 7), then the same bytes as a string (field 1):
# a proto3 string must be UTF-8, so protobuf refuses the record that carries it.
BYTES_VALUE, NOT_UTF8_STRING = b":\x02\xff\xfe", b"\n\x02\xff\xfe"


def cc_record(request_id: str, **overrides: Any) -> LogRecord:
    """One Claude Code `api_request` event; `time_unix_nano` etc. and attributes overridable."""
    attrs = {**CC_ATTRS, "request_id": request_id, **overrides.pop("attrs", {})}
    record = LogRecord(
        time_unix_nano=overrides.pop("time_unix_nano", T0),
        body=AnyValue(string_value="claude_code.api_request"),
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()],
        **overrides,
    )
    return record


def not_utf8(record: LogRecord) -> LogRecord:
    record.attributes.add(key="payload").value.bytes_value = b"\xff\xfe"
    return record


def nested_too_deep(record: LogRecord) -> None:
    value = record.attributes.add(key="deep").value
    for _ in range(150):  # protobuf parses at most 100 nested messages
        value = value.kvlist_value.values.add(key="k").value
    value.string_value = "x"


def logs_body(*records: LogRecord, too_deep: int | None = None) -> bytes:
    """The export of `records`, the one at `too_deep` nested past protobuf's limit (in place:
    protobuf's Python classes copy a message by parsing it)."""
    export = ExportLogsServiceRequest()
    added = export.resource_logs.add().scope_logs.add().log_records
    added.extend(records)
    if too_deep is not None:
        nested_too_deep(added[too_deep])
    data: bytes = export.SerializeToString()
    assert data.count(BYTES_VALUE) <= 1
    return data.replace(BYTES_VALUE, NOT_UTF8_STRING)


def logs_partial(response: Any) -> tuple[int, str]:
    assert response.status_code == 200, response.content
    answer = ExportLogsServiceResponse.FromString(response.content)
    return answer.partial_success.rejected_log_records, answer.partial_success.error_message


# --- protobuf: one bad record is refused alone ---------------------------------------------------


def test_a_protobuf_log_record_protobuf_refuses_is_rejected_alone_and_the_rest_stored(make_agent):
    agent = make_agent()
    body = logs_body(
        cc_record("req_1"),
        not_utf8(cc_record("req_2")),
        cc_record("req_3"),
        cc_record("req_4"),
        too_deep=3,
    )
    with pytest.raises(Exception, match="UTF-8|parsing"):
        ExportLogsServiceRequest.FromString(body)  # the whole export is not valid protobuf

    rejected, message = logs_partial(post(agent, LOGS, body))

    assert rejected == 2
    assert "item 1: record: is not an OTLP protobuf LogRecord" in message
    assert "item 3: record: is not an OTLP protobuf LogRecord" in message
    stored = sorted(str(r) for r in LLMCall.objects.values_list("request_id", flat=True))
    assert stored == ["cc:req_1", "cc:req_3"]


def test_a_protobuf_span_protobuf_refuses_is_rejected_alone_gzipped_too(make_agent):
    agent = make_agent()
    export = ExportTraceServiceRequest()
    spans = export.resource_spans.add().scope_spans.add().spans
    spans.extend(pb_span(DONE_WHEN, span=f"{n:016x}") for n in (1, 2, 3))
    spans[1].attributes.add(key="payload").value.bytes_value = b"\xff\xfe"
    body = export.SerializeToString().replace(BYTES_VALUE, NOT_UTF8_STRING)

    rejected, message = partial(post(agent, TRACES, body, gzipped=True))

    assert rejected == 1 and message.startswith("rejected 1 spans: item 1: record: ")
    assert LLMCall.objects.count() == 2


def test_a_broken_protobuf_envelope_still_refuses_the_export(make_agent):
    agent = make_agent()
    body = logs_body(cc_record("req_1"))
    response = post(agent, LOGS, body[:-3])  # the resource's length runs past the end
    assert response.status_code == 400
    assert LLMCall.objects.count() == 0


# --- times past the clock skew --------------------------------------------------------------------


def _ns(at: datetime) -> int:
    return int(at.timestamp()) * 10**9


FUTURE = datetime.now(UTC) + timedelta(days=3)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"attrs": {"event.timestamp": "9999-12-31T00:00:00Z"}}, "event.timestamp"),
        ({"attrs": {"event.timestamp": "0001-01-01T00:00:00+01:00"}}, "event.timestamp"),
        ({"time_unix_nano": MAX_UINT64}, "timeUnixNano"),
        ({"time_unix_nano": _ns(FUTURE)}, "timeUnixNano"),
        ({"time_unix_nano": 0, "observed_time_unix_nano": MAX_UINT64}, "observedTimeUnixNano"),
        ({"observed_time_unix_nano": MAX_UINT64}, "observedTimeUnixNano"),
    ],
)
def test_a_claude_code_event_dated_past_the_skew_is_rejected_naming_its_field(
    make_agent, overrides, field
):
    agent = make_agent()
    body = logs_body(cc_record("req_ok"), cc_record("req_bad", **overrides))

    rejected, message = logs_partial(post(agent, LOGS, body))

    assert rejected == 1 and f"item 1: {field}: " in message, message
    assert list(LLMCall.objects.values_list("request_id", flat=True)) == ["cc:req_ok"]
    (last_seen,) = AgentSession.objects.values_list("last_seen_at", flat=True)
    assert last_seen is not None and last_seen < datetime.now(UTC) + timedelta(days=1)


def test_an_event_without_any_time_is_stored_at_the_consoles_clock(make_agent):
    agent = make_agent()
    rejected, _ = logs_partial(post(agent, LOGS, logs_body(cc_record("req_0", time_unix_nano=0))))
    assert rejected == 0
    (at,) = LLMCall.objects.values_list("at", flat=True)
    assert abs(at - datetime.now(UTC)) < timedelta(minutes=5)


def test_a_compaction_event_past_the_skew_is_no_context_event(make_agent, settings):
    settings.TELEMETRY_CLOCK_SKEW_SECONDS = 60
    agent = make_agent()
    compaction = {
        "event.name": "compaction",
        "session.id": "cc-sdk",
        "trigger": "auto",
        "pre_tokens": "160000",
        "post_tokens": "22000",
    }
    records = [
        LogRecord(
            time_unix_nano=_ns(at),
            attributes=[KeyValue(key=k, value=_any(v)) for k, v in compaction.items()],
        )
        for at in (datetime.now(UTC), datetime.now(UTC) + timedelta(minutes=5))
    ]
    rejected, message = logs_partial(post(agent, LOGS, logs_body(*records)))
    assert rejected == 1 and "item 1: timeUnixNano: is after" in message
    assert ContextEvent.objects.count() == 1


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        (T0, MAX_UINT64, "endTimeUnixNano"),
        (MAX_UINT64, T0, "startTimeUnixNano"),
        (MAX_UINT64, 0, "startTimeUnixNano"),
    ],
)
def test_a_span_starting_or_ending_past_the_skew_is_rejected_naming_its_field(
    make_agent, start, end, field
):
    agent = make_agent()
    export = ExportTraceServiceRequest()
    spans = export.resource_spans.add().scope_spans.add().spans
    spans.extend(pb_span(DONE_WHEN, span=f"{n:016x}") for n in (1, 2))
    spans[1].start_time_unix_nano, spans[1].end_time_unix_nano = start, end

    rejected, message = partial(post(agent, TRACES, export.SerializeToString()))

    assert rejected == 1 and f"item 1: {field}: is after" in message, message
    assert LLMCall.objects.count() == 1
