"""The agent's own cost beside ours: Claude Code reports `cost_usd` on every `api_request`.

Its figure is kept verbatim in the call's raw usage (`raw_usage.cost_usd`); ours is priced from
the catalogue like every call. This read puts the two side by side and lists the calls where
they really differ (`telemetry.otlp.claude_code.cost_difference`): a catalogue price that is off, a
cache tier priced differently, or a model we cannot price.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from telemetry.models import AgentSession, LLMCall, TurnKey
from telemetry.otlp.claude_code import cost_difference


@dataclass(frozen=True)
class CostRow:
    turn: int
    call: int
    request_id: str | None
    model: str
    ours_usd: Decimal | None
    agent_usd: Decimal
    difference_usd: Decimal | None


@dataclass
class AgentCost:
    calls: int = 0  # calls that carry the agent's own figure
    agent_usd: Decimal = Decimal(0)
    ours_usd: Decimal = Decimal(0)  # over the same calls, priced ones only
    unpriced_calls: int = 0
    differing_calls: int = 0  # all of them; `differing` lists at most `limit`
    differing: list[CostRow] = field(default_factory=list)


def agent_cost(session: AgentSession, *, limit: int = 200) -> AgentCost:
    """Both totals over the calls that report the agent's cost, and up to `limit` calls
    where the two differ (in turn and call order)."""
    result = AgentCost()
    rows = (
        LLMCall.objects.filter(session=session, raw_usage__has_key="cost_usd")
        .order_by("turn", "call")
        .values_list("turn", "call", "request_id", "model", "cost_usd", "raw_usage__cost_usd")
    )
    for turn, call, request_id, model, ours, reported in rows:
        try:
            theirs = Decimal(str(reported))
        except InvalidOperation:
            continue
        if not theirs.is_finite():
            continue
        result.calls += 1
        result.agent_usd += theirs
        if ours is None:
            result.unpriced_calls += 1
        else:
            result.ours_usd += ours
        difference = cost_difference(ours, theirs)
        if difference is not None or ours is None:
            result.differing_calls += 1
            if len(result.differing) < limit:
                result.differing.append(
                    CostRow(turn, call, request_id, model, ours, theirs, difference)
                )
    return result


def reported_agent_cost(session: AgentSession) -> AgentCost | None:
    """The comparison for a session that Claude Code reports on (a `prompt:` turn key: one
    indexed lookup), else None without reading its calls."""
    if not TurnKey.objects.filter(session=session, key__startswith="prompt:").exists():
        return None
    found = agent_cost(session, limit=0)
    return found if found.calls else None
