"""The agent-facing compaction API: transcript log, surface, archives, compact, overflow."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Router, Status
from ninja.errors import HttpError, ValidationError
from pydantic import BaseModel, Field
from pydantic import ValidationError as PydanticValidationError

from compaction.archives import archive_json, search_archives_counted
from compaction.cache_report import session_misses
from compaction.errors import CompactionConflict
from compaction.models import Archive, CompactionRun, Surface, SurfaceVersion
from compaction.plans import plan_now
from compaction.rawjson import array_elements, object_members
from compaction.schemas import (
    AgreementOut,
    ArchiveDocumentOut,
    ArchiveOut,
    CacheMissesOut,
    ChurnOut,
    CompactConflictOut,
    CompactIn,
    ConflictOut,
    MessagesIn,
    MessagesOut,
    MissOut,
    OverflowIn,
    OverflowOut,
    PlanOut,
    PrefixedSurfaceOut,
    RunOut,
    SearchHitOut,
)
from compaction.services import compact_session, report_overflow
from compaction.transcripts import (
    append_messages,
    derive,
    format_of,
    log_position,
    surface_at,
    surface_document,
    surface_response_bytes,
    version_log_position,
)
from context_core import ConversionError, canonical_json, surface_fingerprints
from telemetry.auth import compact_auth, ingest_auth, request_key
from telemetry.cache_misses import Miss
from telemetry.errors import FieldError
from telemetry.models import AgentKey, AgentSession
from telemetry.money import money_text
from telemetry.policy_store import effective_policy
from telemetry.schemas import ErrorOut
from telemetry.session_state import get_or_create_session

router = Router(tags=["compaction"])

In = TypeVar("In", bound=BaseModel)


def _session(key: AgentKey, session_id: str) -> AgentSession:
    return get_object_or_404(
        AgentSession.objects.select_related("profile"), profile=key.profile, external_id=session_id
    )


def _session_or_new(key: AgentKey, session_id: str) -> AgentSession:
    if not 1 <= len(session_id) <= 200 or "\x00" in session_id or "/" in session_id:
        raise FieldError("session_id", "must be 1 to 200 characters without NUL or '/'", status=422)
    return get_or_create_session(key.profile, session_id)


def _text_body(request: HttpRequest) -> str:
    try:
        return request.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldError(
            "body", f"is not UTF-8 ({exc.reason} at byte {exc.start})", status=400
        ) from None


def validated(schema: type[In], value: dict[str, Any]) -> In:
    """`value` checked against `schema`; its errors answer 422 like ninja's own (naming the
    field, through `console.api`'s one handler), an unknown field first."""
    try:
        return schema.model_validate(value)
    except PydanticValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        errors.sort(key=lambda error: error["type"] != "extra_forbidden")
        raise ValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


