"""Telemetry background jobs. Thin: each calls one service."""

from __future__ import annotations

import os
import socket

from celery import Task, shared_task
from django.db import OperationalError
from django.utils import timezone

from telemetry.models import Heartbeat
from telemetry.packing import pack_idle_sessions as pack_idle
from telemetry.retention import remove_expired_calls
from telemetry.session_state import recompute_pressure_batch


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


@shared_task(name="telemetry.pack_idle_sessions", bind=True, ignore_result=True)
def pack_idle_sessions(self: Task) -> None:  # type: ignore[type-arg]
    """Pack idle sessions' calls and turns: a bounded batch a run; re-enqueue while there is
    more."""
    if pack_idle().has_more:
        self.apply_async(countdown=1)


@shared_task(
    name="telemetry.recompute_pressure",
    ignore_result=True,
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def recompute_pressure(profile_id: int, after: str = "") -> None:
    """A policy or window change was saved: recompute the stored window and pressure of the
    profile's sessions, one batch per run, then enqueue the next batch. Idempotent."""
    last = recompute_pressure_batch(profile_id, after=after)
    if last is not None:
        recompute_pressure.delay(profile_id, last)
