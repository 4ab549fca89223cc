"""`GET /api/v1/sessions/{session_id}/calls/{call_id}`: one LLM call as stored (issue 39).

The same facts as the console's call page (`compaction.call_detail`): model, the agent's time,
latency when the agent reported one, the provider's request id, the token buckets with the cost
of each, the raw usage as received, the surface version it saw and its cache outcome with the
miss's cause. `call_id` is the call's id as the console's call page shows it in its address.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema
from pydantic import Field

from compaction.api import miss_out
from compaction.call_detail import call_detail
from compaction.schemas import MissOut
from telemetry.auth import ingest_auth, request_key
from telemetry.models import AgentSession
from telemetry.money import Money, money_text
from telemetry.schemas import ErrorOut

router = Router(tags=["telemetry"])


class BucketOut(Schema):
    bucket: str
    tokens: int
    cost_usd: Money | None = Field(description="null when the model has no catalogue price")


class CallOut(Schema):
    id: int
    session_id: str
    turn: int
    call: int
    model: str
    provider: str
    at: str = Field(description="when the call happened, by the agent's clock")
    received_at: str
    request_id: str | None = Field(description="the provider's request id, when reported")
    latency_ms: int | None = Field(description="as the agent reported it; null when it did not")
    first_token_ms: int | None
    context_tokens: int
    reasoning_output: int | None
    buckets: list[BucketOut]
    cost_usd: Money | None
    no_cache_cost_usd: Money | None
    long_context: bool
    raw_usage: dict[str, Any] = Field(description="the usage exactly as the agent sent it")
    surface_version: int | None
    window_tokens: int | None
    cache_outcome: str = Field(description="hit, miss, no cache to read, or not reported")
    miss: MissOut | None


@router.get(
    "/sessions/{session_id}/calls/{call_id}",
    auth=ingest_auth,
    response={200: CallOut, 404: ErrorOut},
    summary="One LLM call: tokens, cost and its breakdown, raw usage, cache outcome",
)
def get_call(
    request: HttpRequest,
    session_id: str,
    call_id: Annotated[int, Field(ge=1, le=2**63 - 1)],
) -> CallOut:
    """One call of the session. Another profile's session, or a call of another session, is
    a 404."""
    key = request_key(request)
    session = get_object_or_404(AgentSession, profile=key.profile, external_id=session_id)
    found = call_detail(session, call_id)
    if found is None:
        raise Http404("no such call in this session")
    call, miss = found.call, found.miss
    return CallOut(
        id=call.pk,
        session_id=session.external_id,
        turn=call.turn,
        call=call.call,
        model=call.model,
        provider=call.provider,
        at=call.at.isoformat(),
        received_at=call.received_at.isoformat(),
        request_id=call.request_id,
        latency_ms=found.latency_ms,
        first_token_ms=found.first_token_ms,
        context_tokens=call.context_tokens,
        reasoning_output=call.reasoning_output,
        buckets=[
            BucketOut(bucket=b.name, tokens=b.tokens, cost_usd=money_text(b.cost_usd))
            for b in found.buckets
        ],
        cost_usd=money_text(call.cost_usd),
        no_cache_cost_usd=money_text(call.no_cache_cost_usd),
        long_context=call.long_context,
        raw_usage=call.usage_as_sent if isinstance(call.usage_as_sent, dict) else {},
        surface_version=call.surface_version,
        window_tokens=call.window_tokens,
        cache_outcome=found.cache_outcome,
        miss=None if miss is None else miss_out(miss),
    )
