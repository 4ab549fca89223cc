"""Request guards that answer JSON before any view: URL length (414), body limits (413),
chunked bodies read to their end (408 when stalled), unreadable input (411, 422), an
unavailable or full database (503); and the operator's time zone for the pages."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, UnreadablePostError
from django.http.response import HttpResponseBase
from django.middleware.gzip import GZipMiddleware
from django.template.loader import render_to_string
from django.utils import timezone
from django.views import defaults

from console.list_filters import REPEATABLE
from console.period_request import request_zone
from telemetry import database_errors, safejson
from telemetry.errors import FieldError

logger = logging.getLogger(__name__)


def url_limit(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """414 for a request target (path and query string, as sent) over `MAX_URL_BYTES`: JSON on
    the API and machine routes, one plain line for pages. gunicorn lets lines up to its maximum
    through (`console.gunicorn_conf`), so this cap is what a client meets, in any server."""

    def middleware(request: HttpRequest) -> HttpResponse:
        limit = int(settings.MAX_URL_BYTES)
        # RAW_URI: the target as gunicorn read it; other servers give the decoded path
        target = request.META.get("RAW_URI") or request.get_full_path()
        size = len(str(target).encode("utf-8", "surrogateescape"))
        if size <= limit:
            return get_response(request)
        detail = f"url: {size} bytes is over the limit of {limit} bytes; send long input in a body"
        if request.path.startswith(("/api/", "/metrics", "/healthz")):
            return JsonResponse(
                {"detail": detail, "field": "url", "limit_bytes": limit}, status=414
            )
        return HttpResponse(detail, status=414, content_type="text/plain; charset=utf-8")

    return middleware


def _limit_for(path: str) -> int:
    if path.startswith(("/api/v1/telemetry", "/api/v1/otlp/")):
        return int(settings.TELEMETRY_MAX_REQUEST_BYTES)
    return int(settings.MAX_REQUEST_BYTES)


def _unprocessable(field: str, message: str, status: int = 422) -> JsonResponse:
    return JsonResponse({"detail": f"{field}: {message}", "field": field}, status=status)


def _over_limit(what: str, limit: int) -> JsonResponse:
    return JsonResponse(
        {
            "detail": f"body: {what} over this endpoint's limit of {limit} bytes",
            "field": "body",
            "limit_bytes": limit,
        },
        status=413,
    )


_CHUNK_READ = 64 * 1024


def _read_chunked(request: HttpRequest, limit: int) -> HttpResponse | None:
    """Read a chunked body to its end, at most `limit` + 1 bytes, and hand it on as if it had come
    with a Content-Length; or the answer that refuses it.

    Only a server that decodes the chunk framing itself says so (`wsgi.input_terminated`:
    gunicorn, so `make run` and production): there `wsgi.input` ends where the body ends.
    Django reads a body by its Content-Length alone, so without this it would see an empty one.
    A server that passes the raw framing on (`manage.py runserver`) cannot be read here: 411.
    """
    environ = getattr(request, "environ", {})  # a WSGIRequest's; the test client's too
    if not environ.get("wsgi.input_terminated"):
        return _unprocessable(
            "body",
            "send a Content-Length: this server does not decode chunked request bodies "
            "(gunicorn, as `make run` and production serve, does)",
            status=411,
        )
    stream = environ["wsgi.input"]
    pieces: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            piece = stream.read(min(_CHUNK_READ, limit + 1 - size))
            if not piece:
                break
            pieces.append(piece)
            size += len(piece)
    except TimeoutError:
        # console.gunicorn_conf bounds every read of the socket: the client stalled mid-body
        return _unprocessable("body", "was not received in time", status=408)
    except Exception as exc:  # noqa: BLE001 - whatever the server's chunk reader raises
        # gunicorn's own parse errors (a chunk size that is not hex, a missing CRLF, the client
        # gone before the last chunk) subclass no common standard exception: all are the
        # client's framing, a 400, never a 500
        name = type(exc).__name__
        return _unprocessable("body", f"its chunked framing could not be read ({name})", 400)
    if size > limit:
        return _over_limit("sent chunked, it is", limit)
    body = b"".join(pieces)
    del pieces
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._stream = io.BytesIO(body)  # what `request.body` reads; nothing has read it yet
    return None


def body_limit(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """413 for a body over its route's limit (`TELEMETRY_MAX_REQUEST_BYTES` for telemetry and
    OTLP, `CONSOLE_MAX_REQUEST_BYTES` elsewhere): a declared Content-Length before anything is
    read; a chunked body (no Content-Length, as OpenTelemetry JS exporters send) as soon as
    more than the limit has arrived. A chunked body within it is read here (`_read_chunked`)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        limit = _limit_for(request.path)
        declared = request.META.get("CONTENT_LENGTH")
        if not declared and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            refused = _read_chunked(request, limit)
            return refused if refused is not None else get_response(request)
        try:
            length = int(declared or 0)
        except ValueError:
            return JsonResponse(
                {"detail": "Content-Length: not an integer", "field": "body"}, status=400
            )
        if length > limit:
            return _over_limit(f"{length} bytes is", limit)
        return get_response(request)

    return middleware


