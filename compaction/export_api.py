"""Exporting sessions as JSON lines over the API, streamed (`compaction.session_export`).

`GET /api/v1/sessions/{session_id}/export`: one session of the key's profile.
`GET /api/v1/export/sessions?before=…`: every session of the key's profile with activity before
`before` (all of them without it). Both stream: the answer starts with the first chunk and the
server never holds more than a chunk of rows. `manage.py import_sessions` reads either back.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from django.http import HttpRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils.text import get_valid_filename
from ninja import Router
from ninja.errors import HttpError
from pydantic import BeforeValidator

from compaction.session_export import export_lines, session_lines, sessions_to_export
from telemetry.auth import ingest_auth, request_key
from telemetry.errors import FieldError, refuse_unknown
from telemetry.models import AgentSession
from telemetry.schemas import ErrorOut

router = Router(tags=["export"])

_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time_text(value: Any) -> Any:
    """Only an ISO 8601 date-time: pydantic would also take a number as a Unix time."""
    if not isinstance(value, str) or not _DATE_TIME.match(value):
        raise ValueError("an ISO 8601 date-time with its offset, e.g. 2026-01-01T00:00:00Z")
    return value


DateTimeText = Annotated[datetime, BeforeValidator(_date_time_text)]
_BULK_PARAMETERS = frozenset({"before", "profile"})

CONTENT_TYPE = "application/x-ndjson; charset=utf-8"
_STREAM: dict[str, Any] = {
    "responses": {
        "200": {
            "description": (
                "JSON lines, streamed: a `session` line, then its `turn_key`, `call`, `turn`, "
                "`context_event`, `log`, `surface_version`, `surface`, `run` and `operation` "
                "lines, for each session; every line carries the format version `v` and its "
                "`kind` (docs: Export and retention)"
            ),
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    }
}


def _streamed(lines: Any, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=CONTENT_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@router.get(
    "/sessions/{session_id}/export",
    auth=ingest_auth,
    response={404: ErrorOut},
    openapi_extra=_STREAM,
    summary="Export the session as JSON lines: calls, turns, events, log, compaction history",
)
def export_session(request: HttpRequest, session_id: str) -> StreamingHttpResponse:
    """The session's rows, streamed, re-importable with `manage.py import_sessions`."""
    key = request_key(request)
    session = get_object_or_404(AgentSession, profile=key.profile, external_id=session_id)
    name = get_valid_filename(f"session-{session.external_id}"[:100]) or "session"
    return _streamed(session_lines([session.pk]), f"{name}.jsonl")


@router.get(
    "/export/sessions",
    auth=ingest_auth,
    response={403: ErrorOut, 422: ErrorOut},
    openapi_extra=_STREAM,
    summary="Export the profile's sessions with activity before a time, as JSON lines",
)
def export_sessions(
    request: HttpRequest, before: DateTimeText | None = None, profile: str | None = None
) -> StreamingHttpResponse:
    """Sessions of the key's profile opened before `before` or holding a turn begun before it
    (every session a retention cut-off at `before` takes rows from), whole; all of them without
    `before`. `profile`, if given, must be the key's own (403 otherwise)."""
    refuse_unknown(request.GET, _BULK_PARAMETERS)  # a misspelt `before` exports nothing
    key = request_key(request)
    if profile is not None and profile != key.profile.name:
        raise HttpError(403, f"profile: this key belongs to profile {key.profile.name!r}")
    if before is not None and before.tzinfo is None:
        raise FieldError("before", "give a time zone offset (e.g. 2026-01-01T00:00:00Z)")
    if before is not None:
        # Any valid ISO offset (up to ±23:59) is read here, in UTC: the database's own offset
        # range is narrower (PostgreSQL refuses +22:09), and the instant is what counts.
        try:
            before = before.astimezone(UTC)
        except OverflowError:
            raise FieldError("before", "is outside the range of times") from None
    sessions = sessions_to_export(profile_id=key.profile.pk, before=before)
    return _streamed(export_lines(sessions), f"sessions-{key.profile.name}.jsonl")
