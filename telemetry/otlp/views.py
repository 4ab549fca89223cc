"""POST /api/v1/otlp/v1/{traces,logs,metrics}: OTLP/HTTP export endpoints (thin).

Look up the key, decode, map, store, answer the Export*ServiceResponse in the request's
encoding. Status codes follow the OTLP/HTTP specification: 200 with `partial_success` for
rejected items, 400 for a body we cannot decode (not retryable), 401 without a valid key,
413 over the size limits (on the wire, inflated) or the item cap (`OTLP_MAX_ITEMS_PER_EXPORT`,
counted before decoding), 415 for an encoding we do not speak, 429 and 503 with `Retry-After`
(the exporter retries those).
"""

from __future__ import annotations

import logging
from typing import cast

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from telemetry import database_errors
from telemetry.api import enqueue_relief
from telemetry.errors import FieldError
from telemetry.ingest.pipeline import latest_accepted_at
from telemetry.keys import find_active_key
from telemetry.models import AgentKey
from telemetry.otlp import claude_code, mapping, wire
from telemetry.otlp.heap import release_after
from telemetry.otlp.store import store_mapped
from telemetry.ratelimit import RateLimited, check_rate

log = logging.getLogger(__name__)

# google.rpc.Code values for the Status body of refused requests.
_RPC_CODE = {400: 3, 401: 16, 403: 7, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14}


def _answer(status: int, body: bytes, encoding: wire.Encoding) -> HttpResponse:
    content_type = wire.PROTOBUF if encoding == "protobuf" else wire.JSON
    return HttpResponse(body, status=status, content_type=content_type)


def _refuse(
    status: int, message: str, encoding: wire.Encoding, retry_after: int | None = None
) -> HttpResponse:
    response = _answer(
        status, wire.encode_status(_RPC_CODE.get(status, 2), message, encoding), encoding
    )
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def _bearer(request: HttpRequest) -> AgentKey | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return find_active_key(token.strip())


@csrf_exempt
def export(request: HttpRequest, signal: str) -> HttpResponse:
    """One OTLP/HTTP export of `signal` (traces, logs or metrics)."""
    try:
        encoding = wire.encoding_of(request.content_type or "")
    except FieldError as exc:
        return _refuse(exc.status, str(exc), "json")
    if request.method != "POST":
        response = _refuse(405, "use POST (OTLP/HTTP export)", encoding)
        response["Allow"] = "POST"
        return response
    key = _bearer(request)
    if key is None:
        return _refuse(
            401,
            "missing, unknown or revoked agent key: set OTEL_EXPORTER_OTLP_HEADERS="
            '"Authorization=Bearer <agent key>"',
            encoding,
        )
    if not key.has_scope(AgentKey.SCOPE_INGEST):
        return _refuse(403, "this key lacks the 'ingest' scope", encoding)
    try:
        check_rate(key.pk)
        return _export(request, cast(wire.Signal, signal), encoding, key)
    except RateLimited as exc:
        return _refuse(429, str(exc), encoding, retry_after=exc.retry_after)
    except FieldError as exc:
        return _refuse(exc.status, str(exc), encoding)
    except (OperationalError, InterfaceError) as exc:
        # 503 either way: the exporter keeps the batch and retries (a 507 would drop it)
        if database_errors.note_fault(exc, f"otlp {signal} export") == "full":
            return _refuse(
                503,
                f"the console's {database_errors.full_detail(exc)}; retry",
                encoding,
                retry_after=database_errors.FULL_RETRY_AFTER_SECONDS,
            )
        return _refuse(
            503,
            "the console's database is unavailable; retry",
            encoding,
            retry_after=database_errors.UNAVAILABLE_RETRY_AFTER_SECONDS,
        )


def _export(
    request: HttpRequest, signal: wire.Signal, encoding: wire.Encoding, key: AgentKey
) -> HttpResponse:
    size, mapped = _decode_and_map(request, signal, encoding)
    if mapped is None:
        body = wire.encode_response("metrics", size, _NO_METRICS, encoding)
        return _answer(200, body, encoding)
    try:
        stored = store_mapped(key, mapped, on_commit=enqueue_relief)
    finally:
        release_after(size)
    noun = "spans" if signal == "traces" else "log records"
    body = wire.encode_response(signal, len(stored.rejected), stored.message(noun), encoding)
    return _answer(200, body, encoding)


_NO_METRICS = (
    "metrics are not stored here: export traces (GenAI spans) or logs (Claude Code "
    "events) instead, e.g. OTEL_METRICS_EXPORTER=none"
)


def _decode_and_map(
    request: HttpRequest, signal: wire.Signal, encoding: wire.Encoding
) -> tuple[int, mapping.Mapped | None]:
    """(inflated size, what the export maps to); for metrics (data points, None).

    The inflated body, the decoded message and the items (the bulk of a large export) are
    this function's locals: they are freed on its return, before the store's queries run.
    """
    data = wire.inflate(
        request.body,
        request.headers.get("Content-Encoding", ""),
        limit=int(settings.OTLP_MAX_DECODED_BYTES),
    )
    size = len(data)
    decoded = wire.decode_request(
        signal, data, encoding, max_items=int(settings.OTLP_MAX_ITEMS_PER_EXPORT)
    )
    del data  # protobuf holds its own copy
    if signal == "metrics":
        return wire.data_points_of(decoded), None
    latest = latest_accepted_at()  # the JSON API's bound on `at`, for every OTLP time
    if signal == "traces":
        return size, mapping.map_spans(wire.iter_spans(decoded), latest=latest)
    return size, claude_code.map_log_records(wire.iter_log_records(decoded), latest=latest)
