"""Retention of raw calls and turns, per profile (`call_retention_days`; 0 keeps them forever).

A turn whose last call is older than its profile's retention is removed with its calls; what
the console's figures are read from stays: the hour rollups (the overview), the session row's
totals (the sessions list and the session's figures), compaction runs and context events (an
event's link to a removed call becomes empty). So the figures over any period are unchanged
while the raw rows are gone. Each session's latest turn is always kept: the projection of its
next request reads it. Turn keys stay too, so a replayed span still lands in its old turn.

Removal is set-wise and bounded: at most `BATCH_TURNS` turns and their calls a run, in two
statements, taking no lock on a session (ingest never waits for it); the periodic job runs it
again while there is more (`telemetry.tasks.apply_retention`). An export of the period first
(`manage.py export_sessions --before`) can restore it later (docs/export.md).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from telemetry.models import AgentProfile, LLMCall, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy

BATCH_TURNS: Final = 1000


RetentionField = Literal["call_retention_days", "log_retention_days"]


def cutoffs(
    policies: Mapping[int, PolicyValues],
    now: datetime,
    field: RetentionField = "call_retention_days",
) -> dict[int, datetime]:
    """By profile id: the time before which what `field` keeps goes (raw calls and turns, or
    the text of log messages: `compaction.log_retention`); profiles keeping it forever (0)
    are left out."""
    return {
        pk: now - timedelta(days=getattr(policy, field))
        for pk, policy in policies.items()
        if getattr(policy, field) > 0
    }


def expired_turns(by_profile: Mapping[int, datetime]) -> Q:
    """The turns retention removes (a `Turn` filter): ended before their profile's cut-off, and
    not their session's latest. Matches nothing for no cut-off."""
    if not by_profile:
        return Q(pk__in=[])
    older = functools.reduce(
        operator.or_,
        (Q(session__profile_id=pk, last_at__lt=cutoff) for pk, cutoff in by_profile.items()),
    )
    return older & ~Q(turn=F("session__last_turn"))


@dataclass(frozen=True)
class Removed:
    calls: int
    turns: int
    has_more: bool


def remove_expired_calls(*, batch_turns: int = BATCH_TURNS, now: datetime | None = None) -> Removed:
    """Delete at most `batch_turns` expired turns (`expired_turns`) and their calls."""
    now = now or timezone.now()
    policies = {profile.pk: effective_policy(profile) for profile in AgentProfile.objects.all()}
    found = cutoffs(policies, now)
    if not found:
        return Removed(0, 0, False)
    doomed = list(
        Turn.objects.filter(expired_turns(found))
        .order_by()
        .values_list("pk", "session_id", "turn")[: batch_turns + 1]
    )
    has_more = len(doomed) > batch_turns
    doomed = doomed[:batch_turns]
    if not doomed:
        return Removed(0, 0, False)
    by_session: dict[int, list[int]] = {}
    for _, session_id, turn in doomed:
        by_session.setdefault(session_id, []).append(turn)
    their_calls = functools.reduce(
        operator.or_, (Q(session_id=s, turn__in=turns) for s, turns in by_session.items())
    )
    with transaction.atomic():
        # the ORM's delete: the calls' context events keep their row, their `call` emptied
        _, per_model = LLMCall.objects.filter(their_calls).delete()
        Turn.objects.filter(pk__in=[pk for pk, _, _ in doomed]).delete()
    return Removed(per_model.get(LLMCall._meta.label, 0), len(doomed), has_more)
