"""Alert jobs. Thin: each calls one function of `alerts.evaluation` or `alerts.delivery`."""

from __future__ import annotations

from celery import Task, shared_task
from django.db import OperationalError

from alerts import delivery, evaluation


@shared_task(
    name="alerts.evaluate_sessions",
    ignore_result=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def evaluate_sessions_task(session_ids: list[int]) -> None:
    """The per-session rules for the sessions an ingest touched (the nudge). Idempotent."""
    evaluation.evaluate_sessions(session_ids)


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate_task() -> None:
    """Beat's pass over every rule, then the outbox's lost jobs."""
    evaluation.evaluate_all()
    delivery.flush_outbox()


@shared_task(name="alerts.deliver", bind=True, ignore_result=True, max_retries=None)
def deliver_task(self: Task[[int], None], notification_id: int) -> None:
    """One attempt at a notification; a failure is retried with backoff (recorded each time)."""
    delay = delivery.deliver(notification_id)
    if delay is not None:
        raise self.retry(countdown=delay)
