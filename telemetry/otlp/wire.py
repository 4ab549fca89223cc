"""OTLP/HTTP on the wire: request bodies in, plain spans and log records out; responses back.

No Django here: the view hands over the body, the content type and encoding, and a size limit.
Decoding is `opentelemetry-proto`'s (protobuf binary, and proto3 JSON through
`google.protobuf.json_format` after the one change OTLP JSON makes to it: trace and span ids are
hex, not base64). What comes out is frozen dataclasses of plain values, which the pure mapping
(`telemetry.otlp.mapping`) reads without knowing about protobuf.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
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
from telemetry.otlp.framing import Malformed, Walk, walk_export
from telemetry.otlp.mapping import Rejection

Signal = Literal["traces", "logs", "metrics"]
Encoding = Literal["protobuf", "json"]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

# An attribute value as OTLP carries it, in plain Python.
AttrValue = str | bool | int | float | bytes | list[Any] | dict[str, Any] | None
Attributes = dict[str, AttrValue]


@dataclass(slots=True)
class Span:  # not frozen, as `CallDraft` (one per span of an export); never changed
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


def refuse_too_many(signal: Signal, count: int, *, cap: int) -> None:
    """A 413 naming the limit when an export carries more than `cap` spans or log records (or
    resource and scope envelopes: each real one carries at least one item)."""
    if count > cap:
        noun = "spans" if signal == "traces" else "log records"
        raise FieldError(
            "body",
            f"carries more than OTLP_MAX_ITEMS_PER_EXPORT={cap} {noun} or envelopes in one "
            "export: lower the exporter's batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, "
            "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE)",
            status=413,
        )


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


@dataclass(frozen=True, slots=True)
class Decoded:
    """An Export*ServiceRequest, and the spans or log records refused while decoding it by their
    position among all of the export's items (OTLP JSON: one bad item is refused alone)."""

    request: Message
    refused: Mapping[int, Rejection] = field(default_factory=dict)


def decode_request(signal: Signal, data: bytes, encoding: Encoding, *, max_items: int) -> Decoded:
    """The Export*ServiceRequest in `data`; a `FieldError` (400) naming where it broke.

    In either encoding a span or log record that protobuf refuses (JSON: a bad id, a wrong type;
    binary: a string that is not UTF-8, a truncated field; both: values nested too deep) is
    refused alone, in `refused`; the rest of the export decodes (`_parse_items`, one rule for
    both). Only a broken envelope (resource, scope, the request itself) refuses the export. An export of more than
    `max_items` spans or log records is refused whole (413) before any of them is decoded into
    a message: the cost of an export is bounded by the cap, not by how small its items are.
    """
    request = _REQUESTS[signal]()
    if encoding == "protobuf":
        walk = None if signal == "metrics" else walk_export(data, cap=max_items)
        if walk is not None:
            refuse_too_many(signal, walk.count, cap=max_items)
        try:
            if walk is None:
                request.ParseFromString(data)
                pieces = None
            else:
                pieces = _take_protobuf_items(walk, request, signal)
        except (DecodeError, Malformed) as exc:
            why = str(exc) or "a field runs past its end"
            raise FieldError(
                "body", f"is not an OTLP protobuf {_name(signal)}: {why}", status=400
            ) from None
        if len(UnknownFieldSet(request)):
            raise FieldError(
                "body", f"is not an OTLP protobuf {_name(signal)} (unknown fields)", status=400
            )
        if pieces is None:
            return Decoded(request)
        return Decoded(request, _parse_items(request, signal, pieces, _parse_protobuf_item))
    obj = _json_object(data)
    if not isinstance(obj, dict):
        raise FieldError("body", f"must be a JSON object (an OTLP {_name(signal)})", status=400)
    known = _TOP[signal]
    if obj and not any(k in obj for k in known):
        raise FieldError(
            "body", f"is not an OTLP {_name(signal)}: it has no {known[0]}", status=400
        )
    items = _take_items(obj, signal)
    if signal != "metrics":
        envelopes = sum(1 + len(per_scope) for per_scope in items)
        total = envelopes + sum(len(scope) for per_scope in items for scope in per_scope)
        refuse_too_many(signal, total, cap=max_items)
    _parse(obj, request)
    return Decoded(request, _parse_items(request, signal, items, _parse_json_item))


