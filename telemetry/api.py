"""The agent-facing telemetry API (mounted under /api/v1 by `console.api`)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router
from ninja.responses import NinjaJSONEncoder

from telemetry import safejson
from telemetry.auth import ingest_auth, request_key
from telemetry.errors import FieldError
from telemetry.ingest.pipeline import IngestResult, ingest_records
from telemetry.models import AgentSession, Turn
from telemetry.money import money_text
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import key_policy
from telemetry.pressure import hit_ratio, round_signal
from telemetry.schemas import (
    MAX_BATCH,
    ErrorOut,
    IngestOut,
    PolicyOut,
    RecordIn,
)
from telemetry.session_state import cache_savings, session_band
from telemetry.windows import SOURCE_LABELS

router = Router(tags=["telemetry"])


@router.get("/policy", response={200: PolicyOut, 401: ErrorOut}, auth=ingest_auth)
def get_policy(request: HttpRequest) -> dict[str, object]:
    """The effective policy of the calling key's profile (global defaults + profile overrides)."""
    key = request_key(request)
    # The policy this key's ingest applies (remembered beside the key check for a second).
    return {"profile": key.profile.name, **key_policy(key.pk, key.profile).as_dict()}


def parse_json_body(request: HttpRequest) -> object:
    if hasattr(request, "decoded_json"):  # decoded once by `console.middleware.request_guard`
        return request.decoded_json
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldError(
            "body", f"is not UTF-8 ({exc.reason} at byte {exc.start})", status=400
        ) from None
    if not text.strip():
        raise FieldError("body", "is empty; send a JSON object", status=400)
    try:
        return safejson.decode(text)
    except json.JSONDecodeError as exc:
        raise FieldError(
            "body",
            f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            status=400,
        ) from None


def _telemetry_body_schema() -> dict[str, Any]:
    record = RecordIn.model_json_schema(ref_template="#/components/schemas/{model}")
    return {
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        record,
                        {
                            "type": "object",
                            "properties": {
                                "records": {
                                    "type": "array",
                                    "items": record,
                                    "minItems": 1,
                                    "maxItems": MAX_BATCH,
                                }
                            },
                            "required": ["records"],
                            # the view refuses an empty batch and any field beside `records`
                            "additionalProperties": False,
                        },
                    ]
                }
            }
        },
        "required": True,
    }


