"""OTLP/HTTP bodies: protobuf and JSON, gzip, limits, and the responses (no Django)."""

from __future__ import annotations

import gzip
import json

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from telemetry.errors import FieldError
from telemetry.otlp.framing import walk_export
from telemetry.otlp.mapping import Rejection
from telemetry.otlp.wire import (
    MAX_JSON_DEPTH,
    TOO_DEEP,
    LogRecord,
    Span,
    cut_too_deep,
    data_points_of,
    decode_request,
    encode_response,
    encode_status,
    encoding_of,
    inflate,
    log_records_of,
    spans_of,
)

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
SPAN = bytes.fromhex("b7ad6b7169203331")


def kv(key, **value):
    return KeyValue(key=key, value=AnyValue(**value))


def trace_request():
    span = PbSpan(
        trace_id=TRACE,
        span_id=SPAN,
        name="chat",
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        attributes=[
            kv("gen_ai.usage.input_tokens", int_value=1167),
            kv("gen_ai.request.model", string_value="m"),
            kv("flag", bool_value=True),
            kv("ratio", double_value=0.5),
        ],
    )
    resource_spans = ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])
    resource_spans.resource.attributes.append(kv("service.name", string_value="app"))
    return ExportTraceServiceRequest(resource_spans=[resource_spans])


def test_protobuf_spans_decode_to_plain_values():
    data = trace_request().SerializeToString()
    (span,) = spans_of(decode_request("traces", data, "protobuf", max_items=1000))
    assert isinstance(span, Span)
    assert span.trace_id == TRACE.hex() and span.span_id == SPAN.hex()
    assert span.attributes == {
        "gen_ai.usage.input_tokens": 1167,
        "gen_ai.request.model": "m",
        "flag": True,
        "ratio": 0.5,
    }
    assert span.resource == {"service.name": "app"}
    assert (span.start_ns, span.end_ns) == (1, 2)


def otlp_json():
    """OTLP JSON as the spec writes it: hex ids, int64 as strings, enum ints."""
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "x"},
                        "spans": [
                            {
                                "traceId": TRACE.hex(),
                                "spanId": SPAN.hex(),
                                "parentSpanId": "",
                                "name": "chat",
                                "kind": 3,
                                "startTimeUnixNano": "1764547200000000000",
                                "endTimeUnixNano": "1764547202000000000",
                                "attributes": [
                                    {
                                        "key": "gen_ai.usage.input_tokens",
                                        "value": {"intValue": "1167"},
                                    }
                                ],
                                "status": {"code": 1},
                                "someFutureField": {"ignored": True},
                            }
                        ],
                    }
                ],
            }
        ]
    }


def test_otlp_json_with_hex_ids_and_string_int64_decodes():
    data = json.dumps(otlp_json()).encode()
    (span,) = spans_of(decode_request("traces", data, "json", max_items=1000))
    assert isinstance(span, Span)
    assert span.span_id == SPAN.hex() and span.trace_id == TRACE.hex()
    assert span.attributes == {"gen_ai.usage.input_tokens": 1167}
    assert span.end_ns == 1764547202000000000


def test_a_bad_hex_id_refuses_its_span_alone_naming_the_field():
    body = otlp_json()
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.insert(0, {**spans[0], "spanId": "not-hex"})
    bad, good = spans_of(
        decode_request("traces", json.dumps(body).encode(), "json", max_items=1000)
    )
    assert isinstance(bad, Rejection) and (bad.index, bad.field) == (0, "spanId")
    assert isinstance(good, Span) and good.span_id == SPAN.hex()


