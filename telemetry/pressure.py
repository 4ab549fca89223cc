"""Derived context figures: projection, pressure, cache-hit ratio, bands and round signals.

Standard library and the pure core only, and free of any import from `compaction`: telemetry
must stand on its own. The chars/4 rule is the core's (`context_core.tokens`), one definition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol

from context_core.tokens import CHARS_PER_TOKEN, estimate_tokens
from telemetry.usage import InputCounts, context_size

__all__ = [
    "CHARS_PER_TOKEN",
    "CacheCounts",
    "PressureBand",
    "RoundSignal",
    "cache_hit_ratio",
    "estimate_tokens",
    "hit_ratio",
    "pressure",
    "pressure_band",
    "pressure_or_unknown",
    "projected_next_request",
    "round_signal",
    "turn_context_tokens",
]

PressureBand = Literal["ok", "prune", "compact", "over", "unknown"]
RoundSignal = Literal["none", "nudge", "stop"]


def projected_next_request(
    *, context_tokens: int, output: int, reasoning_output: int | None, appended_tokens: int
) -> int:
    """The size of the next request (D6), from the latest call's real usage.

    = `context_tokens` + (`output` − `reasoning_output`) + `appended_tokens`. The reply is
    re-sent with the next request; reasoning is not. `appended_tokens` estimates what the agent
    added after the reply (tool results, new user input), not the reply itself: at the
    session's learned rates (`context_core.estimates.TokenRates`), or chars // 4
    (`estimate_tokens`). Always ≥ `context_tokens`.
    """
    _require_count(context_tokens, "context_tokens")
    _require_count(output, "output")
    _require_count(appended_tokens, "appended_tokens")
    if reasoning_output is not None:
        _require_count(reasoning_output, "reasoning_output")
        if reasoning_output > output:
            raise ValueError(f"reasoning_output ({reasoning_output}) exceeds output ({output})")
    resent_reply = output - (reasoning_output or 0)
    return context_tokens + resent_reply + appended_tokens


def pressure(
    projected: int, window_tokens: int | None, reserved_output_tokens: int
) -> float | None:
    """projected / (window − reserved): the share of the usable input window the next request needs.

    The provider rejects a request whose input plus max output exceeds the window, so the
    reserved output is not usable for input. None when the window is unknown — shown as
    unknown, never guessed. 1.0 exactly still fits; above 1.0 the request would be rejected.
    Raises ValueError when `window_tokens <= reserved_output_tokens`: no request could fit, a
    configuration error for the caller to refuse when the profile or record is saved.
    """
    _require_count(projected, "projected")
    _require_count(reserved_output_tokens, "reserved_output_tokens")
    if window_tokens is None:
        return None
    _require_count(window_tokens, "window_tokens")
    usable = window_tokens - reserved_output_tokens
    if usable <= 0:
        raise ValueError(
            f"window_tokens ({window_tokens}) must exceed "
            f"reserved_output_tokens ({reserved_output_tokens})"
        )
    return projected / usable


def pressure_or_unknown(
    projected: int | None, window_tokens: int | None, reserved_output_tokens: int
) -> float | None:
    """`pressure`, or None (shown as "pressure unknown") when the projection or the window is
    unknown or the window leaves no room beyond the reserved output. The one rule ingest, a
    policy preview and the recompute after a policy change apply to a session's figures."""
    if projected is None or window_tokens is None or window_tokens <= reserved_output_tokens:
        return None
    return pressure(projected, window_tokens, reserved_output_tokens)


class CacheCounts(InputCounts, Protocol):
    """What `cache_hit_ratio` reads from a call: a `NormalizedUsage` or a stored call row."""

    @property
    def reported_cache(self) -> bool: ...


def cache_hit_ratio(calls: Iterable[CacheCounts]) -> float | None:
    """Σ cache_read / Σ (uncached + read + writes) over the calls that reported cache fields.

    Sum over sum, never an average of per-call ratios: a big call weighs by its size. In [0, 1].
    None when no call reported cache fields (unknown, distinct from 0.0), and None when those
    calls sent no input tokens at all (0/0 has no meaning).
    """
    read = total = 0
    for call in calls:
        if not call.reported_cache:
            continue
        read += call.cache_read
        total += context_size(call)
    if total == 0:
        return None
    return read / total


def hit_ratio(read: int, denominator: int, reported_calls: int) -> float | None:
    """`cache_hit_ratio` from stored sums (a turn's, a session's): Σread / Σ(uncached + read +
    writes) over the calls that reported cache. None when no call reported cache fields; 0.0
    when those calls sent no input (the stored figures keep that distinction)."""
    if reported_calls == 0:
        return None
    return read / denominator if denominator else 0.0


def turn_context_tokens(call_context_tokens: Iterable[int]) -> int | None:
    """A turn's context size: its peak call, never a sum (pressure is per request).

    None for a turn with no calls.
    """
    return max(call_context_tokens, default=None)


def pressure_band(
    pressure: float | None, prune_threshold: float, summarize_threshold: float
) -> PressureBand:
    """Where `pressure` stands against the profile's thresholds.

    "unknown" when pressure is None; "over" above 1.0 (the request would be rejected);
    "compact" at or above `summarize_threshold`; "prune" at or above `prune_threshold`;
    otherwise "ok". Requires 0 < prune_threshold ≤ summarize_threshold ≤ 1.
    """
    if not 0 < prune_threshold <= summarize_threshold <= 1:
        raise ValueError(
            "thresholds must satisfy 0 < prune_threshold <= summarize_threshold <= 1, got "
            f"{prune_threshold} and {summarize_threshold}"
        )
    if pressure is None:
        return "unknown"
    if pressure > 1.0:
        return "over"
    if pressure >= summarize_threshold:
        return "compact"
    if pressure >= prune_threshold:
        return "prune"
    return "ok"


def round_signal(rounds_in_turn: int, soft_limit: int | None, hard_cap: int | None) -> RoundSignal:
    """D8: "stop" once the turn's rounds reach `hard_cap`, else "nudge" once they reach
    `soft_limit`, else "none". A limit of None is switched off. The cap wins over the nudge.
    """
    _require_count(rounds_in_turn, "rounds_in_turn")
    for name, limit in (("soft_limit", soft_limit), ("hard_cap", hard_cap)):
        if limit is not None and (type(limit) is not int or limit <= 0):
            raise ValueError(f"{name} must be a positive int or None, got {limit!r}")
    if hard_cap is not None and rounds_in_turn >= hard_cap:
        return "stop"
    if soft_limit is not None and rounds_in_turn >= soft_limit:
        return "nudge"
    return "none"


def _require_count(value: int, name: str) -> None:
    # bool is an int; True tokens is a bug upstream, not 1.
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