def _name(signal: Signal) -> str:
    return _REQUESTS[signal].DESCRIPTOR.name


def _parse(obj: dict[str, Any], message: Message) -> None:
    try:
        json_format.ParseDict(obj, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise FieldError("body", f"is not OTLP JSON: {str(exc)[:500]}", status=400) from None


# Deeper than this an OTLP JSON value is cut out (its span or log record is refused): protobuf
# parses at most 100 nested messages, which OTLP JSON spells in fewer levels than this, and
# Python's JSON parser must never reach the interpreter's recursion limit.
MAX_JSON_DEPTH: Final = 200
# What a value nested too deep becomes (a JSON string where protobuf wants an object).
TOO_DEEP: Final = "\x00nested too deep"
# A piece of JSON: strings and what separates them up to the next bracket, or a run of anything
# but strings (brackets included). Possessive quantifiers: a string that never ends fails once,
# without backtracking.
_JSON_PIECE: Final = re.compile(rb'(?:"(?:[^"\\]++|\\.)*+"[^"\[\]{}]*+)++|[^"]++', re.DOTALL)
_OPEN: Final = frozenset(b"[{")
_CLOSE: Final = frozenset(b"]}")


def _json_object(data: bytes) -> Any:
    """`data` parsed as JSON; values nested deeper than MAX_JSON_DEPTH become TOO_DEEP."""
    try:
        return json.loads(data)
    except RecursionError:
        data = cut_too_deep(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FieldError("body", f"is not valid JSON: {exc}", status=400) from None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FieldError("body", f"is not valid JSON: {exc}", status=400) from None


def cut_too_deep(data: bytes) -> bytes:
    """`data` with every array or object that opens deeper than MAX_JSON_DEPTH replaced by the
    JSON string TOO_DEEP. JSON that was invalid stays so.

    Linear: one pass over the pieces of `data`; a run outside strings is walked byte by byte
    only when the limit may be crossed in it (else its brackets are counted), so no dearer per
    byte than protobuf's JSON parser that reads the same bytes next.
    """
    out: list[bytes] = []
    depth = 0
    kept = 0  # data[kept:] is not yet in `out`
    cut: int | None = None  # where the value being cut out opened
    pos = 0
    while pos < len(data):
        piece = _JSON_PIECE.match(data, pos)
        if piece is None:
            raise FieldError("body", "is not valid JSON: a string never ends", status=400)
        start, pos = piece.span()
        if data[start] == 0x22:  # '"': strings, no structure between them
            continue
        run = piece[0]
        opens, closes = run.count(b"[") + run.count(b"{"), run.count(b"]") + run.count(b"}")
        if (depth + opens <= MAX_JSON_DEPTH) if cut is None else (depth - closes > MAX_JSON_DEPTH):
            depth += opens - closes  # the limit is not crossed in this run
            continue
        for offset, byte in enumerate(run, start):
            if byte in _OPEN:
                depth += 1
                if depth == MAX_JSON_DEPTH + 1 and cut is None:
                    cut = offset
            elif byte in _CLOSE:
                depth -= 1
                if depth == MAX_JSON_DEPTH and cut is not None:
                    out += (data[kept:cut], json.dumps(TOO_DEEP).encode())
                    kept, cut = offset + 1, None
    out.append(data[kept:cut])  # a cut value that never closes leaves the JSON unfinished
    return b"".join(out)


_SCOPES: Final[dict[Signal, tuple[str, str]]] = {
    "traces": ("scopeSpans", "scope_spans"),
    "logs": ("scopeLogs", "scope_logs"),
    "metrics": ("scopeMetrics", "scope_metrics"),
}
_ITEMS: Final[dict[Signal, tuple[str, ...]]] = {
    "traces": ("spans",),
    "logs": ("logRecords", "log_records"),
    "metrics": (),  # metric points are counted whole, never stored
}


def _take_items(obj: dict[str, Any], signal: Signal) -> list[list[list[Any]]]:
    """The spans or log records of each scope of each resource, taken out of `obj` so the
    envelope parses without them (`_parse_items` parses each alone)."""
    top, scopes_key, items_keys = _TOP[signal], _SCOPES[signal], _ITEMS[signal]
    taken: list[list[list[Any]]] = []
    resources = obj.get(top[0], obj.get(top[1]))
    for resource in resources if isinstance(resources, list) else []:
        scopes = (
            resource.get(scopes_key[0], resource.get(scopes_key[1]))
            if isinstance(resource, dict)
            else None
        )
        per_scope: list[list[Any]] = []
        for scope in scopes if isinstance(scopes, list) else []:
            items: list[Any] = []
            for key in items_keys if isinstance(scope, dict) else ():
                value = scope.get(key)
                if isinstance(value, list):
                    items += value
                    scope[key] = []
            per_scope.append(items)
        taken.append(per_scope)
    return taken


ItemParser = Callable[[Any, Any], "tuple[str, str] | None"]


def _parse_items(
    request: Message, signal: Signal, taken: list[list[list[Any]]], parse_one: ItemParser
) -> dict[int, Rejection]:
    """Parse each taken span or log record into its scope of `request` with `parse_one`; the
    ones it refuses are left out and returned by their position among all items."""
    refused: dict[int, Rejection] = {}
    index = 0
    resources = getattr(request, _TOP[signal][1])
    for resource, per_scope in zip(resources, taken, strict=True):
        for scope, items in zip(getattr(resource, _SCOPES[signal][1]), per_scope, strict=True):
            target = getattr(scope, "spans" if signal == "traces" else "log_records")
            for item in items:
                problem = parse_one(item, target)
                if problem is not None:
                    refused[index] = Rejection(index, *problem)
                index += 1
    return refused


def _parse_json_item(item: Any, target: Any) -> tuple[str, str] | None:
    """Add `item` (one OTLP JSON span or log record) to `target`; (field, why) when refused."""
    if not isinstance(item, dict):
        return "record", "must be a JSON object"
    try:
        _convert_ids(item)
        for li, link in enumerate(_list(item.get("links"))):
            _convert_ids(link, f"links.{li}.")
    except FieldError as exc:
        return exc.field, exc.message
    added = target.add()
    try:
        json_format.ParseDict(item, added, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        del target[-1]
        return "record", f"is not OTLP JSON: {str(exc)[:300]}"
    return None


def _parse_protobuf_item(item: memoryview, target: Any) -> tuple[str, str] | None:
    """Add `item` (one span or log record, protobuf binary) to `target`; (field, why) when
    refused."""
    added = target.add()
    try:
        added.ParseFromString(item)
    except DecodeError as exc:
        del target[-1]
        return "record", f"is not an OTLP protobuf {added.DESCRIPTOR.name}: {str(exc)[:300]}"
    return None


def _take_protobuf_items(walk: Walk, request: Message, signal: Signal) -> list[list[list[Any]]]:
    """Parse the envelope of a protobuf traces or logs export into `request` (resources and
    scopes, without their items) from its walk (`framing.walk_export`) and return each scope's
    items, unparsed, for `_parse_items`. Items are views of the body, not copies.

    Each scope is parsed once its walk is whole, each resource after its scopes, the request
    last: a body that broke where the walk stopped raises Malformed there, after the envelopes
    before it, and a broken envelope raises DecodeError.
    """
    taken: list[list[list[Any]]] = []
    resources = getattr(request, _TOP[signal][1])
    for walked in walk.resources:
        resource = resources.add()
        scopes = getattr(resource, _SCOPES[signal][1])
        per_scope: list[list[Any]] = []
        for walked_scope in walked.scopes:
            scope = scopes.add()
            if not walked_scope.whole:
                raise Malformed
            scope.MergeFromString(b"".join(walked_scope.rest))
            per_scope.append(walked_scope.items)
        if not walked.whole:
            raise Malformed
        resource.MergeFromString(b"".join(walked.rest))
        taken.append(per_scope)
    if not walk.whole:
        raise Malformed
    request.MergeFromString(b"".join(walk.rest))
    return taken


_ID_KEYS: Final = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")


def _list(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _convert_ids(item: dict[str, Any], path: str = "") -> None:
    """OTLP JSON writes ids as hex (the spec's one departure from proto3 JSON); protobuf's
    parser wants base64. Rewrites them in place; a bad id is a FieldError naming it."""
    for key in _ID_KEYS:
        value = item.get(key)
        if not isinstance(value, str) or not value:
            continue
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise FieldError(
                f"{path}{key}", f"{value[:40]!r} is not a hex id", status=400
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


_NESTED: Final = frozenset({"array_value", "kvlist_value"})


def attributes(pairs: Any) -> Attributes:
    """A KeyValue list as a dict (the last of repeated keys wins, as most SDKs do)."""
    out: Attributes = {}
    kv: KeyValue
    for kv in pairs:
        value = kv.value
        kind = value.WhichOneof("value")
        # a scalar inline (what nearly every attribute is); nested values through `any_value`
        out[kv.key] = (
            getattr(value, kind) if kind is not None and kind not in _NESTED else any_value(value)
        )
    return out


def _hex(raw: bytes) -> str:
    return raw.hex()


def _in_place(items: Iterator[Any], refused: Mapping[int, Rejection]) -> Iterator[Any]:
    """`items` with each refused item back at its position in the export."""
    index = 0
    for item in items:
        while index in refused:
            yield refused[index]
            index += 1
        yield item
        index += 1
    while index in refused:
        yield refused[index]
        index += 1


def spans_of(decoded: Decoded) -> list[Span | Rejection]:
    """The export's spans in order, a refused one as its Rejection."""
    return list(iter_spans(decoded))


def iter_spans(decoded: Decoded) -> Iterator[Span | Rejection]:
    """`spans_of`, one at a time: a span's attributes (up to OTLP_MAX_DECODED_BYTES of them
    in all) live in Python only while it is mapped."""
    request: trace_service_pb2.ExportTraceServiceRequest = decoded.request  # type: ignore[assignment]
    if not decoded.refused:  # what nearly every export is: no generator between
        return _spans(request)
    return _in_place(_spans(request), decoded.refused)


def _spans(request: trace_service_pb2.ExportTraceServiceRequest) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                # positional, in the fields' order, the ids' `_hex` inline: once per span
                yield Span(
                    span.trace_id.hex(),
                    span.span_id.hex(),
                    span.parent_span_id.hex(),
                    span.name,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    attributes(span.attributes),
                    resource,
                )


def log_records_of(decoded: Decoded) -> list[LogRecord | Rejection]:
    """The export's log records in order, a refused one as its Rejection."""
    return list(iter_log_records(decoded))


def iter_log_records(decoded: Decoded) -> Iterator[LogRecord | Rejection]:
    """`log_records_of`, one at a time (see `iter_spans`)."""
    request: logs_service_pb2.ExportLogsServiceRequest = decoded.request  # type: ignore[assignment]
    return _in_place(_log_records(request), decoded.refused)


def _log_records(request: logs_service_pb2.ExportLogsServiceRequest) -> Iterator[LogRecord]:
    for resource_logs in request.resource_logs:
        resource = attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                yield LogRecord(
                    time_ns=record.time_unix_nano,
                    observed_ns=record.observed_time_unix_nano,
                    body=any_value(record.body) if record.HasField("body") else None,
                    event_name=record.event_name,
                    attributes=attributes(record.attributes),
                    resource=resource,
                    trace_id=_hex(record.trace_id),
                    span_id=_hex(record.span_id),
                )


def data_points_of(decoded: Decoded) -> int:
    """How many data points an export carries (all of them are rejected: we take no metrics)."""
    request: metrics_service_pb2.ExportMetricsServiceRequest = decoded.request  # type: ignore[assignment]
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
