"""The alerting rules themselves, pure: the conditions, when one fires, resolves or waits, and
the signed notification body. Standard library only (no Django, no clock): the caller passes
`now`, so every decision is a plain function of its inputs, tested with hypothesis.

A rule compares one metric of a subject (a session, a profile, an agent key) with its
threshold: the condition holds when `value >= threshold`. A firing is one open alert per
(rule, subject); it resolves once when the condition clears; a new firing of the same rule and
subject waits out the rule's cooldown, counted from the previous firing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

Scope = Literal["session", "profile", "key"]
Action = Literal["fire", "resolve", "none"]

SIGNATURE_HEADER = "X-Console-Signature"
DELIVERY_HEADER = "X-Console-Delivery"


@dataclass(frozen=True)
class Metric:
    """One condition a rule may watch: what its value is, for which subjects, in what unit."""

    name: str
    scope: Scope
    unit: str
    description: str
    # a count or amount over a window of minutes (the rule's `window_minutes` is used)
    windowed: bool = False
    # evaluated right after ingest for the sessions it touched (else only by beat)
    on_ingest: bool = False
    # counts over the local day of the rule's time zone (from its midnight)
    daily: bool = False


BAND_RANKS: dict[str, int] = {"ok": 0, "unknown": 0, "prune": 1, "compact": 2, "over": 3}

METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric(
            "session_band",
            "session",
            "band rank",
            "the session's pressure band as a rank: 1 prune, 2 compact, 3 overflow (over the "
            "window); threshold 2 fires at compact or overflow",
            on_ingest=True,
        ),
        Metric(
            "projected_over_window",
            "session",
            "ratio",
            "the projected next request over the window in force; threshold 1 fires when the "
            "next request would not fit",
            on_ingest=True,
        ),
        Metric(
            "compaction_failed",
            "session",
            "runs",
            "automatic compaction runs of the session that failed within the window",
            windowed=True,
            on_ingest=True,
        ),
        Metric(
            "relief_overdue",
            "session",
            "minutes",
            "minutes a session's requested automatic relief has been waiting without a run "
            "finishing",
        ),
        Metric(
            "overflow_reported",
            "session",
            "reports",
            "context overflows (prompt is too long) the agent reported within the window",
            windowed=True,
            on_ingest=True,
        ),
        Metric(
            "session_cost",
            "session",
            "USD",
            "the session's cost so far",
            on_ingest=True,
        ),
        Metric(
            "round_hard_cap",
            "session",
            "rounds over the cap",
            "rounds of the session's latest turn at or past the profile's round_hard_cap, plus "
            "one (0 below the cap or with no cap); threshold 1 fires when a turn reaches the cap",
            on_ingest=True,
        ),
        Metric(
            "daily_spend",
            "profile",
            "USD",
            "the profile's spend since midnight in the rule's time zone (UTC unless set)",
            daily=True,
        ),
        Metric(
            "cache_premium_per_hour",
            "profile",
            "USD",
            "the premium of the profile's cache misses (D1, D2) in the last hour",
        ),
        Metric(
            "cache_premium_vs_median",
            "profile",
            "× median",
            "the last hour's cache-miss premium over the median of the profile's hourly premiums "
            "in the trailing 7 days (0 while there is no history)",
        ),
        Metric(
            "unexplained_misses_per_hour",
            "profile",
            "misses",
            "cache misses with no known cause in the last hour",
        ),
        Metric(
            "profile_silent_hours",
            "profile",
            "hours",
            "hours since the profile's last session activity, once it has been active",
        ),
        Metric(
            "key_silent_hours",
            "key",
            "hours",
            "hours since an agent key was last used, once it has been used (revoked keys are "
            "not watched)",
        ),
    )
}

CHANNELS = ("webhook", "slack", "email", "none")


class RuleError(ValueError):
    """A rule's value that cannot be kept: `field` names it (mapped to 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_rule(
    *, metric: str, threshold: Decimal, window_minutes: int, cooldown_minutes: int, channel: str
) -> Metric:
    """The rule's metric, or RuleError naming the first field that is wrong. Thresholds,
    windows and cooldowns are never negative; a windowed metric needs a window of a minute or
    more."""
    found = METRICS.get(metric)
    if found is None:
        raise RuleError("metric", f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    if not threshold.is_finite() or threshold < 0:
        raise RuleError("threshold", "must be a number ≥ 0")
    if window_minutes < 0:
        raise RuleError("window_minutes", "must be ≥ 0")
    if found.windowed and window_minutes < 1:
        raise RuleError("window_minutes", f"{metric} counts over a window: give 1 or more")
    if cooldown_minutes < 0:
        raise RuleError("cooldown_minutes", "must be ≥ 0")
    if channel not in CHANNELS:
        raise RuleError("channel", f"unknown channel {channel!r}; use one of {', '.join(CHANNELS)}")
    return found


def holds(value: Decimal | None, threshold: Decimal) -> bool:
    """The condition: a known value at or above the threshold. An unknown value never fires."""
    return value is not None and value >= threshold


@dataclass(frozen=True)
class SubjectState:
    """What is stored for one (rule, subject): is an alert open, and when did the last one fire."""

    open: bool
    last_fired_at: datetime | None


def decide(state: SubjectState, *, firing: bool, now: datetime, cooldown: timedelta) -> Action:
    """One step of a (rule, subject): "fire" when the condition holds, no alert is open and the
    cooldown since the last firing has passed; "resolve" when it clears with an alert open;
    otherwise "none". Deciding again on the same inputs after acting gives "none": one
    notification per firing, one per resolve."""
    if firing and not state.open:
        if state.last_fired_at is not None and now - state.last_fired_at < cooldown:
            return "none"
        return "fire"
    if not firing and state.open:
        return "resolve"
    return "none"


def median_ratio(current: Decimal, history: list[Decimal]) -> Decimal:
    """`current` over the median of `history` (the trailing hourly values); 0 with no history
    or a zero median, so a first premium is not an infinite jump."""
    if not history:
        return Decimal(0)
    ordered = sorted(history)
    middle = len(ordered) // 2
    median = (
        ordered[middle]
        if len(ordered) % 2
        else (ordered[middle - 1] + ordered[middle]) / Decimal(2)
    )
    if median <= 0:
        return Decimal(0)
    return current / median


def body_bytes(payload: dict[str, object]) -> bytes:
    """The notification body as sent: compact, key-sorted JSON (the bytes the signature covers)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the exact body bytes with the rule's secret."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does: recompute the signature and compare in constant time."""
    return hmac.compare_digest(signature(secret, body), header)


def retry_delay(attempt: int, *, base_seconds: float, cap_seconds: float) -> float:
    """Exponential backoff after failed attempt `attempt` (1-based): base × 2^(attempt-1),
    capped."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    return float(min(cap_seconds, base_seconds * (2 ** (attempt - 1))))
