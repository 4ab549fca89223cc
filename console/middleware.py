"""Request guards that answer JSON before any view: body limits (413), unreadable input (411,
422), an unavailable database (503)."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from telemetry import safejson


def _limit_for(path: str) -> int:
    if path.startswith(("/api/v1/telemetry", "/api/v1/otlp/")):
        return int(settings.TELEMETRY_MAX_REQUEST_BYTES)
    return int(settings.MAX_REQUEST_BYTES)


def body_limit(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return JsonResponse(
                {"detail": "Content-Length: not an integer", "field": "body"}, status=400
            )
        limit = _limit_for(request.path)
        if length > limit:
            return JsonResponse(
                {
                    "detail": f"body: {length} bytes is over this endpoint's limit of {limit} bytes",
                    "field": "body",
                    "limit_bytes": limit,
                },
                status=413,
            )
        return get_response(request)

    return middleware


# --- input robustness (issue 16): one parse rule for every API door ---------------------------

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _unprocessable(field: str, message: str, status: int = 422) -> JsonResponse:
    return JsonResponse({"detail": f"{field}: {message}", "field": field}, status=status)


def request_guard(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Refuse, before any view runs, what no view can keep (see `telemetry.safejson`).

    Every request: a body sent chunked without Content-Length answers 411 (Django would read it
    as empty). API requests: NUL in the path or a query parameter answers 422 naming it
    (PostgreSQL cannot compare such text); a JSON body that parses but breaks the rule (a lone
    surrogate, NaN/Infinity, nesting deeper than `MAX_DEPTH`, an unreadable integer) answers
    422 naming the field, so nothing of it is stored. Telemetry records are judged one by one
    in ingest instead (one bad record of a batch never drops the others); here only a body
    that cannot be decoded at all is refused. Malformed JSON is left to the views, which name
    line and column.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        if (
            request.method in _BODY_METHODS
            and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
            and not request.META.get("CONTENT_LENGTH")
        ):
            return _unprocessable(
                "body", "send a Content-Length (chunked request bodies are not read)", status=411
            )
        if not request.path.startswith("/api/"):
            return get_response(request)
        if "\x00" in request.path:
            return _unprocessable("path", "must not contain NUL characters")
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return _unprocessable(name.replace("\x00", "\\u0000"), "must not contain NUL")
        if request.method in _BODY_METHODS and request.META.get("CONTENT_LENGTH") not in (
            None,
            "",
            "0",
        ):
            refused = _json_problem(request)
            if refused is not None:
                return _unprocessable(*refused)
        return get_response(request)

    return middleware


def _json_problem(request: HttpRequest) -> tuple[str, str] | None:
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        return None  # the view names the byte
    if not text.strip():
        return None
    try:
        value = safejson.decode(text)
    except json.JSONDecodeError:
        return None
    except safejson.UnsafeJson as exc:
        return exc.field, exc.message
    if request.path.startswith(("/api/v1/telemetry", "/api/v1/otlp/")):
        return None  # judged per record by telemetry.ingest (OTLP: per span / log record)
    return safejson.problem(value)
