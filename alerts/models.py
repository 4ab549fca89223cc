"""Alert rules, the alerts they raised, and the notifications (an outbox) with every attempt.

Every write goes through `alerts.services` (rules) and `alerts.evaluation` (alerts and their
notifications); delivery (`alerts.delivery`) only moves a notification's state and records
attempts.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from telemetry.models import AgentProfile, AgentSession


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class AlertRule(models.Model):
    """A condition on a metric (`alerts.firing.METRICS`) for one profile, or fleet-wide when
    `profile` is empty, and where to send what it raises."""

    name = models.CharField(max_length=200)
    profile = models.ForeignKey(
        AgentProfile, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules"
    )
    metric = models.CharField(max_length=40)
    threshold = models.DecimalField(max_digits=18, decimal_places=6)
    window_minutes = models.PositiveIntegerField(default=60)
    cooldown_minutes = models.PositiveIntegerField(default=30)
    # the IANA zone whose local day a daily metric counts (`telemetry.zones.day_start`)
    time_zone = models.CharField(max_length=64, default="UTC")
    channel = models.CharField(max_length=10, default="none")
    # a webhook or Slack incoming-webhook URL, or an email address
    target = models.CharField(max_length=500, blank=True, default="")
    # signs webhook bodies (HMAC-SHA256); shown to admins so receivers can verify
    secret = models.CharField(max_length=100, default=new_secret)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name


class Alert(models.Model):
    """One firing of a rule for one subject; `resolved_at` set once the condition cleared.

    At most one open alert per (rule, subject), held by a partial unique constraint: two
    evaluations racing on the same subject create one firing."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=100)  # "session:12", "profile:3", "key:7"
    subject_label = models.CharField(max_length=300, blank=True, default="")
    session = models.ForeignKey(
        AgentSession, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    profile = models.ForeignKey(
        AgentProfile, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    value = models.DecimalField(max_digits=24, decimal_places=6)
    # links for the history page: a compaction run, a turn with a miss, an overflow
    detail = models.JSONField(default=dict, blank=True)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(resolved_at__isnull=True),
                name="alert_one_open_per_subject",
            )
        ]
        indexes = [
            models.Index(fields=["rule", "subject", "-fired_at"], name="alert_rule_subject"),
            models.Index(fields=["-fired_at"], name="alert_fired"),
        ]
        ordering = ["-fired_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.subject} at {self.fired_at:%Y-%m-%d %H:%M}"

    @property
    def firing(self) -> bool:
        return self.resolved_at is None


class Notification(models.Model):
    """The outbox: one row per alert event to send, created in the transition's transaction, so a
    worker restart loses nothing and a replayed job sends nothing twice (unique per event)."""

    class Event(models.TextChoices):
        FIRING = "firing", "firing"
        RESOLVED = "resolved", "resolved"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=10, choices=Event.choices)
    channel = models.CharField(max_length=10)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    # set while one worker sends it: only the worker whose conditional UPDATE set it sends
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["alert", "event"], name="notification_once_per_event")
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="notification_status")]

    def __str__(self) -> str:
        return f"{self.event} of alert {self.alert_id} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at sending a notification: what the receiver answered, or why it failed."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="attempt_rows"
    )
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["notification", "number"], name="attempt_unique")
        ]
        ordering = ["notification", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.notification_id}: {self.ok}"


class HourlyPremium(models.Model):
    """A profile's cache-miss premium of one hour, kept by beat's evaluation: the trailing
    7-day median `cache_premium_vs_median` compares with."""

    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    premium_usd = models.DecimalField(max_digits=24, decimal_places=9)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "hour"], name="hourly_premium_unique")
        ]

    def __str__(self) -> str:
        return f"{self.profile_id}@{self.hour.isoformat()}: {self.premium_usd}"
