"""Compaction jobs. Thin: each calls one service. Tasks take ids.

Delivery: `acks_late` + `reject_on_worker_lost` (settings) so a job whose worker dies is
redelivered; the service makes the redelivery do the work once. Retries only for transient
database errors, with backoff and our own bounded attempt count; past it, a `failed` run.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.app.task import Task
from django.db import InterfaceError, OperationalError

from compaction import services
from compaction.archives import purge_expired_archives
from compaction.sweeper import sweep_sessions_over_threshold

logger = logging.getLogger("compaction")

MAX_ATTEMPTS = 5
TRANSIENT = (OperationalError, InterfaceError)


@shared_task(
    name="compaction.relieve_session",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def relieve_session(self: Task, session_id: int) -> None:  # type: ignore[type-arg]
    """Automatic compaction (D4, D5). Idempotent: safe to run twice."""
    attempt = self.request.retries + 1
    task_id = self.request.id or ""
    try:
        services.relieve_session(session_id=session_id, task_id=task_id, attempts=attempt)
    except TRANSIENT as exc:
        if attempt >= MAX_ATTEMPTS:
            services.record_failed_run(
                session_id=session_id,
                error=f"gave up after {attempt} attempts: {exc}",
                task_id=task_id,
                attempts=attempt,
            )
            return
        raise self.retry(exc=exc, countdown=min(60, 2**attempt)) from exc
    except Exception as exc:
        logger.exception("automatic compaction of session %s failed", session_id)
        services.record_failed_run(
            session_id=session_id,
            error=f"{type(exc).__name__}: {exc}",
            task_id=task_id,
            attempts=attempt,
        )


@shared_task(name="compaction.sweep", ignore_result=True)
def sweep() -> None:
    """Enqueue relief for sessions over threshold that have no pending job (broker was down)."""
    sweep_sessions_over_threshold()


@shared_task(name="compaction.purge_archives", bind=True, ignore_result=True)
def purge_archives(self: Task) -> None:  # type: ignore[type-arg]
    """Retention (D5): a bounded batch a run; re-enqueue while there is more."""
    _, has_more = purge_expired_archives()
    if has_more:
        self.apply_async(countdown=1)