def _nested(depth: int) -> dict[str, object]:
    """An AnyValue of arrays nested `depth` JSON levels deep (three levels an array)."""
    value: dict[str, object] = {"stringValue": "bottom"}
    for _ in range(depth // 3):
        value = {"arrayValue": {"values": [value]}}
    return value


@pytest.mark.parametrize("depth", [300, 100_000])
def test_a_span_nested_too_deep_is_refused_alone_and_the_rest_decode(depth):
    body = otlp_json()
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    deep = {**spans[0], "attributes": [{"key": "deep", "value": {"stringValue": "x"}}]}
    spans[:] = [spans[0], deep, spans[0]]
    marker = json.dumps(deep["attributes"][0]["value"])
    # json.dumps itself recurses: the nesting is spliced in as text
    data = (
        json.dumps(body)
        .replace(
            marker, '{"arrayValue": {"values": [' * (depth // 3) + marker + "]}}" * (depth // 3)
        )
        .encode()
    )
    first, refused, last = spans_of(decode_request("traces", data, "json", max_items=1000))
    assert isinstance(first, Span) and isinstance(last, Span)
    assert isinstance(refused, Rejection) and (refused.index, refused.field) == (1, "record")


def test_cut_too_deep_replaces_exactly_the_values_opening_below_the_limit():
    inner = "[" * 5 + '"a", {"k": "]}\\"["}' + "]" * 5
    data = (
        "[" * (MAX_JSON_DEPTH - 1) + f"1, {inner}, {inner}, 2" + "]" * (MAX_JSON_DEPTH - 1)
    ).encode()
    value = json.loads(cut_too_deep(data))
    for _ in range(MAX_JSON_DEPTH - 2):
        (value,) = value
    assert value == [1, [TOO_DEEP], [TOO_DEEP], 2]
    shallow = json.dumps(otlp_json()).encode()
    assert cut_too_deep(shallow) == shallow


def test_json_whose_string_never_ends_is_a_400_even_nested_too_deep():
    with pytest.raises(FieldError) as caught:
        decode_request("traces", b"[" * 100_000 + b'"\\"', "json", max_items=1000)
    assert (caught.value.status, caught.value.field) == (400, "body")


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"hello world", "protobuf"),
        (b"\xff\xff\xff", "protobuf"),
        (b"{not json", "json"),
        (b"[1, 2]", "json"),
        (b'{"records": []}', "json"),
        (b'{"resourceSpans": "nope"}', "json"),
    ],
)
def test_a_body_that_is_not_otlp_is_a_400(data, encoding):
    with pytest.raises(FieldError) as caught:
        decode_request("traces", data, encoding, max_items=1000)
    assert caught.value.status == 400 and caught.value.field == "body"


def test_an_empty_body_is_an_empty_export():
    assert spans_of(decode_request("traces", b"", "protobuf", max_items=1000)) == []
    assert spans_of(decode_request("traces", b"{}", "json", max_items=1000)) == []


def test_gzip_inflates_and_a_bomb_is_a_413():
    data = trace_request().SerializeToString()
    assert inflate(gzip.compress(data), "gzip", limit=10_000) == data
    assert inflate(data, "", limit=10_000) == data
    bomb = gzip.compress(b"\0" * 1_000_000)
    with pytest.raises(FieldError) as caught:
        inflate(bomb, "gzip", limit=100_000)
    assert caught.value.status == 413
    with pytest.raises(FieldError) as caught:
        inflate(data, "", limit=10)
    assert caught.value.status == 413
    with pytest.raises(FieldError) as caught:
        inflate(b"not gzip", "gzip", limit=100)
    assert caught.value.status == 400
    with pytest.raises(FieldError) as caught:
        inflate(gzip.compress(data)[:-12], "gzip", limit=10_000)
    assert caught.value.status == 400
    with pytest.raises(FieldError) as caught:
        inflate(data, "br", limit=10_000)
    assert caught.value.status == 415


def test_content_types():
    assert encoding_of("application/x-protobuf") == "protobuf"
    assert encoding_of("application/json; charset=utf-8") == "json"
    assert encoding_of("") == "protobuf"  # OTLP's default encoding
    with pytest.raises(FieldError) as caught:
        encoding_of("text/plain")
    assert caught.value.status == 415 and caught.value.field == "Content-Type"


def test_responses_carry_partial_success_in_the_request_encoding():
    pb = ExportTraceServiceResponse.FromString(encode_response("traces", 3, "why", "protobuf"))
    assert pb.partial_success.rejected_spans == 3
    assert pb.partial_success.error_message == "why"
    as_json = json.loads(encode_response("logs", 2, "because", "json"))
    assert as_json == {"partialSuccess": {"rejectedLogRecords": "2", "errorMessage": "because"}}
    parsed = json_format.Parse(json.dumps(as_json), ExportLogsServiceResponse())
    assert parsed.partial_success.rejected_log_records == 2
    assert encode_response("traces", 0, "", "protobuf") == b""
    assert json.loads(encode_response("metrics", 5, "no", "json"))["partialSuccess"] == {
        "rejectedDataPoints": "5",
        "errorMessage": "no",
    }


def test_status_bodies():
    assert json.loads(encode_status(3, "bad", "json")) == {"code": 3, "message": "bad"}
    assert encode_status(3, "bad", "protobuf").startswith(b"\x08\x03")


def test_log_records_and_metric_points():
    record = PbLogRecord(
        time_unix_nano=5,
        body=AnyValue(string_value="claude_code.api_request"),
        attributes=[kv("input_tokens", string_value="12")],
    )
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.append(record)
    data = request.SerializeToString()
    (decoded,) = log_records_of(decode_request("logs", data, "protobuf", max_items=1000))
    assert isinstance(decoded, LogRecord)
    assert decoded.body == "claude_code.api_request"
    assert decoded.attributes == {"input_tokens": "12"}

    metrics = ExportMetricsServiceRequest()
    scope = metrics.resource_metrics.add().scope_metrics.add()
    scope.metrics.append(Metric(name="m", gauge=Gauge(data_points=[NumberDataPoint(as_int=1)] * 3)))
    decoded_metrics = decode_request(
        "metrics", metrics.SerializeToString(), "protobuf", max_items=1000
    )
    assert data_points_of(decoded_metrics) == 3