def json_body(schema: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route that reads its own body, from its `In` schema."""
    return {
        "content": {"application/json": {"schema": schema.model_json_schema()}},
        "required": required,
    }


@router.post(
    "/sessions/{session_id}/messages",
    auth=ingest_auth,
    response={200: MessagesOut, 201: MessagesOut, 409: ErrorOut, 422: ErrorOut},
    openapi_extra={"requestBody": json_body(MessagesIn)},
    summary="Append transcript messages (idempotent on seq; up to 32 MB)",
)
def post_messages(request: HttpRequest, session_id: str) -> Status[MessagesOut]:
    """Append to the session's append-only log; the surface is re-derived (D1, D3).

    201 when something was appended, 200 when every message was a duplicate. A different
    message at a taken seq is 409; a gap, a result without its call, a duplicate call id or an
    unknown role is 422 naming the message.

    The body is read here, not by ninja: the log keeps each message's original JSON text byte
    for byte (escapes, key order, numbers as written), which a parsed value cannot give back.
    So the body is split into its members with their source text (`compaction.rawjson`), the
    envelope is validated against `MessagesIn` (unknown fields refused, a 422 naming the field,
    as for any ninja schema) and the messages are stored from their text, never from the
    validated value. `MessagesIn` is also the documented request body.
    """
    key = request_key(request)
    text = _text_body(request)
    try:
        members = object_members(text)
    except json.JSONDecodeError as exc:
        raise FieldError(
            "body",
            f"is not a JSON object: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            status=400,
        ) from None
    envelope = validated(MessagesIn, {name: span.value for name, span in members.items()})
    system = members.get("system") if envelope.system is not None else None
    with transaction.atomic():  # a refused append leaves no new session behind
        session = _session_or_new(key, session_id)
        result = append_messages(
            session=session,
            fmt=envelope.format,
            system=system,
            messages=array_elements(members["messages"].text),
        )
    state = result.surface
    return Status(
        201 if result.created else 200,
        MessagesOut(
            session_id=session.external_id,
            appended=result.created,
            duplicates=result.duplicates,
            surface_version=state.version if state else 0,
            surface_tokens_estimate=state.tokens_estimate if state else 0,
            log_messages=state.log_messages if state else 0,
        ),
    )


@router.get(
    "/sessions/{session_id}/surface",
    auth=ingest_auth,
    response={200: PrefixedSurfaceOut, 304: None, 404: ErrorOut, 422: ErrorOut},
    summary="The model-visible messages now (or at `version`), byte-stable until they change",
)
def get_surface(
    request: HttpRequest,
    session_id: str,
    format: Literal["anthropic", "openai"] | None = None,
    version: int | None = None,
    prefix: bool = False,
) -> HttpResponse:
    """The surface as the model should see it next: `messages` (plus `system` for Anthropic),
    `surface_version` and an ETag. The same version always gives the same bytes (D1); the log's
    `cache_control` markers are never replayed. `version` rebuilds an earlier surface exactly.
    `prefix=true` adds `prefix`: the surface's fingerprints (`system`, then `message k`, each
    with hash and token estimate), what the console compares when a call names this version.

    Answers an `HttpResponse`, not `PrefixedSurfaceOut` (which documents it): the body is the
    stored surface bytes (D1: byte-stable, each message as appended) with its ETag, a 304 when
    it matches and the log-position headers, none of which a serialised schema can give."""
    key = request_key(request)
    session = _session(key, session_id)
    state = get_object_or_404(Surface, session=session)
    fmt = format or state.format
    if prefix:
        return _surface_with_prefix(session, state, fmt, version)
    if version is not None and version != state.version:
        past = surface_at(session, version)
        if past is None:
            raise HttpError(404, f"version: the session has no surface version {version}")
        position = _version_position(session, version)
        body = surface_document(fmt, version, position, canonical_json(past, format=fmt))  # type: ignore[arg-type]
        etag = f'"{session.pk}-{version}-{fmt}"'
    elif fmt == state.format:
        position = log_position(state)
        body = surface_response_bytes(state)
        etag = f'"{state.etag}"'
    else:
        _, _, surface = derive(session)
        try:
            converted = canonical_json(surface, format=format_of(fmt))
        except ConversionError as exc:
            raise HttpError(
                422,
                f"format: cannot convert this {state.format} transcript losslessly: {exc.reason}",
            ) from None
        position = log_position(state)
        body = surface_document(fmt, state.version, position, converted)
        etag = f'"{state.etag}-{fmt}"'
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponse(status=304)
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = "no-cache"
    # The log's length is the next free seq: a client resuming a session appends from there.
    response["X-Log-Messages"] = str(state.log_messages)
    _position_headers(response, position)
    return response


def _version_position(session: AgentSession, version: int) -> tuple[int, str]:
    record = get_object_or_404(SurfaceVersion, session=session, version=version)
    return version_log_position(session, record.log_messages)


def _position_headers(response: HttpResponse, position: tuple[int, str]) -> None:
    """The log position the surface follows, also on a 304 (the body's `log_seq`/`log_hash`)."""
    response["X-Log-Seq"] = str(position[0])
    response["X-Log-Hash"] = position[1]


def _surface_with_prefix(
    session: AgentSession, state: Surface, fmt: str, version: int | None
) -> HttpResponse:
    wanted = state.version if version is None else version
    surface = surface_at(session, wanted) if wanted != state.version else derive(session)[2]
    if surface is None:
        raise HttpError(404, f"version: the session has no surface version {wanted}")
    try:
        canonical = canonical_json(surface, format=format_of(fmt))
    except ConversionError as exc:
        raise HttpError(
            422, f"format: cannot convert this {state.format} transcript losslessly: {exc.reason}"
        ) from None
    prints = [p.to_dict() for p in surface_fingerprints(surface, format=format_of(fmt))]
    position = (
        log_position(state) if wanted == state.version else _version_position(session, wanted)
    )
    body = surface_document(fmt, wanted, position, canonical)
    body = body[:-1] + b',"prefix":' + json.dumps(prints, separators=(",", ":")).encode() + b"}"
    response = HttpResponse(body, content_type="application/json")
    response["ETag"] = f'"{session.pk}-{wanted}-{fmt}-prefix"'
    response["Cache-Control"] = "no-cache"
    _position_headers(response, position)
    return response


@router.get(
    "/sessions/{session_id}/archives",
    auth=ingest_auth,
    response={200: list[ArchiveOut], 404: ErrorOut},
)
def list_archives(request: HttpRequest, session_id: str) -> list[ArchiveOut]:
    """The session's archives, newest first (each with its `id` for `GET /archives/{id}`)."""
    session = _session(request_key(request), session_id)
    return [
        ArchiveOut(
            id=a.pk,
            namespace=a.namespace,
            created_at=a.created_at.isoformat(),
            log_messages=a.log_messages,
            surface_version=a.surface_version,
            chars=a.chars,
        )
        for a in Archive.objects.filter(session=session).order_by("-created_at", "-pk")
    ]


@router.get("/archives", auth=ingest_auth, response={200: list[SearchHitOut], 422: ErrorOut})
def search(
    request: HttpRequest,
    response: HttpResponse,
    q: str,
    session_id: str | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
    offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0,
) -> list[SearchHitOut]:
    """Full-text search of the key's profile's archives, best match first, paged with `limit`
    and `offset`; hits are marked with <mark>. Identifiers match by their parts (`Registry`
    finds `Acme.Billing.InvoiceRegistry`), `word*` by prefix; `X-Total-Count` says how many
    hits there are in all."""
    key = request_key(request)
    session = _session(key, session_id) if session_id else None
    found = search_archives_counted(
        q, profile=key.profile, session=session, limit=limit, offset=offset
    )
    response["X-Total-Count"] = str(found.total)
    return [SearchHitOut(**hit.__dict__) for hit in found.hits]


@router.get(
    "/archives/{archive_id}", auth=ingest_auth, response={200: ArchiveDocumentOut, 404: ErrorOut}
)
def get_archive(request: HttpRequest, archive_id: int) -> HttpResponse:
    """One archive whole: the log as received and the surface as it was.

    Written from the stored text, not serialised through `ArchiveDocumentOut` (which documents
    it): each log message is served byte for byte as appended, as `GET /log` serves it."""
    key = request_key(request)
    archive = get_object_or_404(
        Archive.objects.select_related("session__profile"),
        pk=archive_id,
        session__profile=key.profile,
    )
    return HttpResponse(archive_json(archive).encode("utf-8"), content_type="application/json")


def run_out(run: CompactionRun, state: Surface | None) -> RunOut:
    """A run as the API reports it, with the surface version it left (`state`)."""
    return RunOut(
        run_id=run.pk,
        mode=run.mode,
        status=run.status,
        action=run.action,
        reason=run.reason,
        tokens_before=run.tokens_before,
        tokens_after=run.tokens_after,
        # D6: the next request's estimated size and how ("fit" or "rule")
        estimate_tokens=run.estimate_tokens,
        estimate_method=run.estimate_method or None,  # type: ignore[arg-type]
        archived=run.archived,
        archive_id=run.archive_id,
        archive_error=run.archive_error or None,
        surface_version=state.version if state else None,
    )


def conflict_payload(exc: CompactionConflict) -> dict[str, Any]:
    """The 409 body of a refusal (`compaction.errors`), which `console.api` answers in its one
    handler: `error` and `detail` first, then the run that refused when there is one
    (`CompactConflictOut`, else `ConflictOut`)."""
    run = run_out(exc.run, None).model_dump() if exc.run is not None else {}
    return {"error": exc.error, "detail": str(exc), **run}


def _optional_body(request: HttpRequest, schema: type[In]) -> In:
    """An optional small JSON object body (empty means `{}`), validated against `schema`."""
    text = _text_body(request).strip()
    if not text:
        return schema()
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FieldError("body", f"is not valid JSON: {exc.msg}", status=400) from None
    if not isinstance(body, dict):
        raise FieldError("body", "must be a JSON object")
    return validated(schema, body)


@router.post(
    "/sessions/{session_id}/compact",
    auth=compact_auth,
    response={200: RunOut, 404: ErrorOut, 409: CompactConflictOut, 422: ErrorOut},
    openapi_extra={"requestBody": json_body(CompactIn, required=False)},
    summary="Manual, never-lossy compaction (key with the `compact` scope)",
)
def post_compact(request: HttpRequest, session_id: str) -> RunOut:
    """Plan (forced), archive, apply (D5). If the archive fails: 409 and nothing changes.
    Optional body `{"expected_surface_version": n}` refuses (409) when the surface moved.
    (The 409s are `compaction.errors` refusals, answered by `console.api`'s one handler.)"""
    key = request_key(request)
    session = _session(key, session_id)
    body = _optional_body(request, CompactIn)
    outcome = compact_session(
        session_id=session.pk,
        mode="manual",
        trigger="api",
        requested_by=f"key:{key.prefix}",
        expected_version=body.expected_surface_version,
    )
    return run_out(outcome.run, outcome.surface)


@router.post(
    "/sessions/{session_id}/overflow",
    auth=ingest_auth,
    response={200: OverflowOut, 404: ErrorOut, 409: ConflictOut, 422: ErrorOut},
    openapi_extra={"requestBody": json_body(OverflowIn, required=False)},
    summary="Report a context-length error: forced compaction now, the new surface returned",
)
def post_overflow(request: HttpRequest, session_id: str) -> OverflowOut:
    """D4: compacts (forced) and returns the new surface; counted. A second overflow on the same
    surface version answers 409 `overflow_unrecoverable` and applies nothing; a version ahead of
    the session's is a 422 on `surface_version`. (The 409s are `compaction.errors` refusals,
    answered by `console.api`'s one handler.)"""
    key = request_key(request)
    session = _session(key, session_id)
    body = _optional_body(request, OverflowIn)
    outcome = report_overflow(
        session=session, surface_version=body.surface_version, detail=body.detail or ""
    )
    state = outcome.surface
    # the surface object as `GET /surface` serves it, passed through verbatim (OverflowOut)
    surface = json.loads(surface_response_bytes(state)) if state is not None else None
    return OverflowOut(**run_out(outcome.run, state).model_dump(), surface=surface)


@router.get(
    "/sessions/{session_id}/compact/plan",
    auth=ingest_auth,
    response={200: PlanOut, 404: ErrorOut, 422: ErrorOut},
    summary="What compacting now would free, re-write and cost, and when it pays back",
)
def get_compact_plan(
    request: HttpRequest, session_id: str, mode: Literal["manual", "auto"] = "manual"
) -> PlanOut:
    """D1/D4, before: the plan of a compaction now without applying it: tokens freed, where the
    surface first changes, the tokens the next call will re-write and their cost and premium over
    reading them, the saving per later call, the calls to break even and the session's typical
    remaining calls. `mode=manual` is the forced plan of `POST /compact`; `mode=auto` the
    automatic relief's, worth-it rule included (`skipped` names the passes it rejects)."""
    session = _session(request_key(request), session_id)
    plan = plan_now(session, effective_policy(session.profile), mode=mode)
    if plan is None:
        raise HttpError(404, "session_id: the session has no transcript log to compact")
    return PlanOut(**plan)


@router.get(
    "/sessions/{session_id}/cache/misses",
    auth=ingest_auth,
    response={200: CacheMissesOut, 404: ErrorOut},
    summary="Every prompt-cache miss of the session with its cause, evidence and premium",
)
def get_cache_misses(request: HttpRequest, session_id: str) -> CacheMissesOut:
    """D1/D2: each call that read less of the cache than the previous one left, above the floor
    (1,024 tokens and 5 %), with its cause (model_switch, expiry, our_compaction,
    agent_compaction, prefix_break, unexplained), the evidence and the premium paid in dollars;
    totals by cause, and whether the system segment churns (D2).

    When the call carried the provider's cache diagnostics (Anthropic `cache_miss_reason`,
    OpenAI `prompt_cache_diagnostics`), its verdict is the `cause` and ours stays
    `inferred_cause`, with the provider's word, tokens and object beside it; `agreement` counts
    how often the two agreed."""
    session = _session(request_key(request), session_id)
    report = session_misses(session)
    return CacheMissesOut(
        session_id=session.external_id,
        calls=report.calls,
        premium_usd=money_text(report.premium_usd),
        premium_by_cause_usd={k: money_text(v) for k, v in report.by_cause.items()},
        system_churn=ChurnOut(
            pairs=report.churn.pairs,
            changed=report.churn.changed,
            violates_d2=report.churn.violates_d2,
        ),
        agreement=AgreementOut(
            compared=report.agreement.compared,
            agreed=report.agreement.agreed,
            rate=report.agreement.rate,
        ),
        misses=[miss_out(m) for m in report.misses],
    )


def miss_out(m: Miss) -> MissOut:
    """A miss as the API answers it (the misses list and the call route alike): our reading,
    and the provider's beside it when the call carried its cache diagnostics."""
    return MissOut(
        turn=m.turn,
        call=m.call,
        at=m.at.isoformat(),
        model=m.model,
        expected_tokens=m.expected_tokens,
        read_tokens=m.read_tokens,
        missed_tokens=m.missed_tokens,
        premium_usd=money_text(m.premium_usd),
        cause=m.cause,
        evidence=m.evidence,
        detail=dict(m.detail),
        inferred_cause=m.ours,
        provider_type=None if m.provider is None else m.provider.type,
        provider_missed_tokens=None if m.provider is None else m.provider.missed_tokens,
        provider_cause=m.provider_cause,
        provider_diagnostics=None if m.provider is None else m.provider.stored(),
        agrees=m.agrees,
        readings=m.readings,
    )
