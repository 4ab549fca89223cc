"""Delivering the outbox: claim a notification, send it once, record the attempt.

Only the worker whose conditional UPDATE claims a pending notification sends it; a sent one is
never sent again (a replayed job finds it sent). A failed attempt is recorded and the job is
retried with exponential backoff until ALERTS_DELIVERY_MAX_ATTEMPTS; then the notification is
`failed`. Beat republishes pending notifications whose job was lost (`flush_outbox`).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from alerts.channels import send
from alerts.firing import METRICS, retry_delay
from alerts.models import Alert, DeliveryAttempt, Notification

logger = logging.getLogger(__name__)

DELIVER_TASK = "alerts.deliver"
# a claim older than this is a worker that died mid-send: the notification may be taken again
STALE_CLAIM = timedelta(minutes=5)


def publish(notification_id: int, *, countdown: float = 0) -> bool:
    try:
        current_app.send_task(DELIVER_TASK, args=[notification_id], countdown=countdown or None)
    except Exception as exc:  # the broker is away: beat's flush_outbox publishes it later
        logger.warning("could not enqueue alert notification %s: %s", notification_id, exc)
        return False
    return True


def _link(path: str) -> str:
    return f"{settings.ALERTS_CONSOLE_URL.rstrip('/')}{path}"


def payload(notification: Notification) -> dict[str, object]:
    """The documented body (docs/alerts.md): the same bytes on every attempt of one event."""
    alert: Alert = notification.alert
    rule = alert.rule
    metric = METRICS.get(rule.metric)
    links: dict[str, str] = {"alert": _link(reverse("alerts") + f"#alert-{alert.pk}")}
    if alert.session_id is not None:
        links["session"] = _link(reverse("session", args=[alert.session_id]))
        if "run" in alert.detail:
            links["compaction_run"] = links["session"] + f"#run-{alert.detail['run']}"
    state = "FIRING" if notification.event == Notification.Event.FIRING else "RESOLVED"
    title = f"[{state}] {rule.name}: {alert.subject_label}"
    text = (
        f"{title} — {rule.metric} = {alert.value} {metric.unit if metric else ''} "
        f"(threshold {rule.threshold}) {links.get('session', links['alert'])}"
    )
    return {
        "id": notification.pk,
        "event": notification.event,
        "title": title,
        "text": text,
        "alert": {
            "id": alert.pk,
            "subject": alert.subject,
            "subject_label": alert.subject_label,
            "value": str(alert.value),
            "fired_at": alert.fired_at.isoformat(),
            "resolved_at": alert.resolved_at.isoformat()
            if notification.event == Notification.Event.RESOLVED and alert.resolved_at
            else None,
            "detail": alert.detail,
        },
        "rule": {
            "id": rule.pk,
            "name": rule.name,
            "metric": rule.metric,
            "threshold": str(rule.threshold),
            "window_minutes": rule.window_minutes,
            "profile": rule.profile.name if rule.profile else None,
        },
        "links": links,
    }


def deliver(notification_id: int) -> float | None:
    """One attempt at `notification_id` if this process claims it. Returns the delay before the
    next attempt when this one failed and attempts remain, else None."""
    now = timezone.now()
    claimed = Notification.objects.filter(
        Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - STALE_CLAIM),
        pk=notification_id,
        status=Notification.Status.PENDING,
    ).update(claimed_at=now)
    if not claimed:
        return None
    notification = Notification.objects.select_related("alert__rule__profile").get(
        pk=notification_id
    )
    rule = notification.alert.rule
    started = time.monotonic()
    try:
        outcome = send(
            notification.channel,
            rule.target,
            payload=payload(notification),
            secret=rule.secret,
            delivery_id=str(notification.pk),
        )
    except Exception as exc:  # a refused target (re-checked) or a bug: a failed attempt
        from alerts.channels import Sent

        outcome = Sent(False, None, str(exc)[:500])
    number = notification.attempts + 1
    DeliveryAttempt.objects.create(
        notification=notification,
        number=number,
        at=now,
        ok=outcome.ok,
        status_code=outcome.status_code,
        error=outcome.error,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    if outcome.ok:
        Notification.objects.filter(pk=notification_id).update(
            status=Notification.Status.SENT, attempts=number, sent_at=timezone.now()
        )
        return None
    exhausted = number >= settings.ALERTS_DELIVERY_MAX_ATTEMPTS
    Notification.objects.filter(pk=notification_id).update(
        attempts=number,
        claimed_at=None,
        status=Notification.Status.FAILED if exhausted else Notification.Status.PENDING,
    )
    logger.warning(
        "alert notification %s attempt %s failed: %s", notification_id, number, outcome.error
    )
    if exhausted:
        return None
    return retry_delay(
        number,
        base_seconds=settings.ALERTS_RETRY_BACKOFF_SECONDS,
        cap_seconds=settings.ALERTS_RETRY_BACKOFF_MAX_SECONDS,
    )


def flush_outbox() -> int:
    """Republish pending notifications nobody holds that have waited past the longest backoff
    (their job was lost: a broker outage at publish, a purged queue)."""
    waited = timedelta(seconds=settings.ALERTS_RETRY_BACKOFF_MAX_SECONDS + 60)
    now = timezone.now()
    ids = list(
        Notification.objects.filter(
            Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - STALE_CLAIM),
            status=Notification.Status.PENDING,
            created_at__lt=now - waited,
        ).values_list("pk", flat=True)[:500]
    )
    return sum(1 for pk in ids if publish(pk))
