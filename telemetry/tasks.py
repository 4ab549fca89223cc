"""Telemetry background jobs. Thin: each calls one service."""

from __future__ import annotations

import os
import socket

from celery import shared_task
from django.utils import timezone

from telemetry.models import Heartbeat


@shared_task(name="telemetry.record_heartbeat", ignore_result=True)
def record_heartbeat() -> None:
    """Prove the worker (and the beat that schedules this) is alive; `/healthz` reports the age."""
    Heartbeat.objects.update_or_create(
        name="worker",
        defaults={"at": timezone.now(), "detail": f"{socket.gethostname()}:{os.getpid()}"},
    )
