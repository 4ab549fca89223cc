"""OTLP/HTTP on the wire: request bodies in, plain spans and log records out; responses back.

No Django here: the view hands over the body, the content type and encoding, and a size limit.
Decoding is `opentelemetry-proto`'s (protobuf binary, and proto3 JSON through
`google.protobuf.json_format` after the one change OTLP JSON makes to it: trace and span ids are
hex, not base64). What comes out is frozen dataclasses of plain values, which the pure mapping
(`telemetry.otlp.mapping`) reads without knowing about protobuf.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any, Final, Literal

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from telemetry.errors import FieldError

Signal = Literal["traces", "logs", "metrics"]
Encoding = Literal["protobuf", "json"]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

# An attribute value as OTLP carries it, in plain Python.
AttrValue = str | bool | int | float | bytes | list[Any] | dict[str, Any] | None
Attributes = dict[str, AttrValue]


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str  # lowercase hex, 32 chars ("" when absent)
    span_id: str  # lowercase hex, 16 chars
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: Attributes
    resource: Attributes


@dataclass(frozen=True, slots=True)
class LogRecord:
    time_ns: int
    observed_ns: int
    body: AttrValue
    event_name: str  # the OTLP 1.5+ `event_name` field ("" when absent)
    attributes: Attributes
    resource: Attributes
    trace_id: str
    span_id: str


def encoding_of(content_type: str) -> Encoding:
    """The OTLP encoding a Content-Type names (none at all: protobuf, OTLP's default); any
    other media type is a 415."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("", PROTOBUF, "application/protobuf"):
        return "protobuf"
    if media == JSON:
        return "json"
    raise FieldError(
        "Content-Type",
        f"{media}: send {PROTOBUF} or {JSON} (OTLP/HTTP)",
        status=415,
    )


def inflate(body: bytes, content_encoding: str, *, limit: int) -> bytes:
    """The body without its Content-Encoding (identity, gzip or deflate), refused above `limit` bytes.

    The limit applies to the inflated size too: a small gzip body may not expand past it.
    """
    coding = content_encoding.strip().lower()
    if coding in ("", "identity"):
        data = body
    elif coding in ("gzip", "deflate"):
        # gzip framing for gzip; zlib (or gzip) framing auto-detected for deflate.
        inflater = zlib.decompressobj((16 if coding == "gzip" else 32) + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error as exc:
            raise FieldError("body", f"is not valid {coding} ({exc})", status=400) from None
        if len(data) <= limit and not inflater.eof:
            raise FieldError("body", f"is a truncated {coding} stream", status=400)
    else:
        raise FieldError(
            "Content-Encoding",
            f"{coding!r} is not supported; send gzip, deflate or none",
            status=415,
        )
    if len(data) > limit:
        raise FieldError(
            "body", f"inflates to more than this endpoint's limit of {limit} bytes", status=413
        )
    return data


_REQUESTS: Final[dict[Signal, type[Message]]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
_TOP: Final[dict[Signal, tuple[str, str]]] = {
    "traces": ("resourceSpans", "resource_spans"),
    "logs": ("resourceLogs", "resource_logs"),
    "metrics": ("resourceMetrics", "resource_metrics"),
}


def decode_request(signal: Signal, data: bytes, encoding: Encoding) -> Message:
    """The Export*ServiceRequest in `data`; a `FieldError` (400) naming where it broke."""
    request = _REQUESTS[signal]()
    if encoding == "protobuf":
        try:
            request.ParseFromString(data)
        except DecodeError as exc:
            raise FieldError(
                "body", f"is not an OTLP protobuf {_name(signal)}: {exc}", status=400
            ) from None
        if len(UnknownFieldSet(request)):
            raise FieldError(
                "body", f"is not an OTLP protobuf {_name(signal)} (unknown fields)", status=400
            )
        return request
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FieldError("body", f"is not valid JSON: {exc}", status=400) from None
    if not isinstance(obj, dict):
        raise FieldError("body", f"must be a JSON object (an OTLP {_name(signal)})", status=400)
    known = _TOP[signal]
    if obj and not any(k in obj for k in known):
        raise FieldError(
            "body", f"is not an OTLP {_name(signal)}: it has no {known[0]}", status=400
        )
    _hex_ids_to_base64(obj, signal)
    try:
        json_format.ParseDict(obj, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise FieldError("body", f"is not OTLP JSON: {exc}", status=400) from None
    return request


def _name(signal: Signal) -> str:
    return _REQUESTS[signal].DESCRIPTOR.name


_ID_KEYS: Final = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")


def _hex_ids_to_base64(obj: dict[str, Any], signal: Signal) -> None:
    """OTLP JSON writes ids as hex (the spec's one departure from proto3 JSON); protobuf's
    parser wants base64. Rewrites them in place; a bad id is a 400 naming its path."""
    top = _TOP[signal]
    for ri, resource in enumerate(_list(obj.get(top[0], obj.get(top[1])))):
        scopes = resource.get("scopeSpans", resource.get("scope_spans")) or resource.get(
            "scopeLogs", resource.get("scope_logs")
        )
        for si, scope in enumerate(_list(scopes)):
            items = scope.get("spans") or scope.get("logRecords", scope.get("log_records"))
            for ii, item in enumerate(_list(items)):
                path = f"{top[0]}.{ri}.scope.{si}.{ii}"
                _convert_ids(item, path)
                for li, link in enumerate(_list(item.get("links"))):
                    _convert_ids(link, f"{path}.links.{li}")


def _list(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _convert_ids(item: dict[str, Any], path: str) -> None:
    for key in _ID_KEYS:
        value = item.get(key)
        if not isinstance(value, str) or not value:
            continue
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise FieldError(
                f"{path}.{key}", f"{value[:40]!r} is not a hex id", status=400
            ) from None
        item[key] = base64.b64encode(raw).decode()


# --- protobuf -> plain values -------------------------------------------------------------------


def any_value(value: AnyValue) -> AttrValue:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    result: AttrValue = getattr(value, kind)
    return result


def attributes(pairs: Any) -> Attributes:
    """A KeyValue list as a dict (the last of repeated keys wins, as most SDKs do)."""
    out: Attributes = {}
    kv: KeyValue
    for kv in pairs:
        out[kv.key] = any_value(kv.value)
    return out


def _hex(raw: bytes) -> str:
    return binascii.hexlify(raw).decode()


def spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> list[Span]:
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        trace_id=_hex(span.trace_id),
                        span_id=_hex(span.span_id),
                        parent_span_id=_hex(span.parent_span_id),
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=attributes(span.attributes),
                        resource=resource,
                    )
                )
    return spans


def log_records_of(request: logs_service_pb2.ExportLogsServiceRequest) -> list[LogRecord]:
    records: list[LogRecord] = []
    for resource_logs in request.resource_logs:
        resource = attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                records.append(
                    LogRecord(
                        time_ns=record.time_unix_nano,
                        observed_ns=record.observed_time_unix_nano,
                        body=any_value(record.body) if record.HasField("body") else None,
                        event_name=record.event_name,
                        attributes=attributes(record.attributes),
                        resource=resource,
                        trace_id=_hex(record.trace_id),
                        span_id=_hex(record.span_id),
                    )
                )
    return records


def data_points_of(request: metrics_service_pb2.ExportMetricsServiceRequest) -> int:
    """How many data points an export carries (all of them are rejected: we take no metrics)."""
    count = 0
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    count += len(getattr(metric, kind).data_points)
    return count


# --- responses ----------------------------------------------------------------------------------


def encode_response(signal: Signal, rejected: int, message: str, encoding: Encoding) -> bytes:
    """The Export*ServiceResponse; `partial_success` set only when there is something to say."""
    response: Message
    if signal == "traces":
        response = trace_service_pb2.ExportTraceServiceResponse()
        if rejected or message:
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = message
    elif signal == "logs":
        response = logs_service_pb2.ExportLogsServiceResponse()
        if rejected or message:
            response.partial_success.rejected_log_records = rejected
            response.partial_success.error_message = message
    else:
        response = metrics_service_pb2.ExportMetricsServiceResponse()
        if rejected or message:
            response.partial_success.rejected_data_points = rejected
            response.partial_success.error_message = message
    if encoding == "protobuf":
        return response.SerializeToString()
    return json.dumps(json_format.MessageToDict(response)).encode()


def encode_status(code: int, message: str, encoding: Encoding) -> bytes:
    """A google.rpc.Status body for a refused request, as OTLP/HTTP asks for 4xx/5xx answers."""
    status = status_pb2.Status(code=code, message=message)
    if encoding == "protobuf":
        data: bytes = status.SerializeToString()
        return data
    return json.dumps(json_format.MessageToDict(status)).encode()
