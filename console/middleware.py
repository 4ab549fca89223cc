"""Request-body limits answered as 413 JSON before anything reads the body."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


def _limit_for(path: str) -> int:
    if path.startswith("/api/v1/telemetry"):
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