@router.post(
    "/telemetry",
    response={
        200: IngestOut,
        201: IngestOut,
        409: IngestOut,
        422: IngestOut | ErrorOut,
        401: ErrorOut,
    },
    auth=ingest_auth,
    openapi_extra={"requestBody": _telemetry_body_schema()},
    summary='Report LLM calls (one record, or {"records": [...]} with up to 1,000)',
)
def post_telemetry(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Store per-call usage as the provider returned it; answer each item and the session figures.

    Idempotent on (session, turn, call), or on `request_id` when given. A single record answers
    201 (created), 200 (duplicate), 409 (conflict) or 422 (invalid); a batch answers 200 with a
    status per item. The sessions' pressure and projection come back, with the policy's
    `nudge_text` once a turn's rounds reach `round_soft_limit` and `stop` at `round_hard_cap`.
    """
    key = request_key(request)
    body = parse_json_body(request)
    if isinstance(body, dict) and "records" in body:
        extra = sorted(set(body) - {"records"})
        if extra:
            raise FieldError(extra[0], "is not a known field beside 'records'", status=422)
        records = body["records"]
        if not isinstance(records, list):
            raise FieldError("records", "must be a list of records", status=422)
        if not records:
            raise FieldError("records", "must not be empty", status=422)
        if len(records) > MAX_BATCH:
            raise FieldError(
                "records",
                f"holds {len(records)} records; at most {MAX_BATCH} per request",
                status=422,
            )
        raw_items, batch = records, True
    elif isinstance(body, dict):
        raw_items, batch = [body], False
    else:
        raise FieldError(
            "body", 'must be a JSON object (a record, or {"records": [...]})', status=422
        )
    result = ingest_records(key=key, raw_items=raw_items, batch=batch, on_commit=enqueue_relief)
    payload = ingest_payload(result)
    if batch:
        response.status_code = 200
    else:
        response.status_code = {"created": 201, "duplicate": 200, "conflict": 409, "invalid": 422}[
            result.items[0].status
        ]
    # Rendered as is: `ingest_payload` builds exactly `IngestOut` (tests/db/test_ingest_payload
    # compares the bytes with ninja's validated rendering), and validating a 1,000-item answer
    # again cost a tenth of a batch's CPU (make bench P1).
    response.content = json.dumps(payload, cls=NinjaJSONEncoder)  # ninja's JSONRenderer
    return response


def ingest_payload(result: IngestResult) -> dict[str, Any]:
    policy = result.policy
    assert policy is not None
    return {
        "created": result.count("created"),
        "duplicates": result.count("duplicate"),
        "conflicts": result.count("conflict"),
        "invalid": result.count("invalid"),
        "items": [item.__dict__ for item in result.items],
        "sessions": [session_figures(s, policy) for s in result.sessions],
    }


def session_figures(session: AgentSession, policy: PolicyValues) -> dict[str, Any]:
    signal = round_signal(session.last_turn_rounds, policy.round_soft_limit, policy.round_hard_cap)
    savings = cache_savings(session)
    return {
        "session_id": session.external_id,
        "profile": session.profile.name,
        "model": session.model,
        "turns": session.turns_count,
        "calls": session.calls_count,
        "last_turn": session.last_turn,
        "last_turn_rounds": session.last_turn_rounds,
        "current_context_tokens": session.current_context_tokens,
        "peak_context_tokens": session.peak_context_tokens,
        "projected_next_request_tokens": session.projected_tokens,
        "window_tokens": session.window_tokens,
        "window_source": session.window_source or None,
        "window_source_label": SOURCE_LABELS.get(session.window_source),  # type: ignore[call-overload]
        "reserved_output_tokens": policy.reserved_output_tokens,
        "pressure": session.pressure,
        "pressure_band": session_band(session, policy),
        "cache_hit_ratio": session.cache_hit_ratio,
        "last_turn_cache_hit_ratio": session.last_turn_cache_hit_ratio,
        "cost_usd": money_text(session.cost_usd),
        "no_cache_cost_usd": money_text(session.no_cache_cost_usd),
        "cache_savings_usd": money_text(savings),
        "unpriced_calls": session.unpriced_calls,
        "surface_version": session.surface_version,
        "last_seen_at": session.last_seen_at.isoformat() if session.last_seen_at else None,
        "round_signal": signal,
        "nudge": policy.nudge_text if signal != "none" else None,
    }


def enqueue_relief(session_ids: list[int]) -> None:
    """Ask the compaction worker, by task name, to relieve sessions over the prune threshold.

    telemetry never imports compaction; a broker outage must not fail ingest, so the publish is
    bounded and a periodic sweeper catches what was not enqueued.
    """
    from telemetry.relief_dispatch import request_relief

    request_relief(session_ids)


_SERIES_FIELDS = (
    "turn",
    "calls",
    "context_tokens",
    "cache_reported_calls",
    "cache_read_reported",
    "cache_denominator",
    "cost_usd",
    "unpriced_calls",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "first_at",
    "last_at",
    "model",
    "surface_version",
)


def turns_series(
    session_pk: int,
    *,
    turns: Collection[int] | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The session's turns in order, as `TurnOut` renders it (one read, tuples): every turn, or
    only those numbered in `turns`, or the first `limit` after turn `after`."""
    found = Turn.objects.filter(session_id=session_pk)
    if turns is not None:
        found = found.filter(turn__in=list(turns))
    if after is not None:
        found = found.filter(turn__gt=after)
    rows = found.order_by("turn").values_list(*_SERIES_FIELDS)
    if limit is not None:
        rows = rows[:limit]
    return [
        {
            "turn": turn,
            "calls": calls,
            "context_tokens": context,
            "cache_hit_ratio": hit_ratio(read_reported, denominator, reported_calls),
            "cost_usd": money_text(cost),
            "unpriced_calls": unpriced,
            "uncached_input": uncached,
            "cache_read": read,
            "cache_write_5m": write_5m,
            "cache_write_1h": write_1h,
            "output": output,
            "first_at": first_at.isoformat(),
            "last_at": last_at.isoformat(),
            "model": model,
            "surface_version": surface_version,
        }
        for (
            turn,
            calls,
            context,
            reported_calls,
            read_reported,
            denominator,
            cost,
            unpriced,
            uncached,
            read,
            write_5m,
            write_1h,
            output,
            first_at,
            last_at,
            model,
            surface_version,
        ) in rows
    ]
