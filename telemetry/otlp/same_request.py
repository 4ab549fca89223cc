"""One provider request reported by several sources: which report becomes the call. Pure.

The same Anthropic request can reach the console as a Claude Code `api_request` event, a
Claude Code `claude_code.llm_request` span, the Claude SDK's span and the Claude platform's own
span. Each names the request by the provider's request id, so their drafts share one stored
identity (`mapping.provider_request_key`) and the request is stored once.

Which one: the richer report, the one carrying more of these facts (one point each):

- its cache figures at all (a count of cache reads or writes);
- the cache writes split by tier (`cache_creation.ephemeral_5m/1h_input_tokens`), which prices
  them exactly instead of at the profile's TTL;
- the reporter's own cost (`cost_usd`), which the session's agent-cost panel sets beside ours;
- the call's window (`gen_ai.context.window_size`), the first source of the window in force;
- the user's prompt it answered (a `prompt:` turn), which groups an agent's calls into turns;
- the provider's cache diagnosis (`cache_miss_reason`, `prompt_cache_diagnostics`), which
  names the cause of a miss.

Ties go to the reporter nearer the agent (`REPORTERS`, in that order), then to the earlier
start, then to the earlier item of the export: the choice never depends on arrival order.

A call once stored is not rewritten: its figures are already in its turn, its session and the
hour rollups. A later report of a stored request is a duplicate, whatever it carries; the rule
chooses among the reports that arrive together (one export, or one store of several).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from telemetry.otlp.mapping import CallDraft

# Who may report a call, nearest the agent first (the tie-break of `richer`).
REPORTERS: Final = ("claude-code-event", "claude-code-span", "sdk-span", "platform-span")
_RANK: Final = {name: rank for rank, name in enumerate(REPORTERS)}
_SPLIT: Final = ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")


def _has_tier_split(usage: Mapping[str, Any]) -> bool:
    split = usage.get("cache_creation")
    return isinstance(split, Mapping) and any(name in split for name in _SPLIT)


def richness(draft: CallDraft) -> int:
    """How many of the module docstring's facts `draft` carries (0-6)."""
    usage = draft.usage
    return sum(
        (
            any("cache" in key for key in usage if key != "cache_creation"),
            _has_tier_split(usage),
            "cost_usd" in usage,
            draft.window_tokens is not None,
            draft.turn_key.startswith("prompt:") and len(draft.turn_key) > len("prompt:"),
            bool(draft.diagnostics),
        )
    )


def _preference(draft: CallDraft) -> tuple[int, int, tuple[int, str], int]:
    return (-richness(draft), _RANK.get(draft.reporter, len(REPORTERS)), draft.order, draft.index)


def richer(first: CallDraft, second: CallDraft) -> CallDraft:
    """The report to keep of two reports of one request: the richer, else by `REPORTERS`, start
    and export position. Symmetric (`richer(a, b) is richer(b, a)`) and one of the two."""
    return second if _preference(second) < _preference(first) else first


def keep_richer(drafts: Iterable[CallDraft]) -> tuple[list[CallDraft], list[CallDraft]]:
    """(kept, dropped): one draft per provider request and session, the `richer` of its reports;
    drafts without a provider request id are all kept. `kept` keeps the input's order."""
    drafts = list(drafts)
    best: dict[tuple[str, str], CallDraft] = {}
    for draft in drafts:
        if not draft.provider_request:
            continue
        identity = (draft.session_id, draft.request_id)
        held = best.get(identity)
        best[identity] = draft if held is None else richer(held, draft)
    kept: list[CallDraft] = []
    dropped: list[CallDraft] = []
    for draft in drafts:
        chosen = best.get((draft.session_id, draft.request_id)) if draft.provider_request else None
        (kept if chosen is None or chosen is draft else dropped).append(draft)
    return kept, dropped
