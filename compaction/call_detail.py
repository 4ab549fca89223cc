"""One LLM call as stored, with its cache outcome: what the console's call page and
`GET /api/v1/sessions/{session_id}/calls/{call_id}` show.

The cache outcome reuses the session's miss report (`compaction.cache_report.session_misses`,
the one place a miss and its cause are decided), so the call page, the misses table and the API
always agree on why a call missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from compaction.cache_report import session_misses
from telemetry.cache_misses import Miss
from telemetry.models import AgentSession, LLMCall

# The token buckets of a call and the cost of each, in the order a bill reads.
BUCKETS: Final = (
    ("uncached_input", "Uncached input"),
    ("cache_read", "Cache read"),
    ("cache_write_5m", "Cache write (5 min)"),
    ("cache_write_1h", "Cache write (1 h)"),
    ("output", "Output"),
)
# What agents report as the call's latency in its raw usage (Claude Code: `duration_ms`).
LATENCY_KEYS: Final = ("duration_ms", "latency_ms")
FIRST_TOKEN_KEYS: Final = ("ttft_ms",)

HIT: Final = "hit"
MISS: Final = "miss"
COLD: Final = "no cache to read"
UNREPORTED: Final = "not reported"


@dataclass(frozen=True)
class Bucket:
    name: str
    label: str
    tokens: int
    cost_usd: Decimal | None


@dataclass(frozen=True)
class CallDetail:
    call: LLMCall
    buckets: list[Bucket]
    latency_ms: int | None
    first_token_ms: int | None
    cache_outcome: str
    miss: Miss | None
    siblings: list[tuple[int, int]]  # (call position, call pk) of the same turn


def _reported_ms(raw: object, keys: tuple[str, ...]) -> int | None:
    if not isinstance(raw, dict):
        return None
    for key in keys:
        value = raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def cache_outcome(call: LLMCall, miss: Miss | None) -> str:
    """A miss when the miss report lists the call (it read less than the previous call left);
    else a hit when it read the cache; else nothing cached to read, or not reported at all."""
    if miss is not None:
        return MISS
    if not call.reported_cache:
        return UNREPORTED
    return HIT if call.cache_read > 0 else COLD


def call_detail(session: AgentSession, call_pk: int) -> CallDetail | None:
    """The call `call_pk` of `session` (None when the session has no such call)."""
    call = LLMCall.objects.filter(session=session, pk=call_pk).first()
    if call is None:
        return None
    miss = next(
        (
            found
            for found in session_misses(session).misses
            if (found.turn, found.call) == (call.turn, call.call)
        ),
        None,
    )
    siblings = list(
        LLMCall.objects.filter(session=session, turn=call.turn)
        .order_by("call")
        .values_list("call", "pk")
    )
    return CallDetail(
        call=call,
        buckets=[
            Bucket(name, label, getattr(call, name), getattr(call, f"cost_{name}"))
            for name, label in BUCKETS
        ],
        latency_ms=_reported_ms(call.usage_as_sent, LATENCY_KEYS),
        first_token_ms=_reported_ms(call.usage_as_sent, FIRST_TOKEN_KEYS),
        cache_outcome=cache_outcome(call, miss),
        miss=miss,
        siblings=siblings,
    )