def test_deflate_is_zlib_framed_as_the_python_sdk_sends_it():
    import zlib

    data = trace_request().SerializeToString()
    assert inflate(zlib.compress(data), "deflate", limit=10_000) == data
    assert inflate(gzip.compress(data), "Deflate", limit=10_000) == data


# --- the item cap, counted from the wire ----------------------------------------------------------

_SHAPES = st.lists(st.lists(st.integers(0, 6), max_size=4), max_size=4)


def _traces_of(shape: list[list[int]], *, attrs: bool) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for r, scopes in enumerate(shape):
        resource = request.resource_spans.add()
        if attrs:
            resource.resource.attributes.append(KeyValue(key="r", value=AnyValue(int_value=r)))
        for spans in scopes:
            scope = resource.scope_spans.add()
            scope.scope.name = "s"
            for i in range(spans):
                scope.spans.add(name="x" * i, start_time_unix_nano=2**63 + i, span_id=b"12345678")
    return request


def _true_count(shape: list[list[int]]) -> int:
    return sum(1 + len(scopes) + sum(scopes) for scopes in shape)


@given(_SHAPES, st.booleans(), st.integers(0, 60))
def test_the_wire_count_is_exact_up_to_the_cap_and_stops_just_past_it(shape, attrs, cap):
    data = _traces_of(shape, attrs=attrs).SerializeToString()
    true = _true_count(shape)
    counted = walk_export(data, cap=cap).count
    assert counted == true if true <= cap else counted == cap + 1


@given(_SHAPES, st.integers(0, 60))
def test_logs_are_counted_like_traces(shape, cap):
    request = ExportLogsServiceRequest()
    for scopes in shape:
        resource = request.resource_logs.add()
        for records in scopes:
            resource.scope_logs.add().log_records.extend(
                PbLogRecord(time_unix_nano=i + 1) for i in range(records)
            )
    true = _true_count(shape)
    counted = walk_export(request.SerializeToString(), cap=cap).count
    assert counted == true if true <= cap else counted == cap + 1


def test_an_export_over_the_cap_is_413_naming_it_before_decoding_and_at_the_cap_decodes():
    data = _traces_of([[3]], attrs=False).SerializeToString()  # 5 with its two envelopes
    assert len(spans_of(decode_request("traces", data, "protobuf", max_items=5))) == 3
    with pytest.raises(FieldError) as refused:
        decode_request("traces", data + b"\xff\xff", "protobuf", max_items=4)
    assert refused.value.status == 413 and "OTLP_MAX_ITEMS_PER_EXPORT=4" in refused.value.message
    body = json.loads(json_format.MessageToJson(_traces_of([[3]], attrs=False)))
    assert len(spans_of(decode_request("traces", json.dumps(body).encode(), "json", max_items=5)))
    with pytest.raises(FieldError) as refused_json:
        decode_request("traces", json.dumps(body).encode(), "json", max_items=4)
    assert refused_json.value.status == 413


def test_a_malformed_body_stops_the_count_and_the_decoder_refuses_it():
    assert walk_export(b"\x0a\xff", cap=10).count == 0
    with pytest.raises(FieldError) as refused:
        decode_request("traces", b"\x0a\xff", "protobuf", max_items=10)
    assert refused.value.status == 400


def test_a_body_broken_twice_is_refused_for_what_breaks_first_and_over_the_cap_for_the_cap():
    """The walk that counts the items also finds them; the envelopes parse in wire order, so a
    resource protobuf refuses is named before framing that breaks after it, and an export over
    the cap is a 413 whatever is broken in it."""
    bad_resource = b"\x0a\x03" + b"\x0a\x01\xff"  # a resource whose `resource` field is no message
    scope = _traces_of([[2]], attrs=False).resource_spans[0].SerializeToString()
    body = b"\x0a" + bytes([len(bad_resource + scope)]) + bad_resource + scope + b"\x0a\xff"
    with pytest.raises(FieldError) as refused:
        decode_request("traces", body, "protobuf", max_items=10)
    assert refused.value.status == 400
    assert "runs past its end" not in refused.value.message  # the resource's own error
    with pytest.raises(FieldError) as over:
        decode_request("traces", body, "protobuf", max_items=3)
    assert over.value.status == 413
    truncated = _traces_of([[2], [1]], attrs=True).SerializeToString()[:-3]
    with pytest.raises(FieldError) as cut:
        decode_request("traces", truncated, "protobuf", max_items=10)
    assert cut.value.status == 400 and "a field runs past its end" in cut.value.message
