"""Re-bill stored calls whose untiered cache writes were placed at the profile's tier.

Ingest places a cache write that names no tier at `telemetry.usage.untiered_write_tier`: the
tier of the agent that made the call when the record names it, else the profile's `cache_ttl`.
Calls stored before their door named the agent (Claude Code's OTLP events and spans, its
transcripts) hold those writes at the profile's tier; `reprice_agent_writes` re-reads their raw
usage under the agent's tier, and where the buckets differ writes the call's new buckets and
costs, then re-derives their turns and sessions and rebuilds the hour rollups through the
paths ingest itself uses (`telemetry.derivation`, `telemetry.rollups.rebuild_rollups`).

Set-wise and idempotent: a batch of calls costs a constant number of statements, and a second
run finds every call already at its agent's tier and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from django.db import transaction
from django.db.models import Q, QuerySet

from telemetry import session_state
from telemetry.catalogue import OnceCatalogue
from telemetry.derivation import derive_session_figures, rederive_turns
from telemetry.models import AgentProfile, AgentSession, LLMCall, TurnKey
from telemetry.policy_store import effective_policy
from telemetry.pricing import BILLED_FIGURES
from telemetry.provider_context import read_provider_usage
from telemetry.rollups import rebuild_rollups
from telemetry.usage import CLAUDE_CODE, CacheTTL, normalize_usage, untiered_write_tier

# What Claude Code's OTLP doors keep in a call's raw usage beside its counts (its own
# `cost_usd`, the request's `query_source` and timings): a stored call that carries one is
# Claude Code's (`telemetry.otlp.claude_code`, `telemetry.otlp.mapping`).
_CLAUDE_CODE_KEYS: Final = ("cost_usd", "query_source", "duration_ms", "ttft_ms")
# Claude Code's turn keys: its `prompt.id` (`telemetry.otlp.claude_code._prompt_key`).
_CLAUDE_CODE_TURNS: Final = "prompt:"
_UPDATED: Final = ("cache_write_5m", "cache_write_1h", *BILLED_FIGURES)


@dataclass
class RepriceReport:
    examined: int = 0  # candidate calls read
    repriced: int = 0  # calls whose buckets (and costs) changed
    sessions: set[int] = field(default_factory=set)

    def line(self) -> str:
        return (
            f"examined {self.examined} call(s), re-priced {self.repriced} "
            f"in {len(self.sessions)} session(s)"
        )


def claude_code_calls(session_ids: set[int] | None = None) -> QuerySet[LLMCall]:
    """Stored calls Claude Code's OTLP doors brought (a raw-usage key only they keep, or a
    session numbered by Claude Code's prompt ids), plus every call of `session_ids` (sessions
    the caller knows to be Claude Code's: its imported transcripts)."""
    marked = Q()
    for key in _CLAUDE_CODE_KEYS:
        marked |= Q(raw_usage__has_key=key)
    prompted = TurnKey.objects.filter(key__startswith=_CLAUDE_CODE_TURNS).values("session_id")
    found = marked | Q(session_id__in=prompted)
    if session_ids:
        found |= Q(session_id__in=session_ids)
    return LLMCall.objects.filter(found)


def reprice_agent_writes(
    calls: QuerySet[LLMCall], *, agent: str = CLAUDE_CODE, batch: int = 2_000
) -> RepriceReport:
    """Re-bill `calls` (all made by `agent`) with their untiered writes at the agent's tier.

    Only calls that hold cache writes can change; each is normalised again from its raw usage
    (`normalize_usage`, `read_provider_usage`: the ingest rules) and, when its write buckets
    differ, priced again at the catalogue's current price for its model. Then the touched turns
    and sessions are re-derived and the hour rollups rebuilt. Idempotent.
    """
    report = RepriceReport()
    tiers: dict[int, CacheTTL] = {}
    catalogue = OnceCatalogue()
    candidates = calls.filter(Q(cache_write_5m__gt=0) | Q(cache_write_1h__gt=0)).order_by("pk")
    last = 0
    while True:
        chunk = list(candidates.filter(pk__gt=last).select_related("session__profile")[:batch])
        if not chunk:
            break
        last = chunk[-1].pk
        report.examined += len(chunk)
        changed = [
            call
            for call in chunk
            if _rebilled(call, _tier(call.session.profile, agent, tiers), catalogue)
        ]
        if changed:
            _write(changed)
            report.repriced += len(changed)
            report.sessions.update(call.session_id for call in changed)
    if report.repriced:
        rebuild_rollups()
    return report


def _tier(profile: AgentProfile, agent: str, tiers: dict[int, CacheTTL]) -> CacheTTL:
    found = tiers.get(profile.pk)
    if found is None:
        found = tiers[profile.pk] = untiered_write_tier(agent, effective_policy(profile).cache_ttl)
    return found


def _rebilled(call: LLMCall, tier: CacheTTL, catalogue: OnceCatalogue) -> bool:
    """Set `call`'s write buckets and costs as ingest would under `tier`; whether they changed."""
    raw: dict[str, Any] = call.usage_as_sent
    usage = normalize_usage(raw, provider=call.provider, model=call.model, cache_ttl=tier)
    provided = read_provider_usage(raw, usage, cache_ttl=tier)
    context = provided.context
    if (context.cache_write_5m, context.cache_write_1h) == (
        call.cache_write_5m,
        call.cache_write_1h,
    ):
        return False
    call.cache_write_5m, call.cache_write_1h = context.cache_write_5m, context.cache_write_1h
    pricer = catalogue.pricer(call.model)
    if pricer is not None:
        for name, value in zip(BILLED_FIGURES, pricer.values(provided.billed), strict=True):
            setattr(call, name, value)
    return True


def _write(calls: list[LLMCall]) -> None:
    """The calls' new figures, then their turns and sessions re-derived from them."""
    by_profile: dict[int, tuple[AgentProfile, set[str]]] = {}
    for call in calls:
        profile = call.session.profile
        by_profile.setdefault(profile.pk, (profile, set()))[1].add(call.session.external_id)
    with transaction.atomic():
        sessions: list[AgentSession] = []
        for pk in sorted(by_profile):
            # locked as ingest locks them (`lock_sessions`' order): no deadlock with a batch
            profile, external_ids = by_profile[pk]
            sessions.extend(session_state.lock_sessions(profile, external_ids).values())
        LLMCall.objects.bulk_update(calls, list(_UPDATED))
        touched = {(call.session_id, call.turn) for call in calls}
        rederive_turns(touched, write=touched)
        derive_session_figures(sessions)
        session_state.write_figures(sessions)
