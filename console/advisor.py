"""D8 advisor on the policy page: rounds per turn per profile over the last week, and what the
current and a proposed soft limit / hard cap would have nudged or stopped."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from django import forms
from django.db.models import Count
from django.utils import timezone

from console.selectors.policies import load_policies
from telemetry.models import AgentProfile, Turn
from telemetry.round_advice import (
    LimitImpact,
    RoundsDistribution,
    limit_impact,
    rounds_distribution,
    suggest_limits,
)
from telemetry.session_scope import sessions_seen_since

ADVICE_WINDOW = timedelta(days=7)


class ProposalForm(forms.Form):
    """Limits to try against every profile's turns (blank: the suggested limits)."""

    soft = forms.IntegerField(required=False, min_value=1, max_value=100_000, label="soft limit")
    hard = forms.IntegerField(required=False, min_value=1, max_value=100_000, label="hard cap")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        soft, hard = data.get("soft"), data.get("hard")
        if soft is not None and hard is not None and hard < soft:
            self.add_error("hard", "The hard cap must be at least the soft limit.")
        return data


@dataclass(frozen=True)
class ProfileAdvice:
    profile: AgentProfile
    distribution: RoundsDistribution
    current: LimitImpact
    proposed: LimitImpact | None
    proposed_from: Literal["you", "suggested", ""]


def rounds_histograms(since: datetime) -> dict[int, dict[int, int]]:
    """By profile: turns that ended at or after `since`, counted by their rounds (calls). Read
    session by session (`telemetry.session_scope`): one query, one more per `SESSION_CHUNK`
    sessions seen since then."""
    histograms: dict[int, dict[int, int]] = defaultdict(dict)
    for sessions in sessions_seen_since(since):
        rows = (
            Turn.objects.filter(session_id__in=list(sessions), last_at__gte=since)
            .values("session_id", "calls")
            .annotate(turns=Count("id"))
            .values_list("session_id", "calls", "turns")
            .order_by()
        )
        for session_id, rounds, turns in rows:
            histogram = histograms[sessions[session_id]]
            histogram[rounds] = histogram.get(rounds, 0) + turns
    return histograms


def round_advice(
    proposal: tuple[int | None, int | None] | None = None, now: datetime | None = None
) -> list[ProfileAdvice]:
    """Every profile's turns of the last `ADVICE_WINDOW` as a rounds histogram
    (`rounds_histograms`), with the impact of its current limits and of `proposal` (else the
    suggested limits)."""
    histograms = rounds_histograms((now or timezone.now()) - ADVICE_WINDOW)
    policies = load_policies()
    advice = []
    for profile in AgentProfile.objects.order_by("name"):
        histogram = histograms.get(profile.pk, {})
        policy = policies.of(profile.pk)
        current = limit_impact(
            histogram, soft_limit=policy.round_soft_limit, hard_cap=policy.round_hard_cap
        )
        proposed, source = None, ""
        if proposal is not None and proposal != (None, None):
            soft, hard = proposal
            proposed, source = limit_impact(histogram, soft_limit=soft, hard_cap=hard), "you"
        elif (suggested := suggest_limits(histogram)) is not None:
            proposed = limit_impact(histogram, soft_limit=suggested[0], hard_cap=suggested[1])
            source = "suggested"
        advice.append(
            ProfileAdvice(
                profile,
                rounds_distribution(histogram),
                current,
                proposed,
                source,  # type: ignore[arg-type]
            )
        )
    return advice
