"""GET /api/v1/sessions/{id}/agent-cost: the agent's own cost (Claude Code's `cost_usd`)
beside ours, and the calls where they differ."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema

from telemetry.auth import ingest_auth, request_key
from telemetry.models import AgentSession
from telemetry.money import Money, money_text
from telemetry.otlp.costs import agent_cost
from telemetry.schemas import ErrorOut

router = Router(tags=["otlp"])


class CostRowOut(Schema):
    turn: int
    call: int
    request_id: str | None
    model: str
    ours_usd: Money | None
    agent_usd: Money
    difference_usd: Money | None


class AgentCostOut(Schema):
    session_id: str
    calls: int
    agent_cost_usd: Money
    our_cost_usd: Money
    difference_usd: Money
    unpriced_calls: int
    differing_calls: list[CostRowOut]


@router.get(
    "/sessions/{session_id}/agent-cost",
    response={200: AgentCostOut, 404: ErrorOut, 401: ErrorOut},
    auth=ingest_auth,
)
def get_agent_cost(request: HttpRequest, session_id: str) -> dict[str, Any]:
    """Claude Code's own `cost_usd` summed beside our price of the same calls; the calls where
    they differ by more than 1 % (or that we cannot price) are listed, up to 200."""
    key = request_key(request)
    session = get_object_or_404(AgentSession, profile=key.profile, external_id=session_id)
    found = agent_cost(session)
    return {
        "session_id": session.external_id,
        "calls": found.calls,
        "agent_cost_usd": money_text(found.agent_usd),
        "our_cost_usd": money_text(found.ours_usd),
        "difference_usd": money_text(found.ours_usd - found.agent_usd),
        "unpriced_calls": found.unpriced_calls,
        "differing_calls": [
            {
                "turn": row.turn,
                "call": row.call,
                "request_id": row.request_id,
                "model": row.model,
                "ours_usd": money_text(row.ours_usd),
                "agent_usd": money_text(row.agent_usd),
                "difference_usd": money_text(row.difference_usd),
            }
            for row in found.differing
        ],
    }
