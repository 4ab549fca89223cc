"""Evaluating rules: observations in, firings and resolves out, each with its outbox row.

`evaluate_sessions(ids)` runs the per-session rules for sessions an ingest touched (the nudge
job); `evaluate_all()` is beat's pass: profile and key rules, and the per-session rules for the
sessions that can change without a report (an open alert, a pending relief, a report since the
last pass). Both cost O(the sessions given), never a scan of every call.

Idempotent: a transition is a conditional write (a partial unique index holds one open alert
per rule and subject; a resolve is an UPDATE of the open row), and the notification is written
in the same transaction, so a replayed or concurrent evaluation sends nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from alerts.firing import METRICS, SubjectState, decide, holds
from alerts.measures import (
    CACHE_METRICS,
    Observation,
    hour_misses,
    key_values,
    profile_values,
    record_hour_premiums,
    session_values,
)
from alerts.models import Alert, AlertRule, Notification
from compaction.models import CompactionRun, OverflowEvent
from telemetry.models import AgentProfile, AgentSession, ContextEvent

logger = logging.getLogger(__name__)

SESSION_METRICS = tuple(name for name, m in METRICS.items() if m.scope == "session")
INGEST_METRICS = tuple(name for name, m in METRICS.items() if m.on_ingest)
QUANTUM = Decimal("0.000001")


def evaluate_sessions(
    session_ids: Iterable[int], *, metrics: Sequence[str] = INGEST_METRICS
) -> int:
    """Run the enabled per-session rules on these sessions; returns the transitions made."""
    ids = sorted(set(session_ids))
    if not ids:
        return 0
    rules = list(AlertRule.objects.filter(enabled=True, metric__in=metrics))
    if not rules:
        return 0
    sessions = list(AgentSession.objects.filter(pk__in=ids).select_related("profile"))
    now = timezone.now()
    made = 0
    for rule in rules:
        mine = [s for s in sessions if rule.profile_id is None or s.profile_id == rule.profile_id]
        if mine:
            observed = session_values(
                rule.metric, mine, window_minutes=rule.window_minutes, now=now
            )
            made += apply(rule, observed, now=now)
    return made


def evaluate_all(*, since: datetime | None = None) -> int:
    """Beat's pass over every enabled rule (see the module docstring); `since`: sessions
    reported after it are evaluated too (default: the last 2 minutes)."""
    now = timezone.now()
    since = now - timedelta(minutes=2) if since is None else since
    rules = list(AlertRule.objects.filter(enabled=True).select_related("profile"))
    made = 0
    session_rules = [r for r in rules if METRICS[r.metric].scope == "session"]
    if session_rules:
        open_sessions = Alert.objects.filter(
            resolved_at__isnull=True, session__isnull=False
        ).values_list("session_id", flat=True)
        ids = set(open_sessions)
        ids.update(
            AgentSession.objects.filter(
                Q(relief_requested_at__isnull=False) | Q(last_seen_at__gte=since)
            ).values_list("pk", flat=True)
        )
        # what happens to a session without a report from it: a failed automatic run, an
        # overflow reported through the API or by telemetry
        ids.update(
            CompactionRun.objects.filter(
                mode=CompactionRun.Mode.AUTO,
                status=CompactionRun.Status.FAILED,
                started_at__gte=since,
            ).values_list("session_id", flat=True)
        )
        ids.update(
            OverflowEvent.objects.filter(created_at__gte=since).values_list("session_id", flat=True)
        )
        ids.update(
            ContextEvent.objects.filter(
                kind=ContextEvent.Kind.OVERFLOW, created_at__gte=since
            ).values_list("session_id", flat=True)
        )
        made += evaluate_sessions(ids, metrics=SESSION_METRICS)
    other = [r for r in rules if METRICS[r.metric].scope != "session"]
    if other:
        profiles = list(AgentProfile.objects.all())
        # the last hour's misses are read once a pass, whatever number of rules use them
        misses = (
            hour_misses(profiles, now=now) if any(r.metric in CACHE_METRICS for r in other) else {}
        )
        if any(r.metric == "cache_premium_vs_median" for r in other):
            record_hour_premiums(misses, now=now)
        for rule in other:
            scoped = [p for p in profiles if rule.profile_id in (None, p.pk)]
            if METRICS[rule.metric].scope == "key":
                observed = key_values(scoped, now=now)
            else:
                observed = profile_values(
                    rule.metric, scoped, now=now, misses=misses, zone=ZoneInfo(rule.time_zone)
                )
            made += apply(rule, observed, now=now)
    made += _resolve_disabled(now)
    return made


def apply(rule: AlertRule, observed: Sequence[Observation], *, now: datetime) -> int:
    """Decide and write each subject's transition for `rule`; returns how many were made."""
    subjects = [o.subject for o in observed]
    open_ids = dict(
        Alert.objects.filter(rule=rule, subject__in=subjects, resolved_at__isnull=True).values_list(
            "subject", "pk"
        )
    )
    last_fired = dict(
        Alert.objects.filter(rule=rule, subject__in=subjects)
        .values("subject")
        .annotate(last=Max("fired_at"))
        .values_list("subject", "last")
    )
    cooldown = timedelta(minutes=rule.cooldown_minutes)
    made = 0
    for obs in observed:
        state = SubjectState(
            open=obs.subject in open_ids, last_fired_at=last_fired.get(obs.subject)
        )
        action = decide(state, firing=holds(obs.value, rule.threshold), now=now, cooldown=cooldown)
        if action == "fire":
            made += _fire(rule, obs, now)
        elif action == "resolve":
            made += _resolve(rule, open_ids[obs.subject], now)
    return made


def _fire(rule: AlertRule, obs: Observation, now: datetime) -> int:
    value = (obs.value or Decimal(0)).quantize(QUANTUM)
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule,
                subject=obs.subject,
                subject_label=obs.label[:300],
                session_id=obs.session_id,
                profile_id=obs.profile_id,
                value=value,
                detail=obs.detail,
                fired_at=now,
            )
            _notify(rule, alert, Notification.Event.FIRING)
    except IntegrityError:
        # another evaluation opened it first: one firing (alert_one_open_per_subject)
        return 0
    logger.warning("alert firing: %s on %s (value %s)", rule.name, obs.label, value)
    return 1


def _resolve(rule: AlertRule, alert_id: int, now: datetime) -> int:
    with transaction.atomic():
        claimed = Alert.objects.filter(pk=alert_id, resolved_at__isnull=True).update(
            resolved_at=now
        )
        if not claimed:
            return 0
        _notify(rule, Alert.objects.get(pk=alert_id), Notification.Event.RESOLVED)
    return 1


def _resolve_disabled(now: datetime) -> int:
    """Open alerts of a disabled rule resolve (and say so) on beat's next pass."""
    made = 0
    for alert in Alert.objects.filter(resolved_at__isnull=True, rule__enabled=False).select_related(
        "rule"
    ):
        made += _resolve(alert.rule, alert.pk, now)
    return made


def _notify(rule: AlertRule, alert: Alert, event: str) -> None:
    if rule.channel == "none":
        return
    notification = Notification.objects.create(alert=alert, event=event, channel=rule.channel)
    transaction.on_commit(lambda: _publish(notification.pk))


def _publish(notification_id: int) -> None:
    from alerts.delivery import publish

    publish(notification_id)