# --- input robustness (issue 16): one parse rule for every API door ---------------------------

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def request_guard(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Refuse, before any view runs, what no view can keep (see `telemetry.safejson`).

    API requests (a chunked body arrives here already read, with its length: `body_limit`): NUL in the path or a query parameter answers 422 naming it
    (PostgreSQL cannot compare such text); a JSON body that parses but breaks the rule (a lone
    surrogate, NaN/Infinity, nesting deeper than `MAX_DEPTH`, an unreadable integer) answers
    422 naming the field, so nothing of it is stored. Telemetry records are judged one by one
    in ingest instead (one bad record of a batch never drops the others); here only a body
    that cannot be decoded at all is refused. Malformed JSON is left to the views, which name
    line and column.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return get_response(request)
        if "\x00" in request.path:
            return _unprocessable("path", "must not contain NUL characters")
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return _unprocessable(name.replace("\x00", "\\u0000"), "must not contain NUL")
            # only a list's parameters take several values (`?tag=a&tag=b`); any other given
            # twice is said, instead of picking one
            if len(values) > 1 and name not in REPEATABLE:
                return _unprocessable(name, "is given more than once; send it once")
        if request.method in _BODY_METHODS and request.META.get("CONTENT_LENGTH") not in (
            None,
            "",
            "0",
        ):
            try:
                request.body  # noqa: B018 - read once here, bounded by the server's timeout
            except UnreadablePostError:
                # the client stalled mid-body (console.gunicorn_conf bounds every read)
                return _unprocessable("body", "was not received in time", status=408)
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
    except FieldError as exc:
        return exc.field, exc.message
    # The view reads the same body: it takes this decoded value instead of parsing it again.
    request.decoded_json = value  # type: ignore[attr-defined]
    if request.path.startswith(("/api/v1/telemetry", "/api/v1/otlp/")):
        return None  # judged per record by telemetry.ingest.pipeline (OTLP: per span / log record)
    return safejson.problem(value)


# --- the operator's time zone (issue 39, item 1) -------------------------------------------------

_MACHINE_ROUTES = ("/api/", "/metrics", "/healthz")


def operator_zone(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Pages render their times in the operator's zone (`console.period_request.request_zone`:
    `?tz=`, else the remembered one, else UTC): the zone is Django's current time zone for the
    request, so the templates' `date` filters and `localtime` follow it, and `_base.html` names
    it once. The API and machine routes keep UTC (their times are ISO 8601 with an offset)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if request.path.startswith(_MACHINE_ROUTES):
            return get_response(request)
        timezone.activate(request_zone(request))
        try:
            return get_response(request)
        finally:
            timezone.deactivate()

    return middleware


# --- the database is away or full: 503 with Retry-After, never a 500 page ------------------------


def database_unavailable_response(
    request: HttpRequest, exc: BaseException | None = None
) -> HttpResponse:
    """503 JSON for the API and machine routes, a plain page for people; both with Retry-After.

    A full database (`exc` classified `full`) says so, with a longer Retry-After; the driver's
    message (which names server files) is never shown. The page is rendered without a request
    context: the context processors would query the database that is not answering.
    """
    full = exc is not None and database_errors.database_fault(exc) == "full"
    if full:
        retry = database_errors.FULL_RETRY_AFTER_SECONDS
        detail = f"{database_errors.full_detail(exc)}; nothing was changed, retry in {retry} s"
        error = "database_full"
    else:
        retry = database_errors.UNAVAILABLE_RETRY_AFTER_SECONDS
        detail = f"the database is not answering; nothing was changed, retry in {retry} s"
        error = "database_unavailable"
    response: HttpResponse
    if request.path.startswith(("/api/", "/metrics", "/healthz")):
        response = JsonResponse(
            {"detail": detail, "error": error, "retry_after": retry}, status=503
        )
    else:
        response = HttpResponse(
            render_to_string(
                "database_unavailable.html",
                {"retry_after": retry, "full": full, "detail": detail},
            ),
            status=503,
        )
    response["Retry-After"] = str(retry)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailable:
    """Turns a database outage or a full database met by a view into a 503
    (see `database_unavailable_response`).

    The request's transaction was rolled back by `atomic`, so nothing of it was stored; Django
    drops the broken connection at the end of the request and the next one reconnects, so the
    service recovers by itself when the database is back.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if database_errors.note_fault(exception, f"{request.method} {request.path}") is None:
            return None
        return database_unavailable_response(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a database outage outside a view (a middleware, a session save) is a 503 too;
    anything else is a 500 in JSON on the API."""
    exc = sys.exc_info()[1]
    if exc is not None and database_errors.note_fault(exc, f"{request.method} {request.path}"):
        return database_unavailable_response(request, exc)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal server error"}, status=500)
    return defaults.server_error(request)


# --- security headers (issue 16, item 12) -------------------------------------------------------

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        # plotly and htmx set inline styles; no inline script is allowed
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PERMISSIONS_POLICY = (
    "accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), "
    "microphone=(), payment=(), usb=()"
)


def security_headers(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Content-Security-Policy and Permissions-Policy on every response that has none."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        if "Permissions-Policy" not in response:
            response["Permissions-Policy"] = PERMISSIONS_POLICY
        return response

    return middleware


# --- compression (issue 39, item 5) --------------------------------------------------------------


class Compress(GZipMiddleware):
    """gzip for pages, htmx fragments and API answers whose body is at least
    `COMPRESS_MIN_BYTES` (below that the gzip header and the random padding outweigh the gain).

    Django's GZipMiddleware pads each compressed body with up to 100 random bytes in the gzip
    header's file name ("Heal the Breach"), which blurs the length a BREACH attacker measures;
    the CSRF token is masked anew on every response too. Static files never reach this
    middleware: WhiteNoise answers them first, with the `.gz` copies collectstatic wrote.
    """

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if isinstance(response, HttpResponse) and len(response.content) < int(
            settings.COMPRESS_MIN_BYTES
        ):
            return response
        result: HttpResponseBase = super().process_response(request, response)
        return result
