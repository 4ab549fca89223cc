"""`POST /api/v1/imports`: one transcript file as the body, for agents on other machines."""

from __future__ import annotations

import io
from typing import Annotated

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field

from compaction.imports.files import Format, NotATranscript
from compaction.imports.store import import_file
from compaction.schemas import ImportOut
from telemetry.auth import ingest_auth, request_key
from telemetry.errors import FieldError
from telemetry.schemas import ErrorOut

router = Router(tags=["imports"])

IMPORT_BODY = {
    "content": {
        "application/x-ndjson": {
            "schema": {
                "type": "string",
                # an empty or blank body is refused (422): say so in the schema
                "minLength": 1,
                "pattern": "\\S",
                "description": "a Claude Code session (.jsonl) or a Codex rollout, whole; send "
                "it again as it grows: only the new lines are imported",
            }
        }
    },
    "required": True,
}


class ImportQuery(Schema):
    name: Annotated[str, Field(min_length=1, max_length=900)] = "transcript.jsonl"
    format: Format | None = None
    final: bool = True


@router.post(
    "/imports",
    auth=ingest_auth,
    response={200: ImportOut, 409: ImportOut, 422: ErrorOut},
    openapi_extra={"requestBody": IMPORT_BODY},
    summary="Import a Claude Code or Codex transcript",
)
def post_import(request: HttpRequest, query: Query[ImportQuery]) -> Status[ImportOut] | ImportOut:
    """Import the body (JSONL) into the key's profile and report per file: sessions, messages,
    calls, compactions and the lines skipped with their reason and number.

    `name` is the file's path on the agent's machine (`<session>.jsonl`, or
    `<session>/subagents/agent-<id>.jsonl` for a subagent): the import state is kept per name, so
    posting the grown file again imports only its new lines, and a changed prefix answers 409.
    `final=false` holds a response still being written (the file is live).
    """
    key = request_key(request)
    if not request.body.strip():
        raise FieldError("body", "is empty: send the transcript file's bytes", status=422)
    try:
        report = import_file(
            profile=key.profile,
            path=f"api:{query.name}",
            handle=io.BytesIO(request.body),
            fmt=query.format,
            final=query.final,
        )
    except NotATranscript as exc:
        raise FieldError("body", str(exc), status=422) from None
    out = ImportOut(**{**report.as_dict(), "path": query.name})
    if report.status == "rewritten":
        return Status(409, out)
    if report.status == "failed":
        raise FieldError("body", report.detail, status=422)
    return out
