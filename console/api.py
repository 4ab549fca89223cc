"""The one NinjaAPI: routers of every app, and domain errors mapped to HTTP once."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

from alerts.api import router as alerts_router
from alerts.firing import RuleError
from compaction.api import conflict_payload
from compaction.api import router as compaction_router
from compaction.call_api import router as call_router
from compaction.errors import CompactionConflict
from compaction.export_api import router as export_router
from compaction.imports.api import router as imports_router
from compaction.log_api import router as log_router
from compaction.summarizers import SummarizerError
from console.openapi import ConsoleAPI
from console.read_api import router as console_router
from console.tag_api import router as tag_router
from telemetry.api import router as telemetry_router
from telemetry.errors import FieldError
from telemetry.otlp.api import router as otlp_router
from telemetry.ratelimit import RateLimited

api = ConsoleAPI(
    title="Context lifecycle console API",
    version="1",
    description=(
        "Agents send transcripts and per-call token usage, read back the model-visible surface "
        "and their policy. Authenticate with `Authorization: Bearer <agent key>`."
    ),
    urls_namespace="api",
)
api.add_router("/v1", telemetry_router)
api.add_router("/v1", console_router)
api.add_router("/v1", otlp_router)
api.add_router("/v1", compaction_router)
api.add_router("/v1", log_router)
api.add_router("/v1", imports_router)
api.add_router("/v1", alerts_router)
api.add_router("/v1", export_router)
api.add_router("/v1", call_router)
api.add_router("/v1", tag_router)


def _field_of(loc: list[object] | tuple[object, ...]) -> str:
    parts = [str(part) for part in loc]
    if parts and parts[0] in {"body", "query", "path"}:
        parts = parts[1:]
    # ninja nests a single body schema under its parameter name
    if parts and parts[0] in {"payload", "data"}:
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = []
    for error in exc.errors:
        field = _field_of(error.get("loc", ()))
        errors.append({"field": field, "message": str(error.get("msg", "invalid"))})
    first = errors[0] if errors else {"field": "body", "message": "invalid request"}
    return api.create_response(
        request,
        {
            "detail": f"{first['field']}: {first['message']}",
            "field": first["field"],
            "errors": errors,
        },
        status=422,
    )


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = api.create_response(
        request,
        {"detail": "missing, unknown or revoked agent key (Authorization: Bearer <key>)"},
        status=401,
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message}, status=exc.status_code)


@api.exception_handler(FieldError)
def on_field_error(request: HttpRequest, exc: FieldError) -> HttpResponse:
    """Every refused value of every layer (`telemetry.errors.FieldError`), mapped once."""
    return api.create_response(request, {"detail": str(exc), "field": exc.field}, status=exc.status)


@api.exception_handler(RateLimited)
def on_rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": str(exc)}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(CompactionConflict)
def on_compaction_conflict(request: HttpRequest, exc: CompactionConflict) -> HttpResponse:
    """A compaction that applied nothing (`compaction.errors`), mapped once: 409 naming why."""
    return api.create_response(request, conflict_payload(exc), status=409)


@api.exception_handler(SummarizerError)
def on_summarizer_error(request: HttpRequest, exc: SummarizerError) -> HttpResponse:
    # The configured LLM summarizer failed; the compaction applied nothing (its run says so,
    # with the endpoint's URL and reply; the answer names neither).
    return api.create_response(
        request, {"detail": f"summarizer unavailable, nothing changed: {exc.public}"}, status=502
    )


@api.exception_handler(RuleError)
def on_rule_error(request: HttpRequest, exc: RuleError) -> HttpResponse:
    """An alert rule's value that cannot be kept (`alerts.firing.RuleError`): 422 naming it."""
    return api.create_response(request, {"detail": str(exc), "field": exc.field}, status=422)
