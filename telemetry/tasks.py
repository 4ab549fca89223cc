"""Telemetry background jobs. Thin: each calls one service."""

from __future__ import annotations

import os
import socket

from celery import Task, shared_task
from django.utils import timezone

from telemetry.models import Heartbeat
from telemetry.retention import remove_expired_calls


@shared_task(name="telemetry.record_heartbeat", ignore_result=True)
def record_heartbeat() -> None:
    """Prove the worker (and the beat that schedules this) is alive; `/healthz` reports the age."""
    Heartbeat.objects.update_or_create(
        name="worker",
        defaults={"at": timezone.now(), "detail": f"{socket.gethostname()}:{os.getpid()}"},
    )


@shared_task(name="telemetry.apply_retention", bind=True, ignore_result=True)
def apply_retention(self: Task) -> None:  # type: ignore[type-arg]
    """Call retention: a bounded batch a run; re-enqueue while there is more."""
    if remove_expired_calls().has_more:
        self.apply_async(countdown=1)
