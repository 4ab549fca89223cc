"""Compaction jobs. Thin: each calls one service. Tasks take ids.

Delivery: `acks_late` + `reject_on_worker_lost` (settings) so a job whose worker dies is
redelivered; the service makes the redelivery do the work once. A job that fails — a database
blip or a poison session that fails every time — is retried by Celery's own retry settings
(`autoretry_for`, `max_retries`, exponential `retry_backoff`), each attempt on the same run
record; when the retries are spent, `on_failure` records that run as `failed` once and marks
the surface version tried, so the sweeper does not pick the poison session up again until its
transcript changes. `time_limit` bounds the longest job; the broker's visibility timeout is set
above it (settings). A run whose process died is failed and its relief asked again by
`recover_runs` (beat, and each worker as it starts: `compaction.recovery`).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, current_app, shared_task
from celery.signals import worker_ready
from django.conf import settings

from compaction import services
from compaction.archives import purge_expired_archives
from compaction.log_retention import remove_expired_text
from compaction.recovery import recover_stale_runs
from compaction.sweeper import sweep_sessions_over_threshold
from telemetry.database_errors import public_text

logger = logging.getLogger("compaction")


class ReliefTask(Task):  # type: ignore[type-arg]
    """Records the job as failed once, after Celery gave up retrying it."""

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        session_id = int(args[0]) if args else int(kwargs["session_id"])
        logger.error(
            "automatic compaction of session %s failed after %s attempts: %s",
            session_id,
            self.request.retries + 1,
            exc,
        )
        services.record_failed_run(
            session_id=session_id,
            error=f"gave up after {self.request.retries + 1} attempts: {public_text(exc)}",
            task_id=task_id or "",
            attempts=self.request.retries + 1,
        )


@shared_task(
    name="compaction.relieve_session",
    base=ReliefTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    autoretry_for=(Exception,),
    max_retries=settings.COMPACTION_JOB_MAX_RETRIES,
    retry_backoff=settings.COMPACTION_JOB_RETRY_BACKOFF_SECONDS,
    retry_backoff_max=60,
    retry_jitter=False,
    time_limit=settings.COMPACTION_JOB_TIME_LIMIT,
    soft_time_limit=max(5, settings.COMPACTION_JOB_TIME_LIMIT - 30),
)
def relieve_session_task(self: Task, session_id: int) -> None:  # type: ignore[type-arg]
    """Automatic compaction (D4, D5): runs `services.relieve_session`. Idempotent: safe to run
    twice. The registered name `compaction.relieve_session` is what queued jobs carry (and what
    `telemetry.relief_dispatch` sends): it stays, whatever this function is called."""
    services.relieve_session(
        session_id=session_id, task_id=self.request.id or "", attempts=self.request.retries + 1
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


@shared_task(name="compaction.apply_log_retention", bind=True, ignore_result=True)
def apply_log_retention(self: Task) -> None:  # type: ignore[type-arg]
    """Log retention (issue 35): a bounded batch a run; re-enqueue while there is more."""
    if remove_expired_text().has_more:
        self.apply_async(countdown=1)


@shared_task(name="compaction.recover_runs", ignore_result=True)
def recover_runs() -> None:
    """Fail runs whose process died and enqueue relief for their sessions again."""
    recover_stale_runs()


@worker_ready.connect
def recover_runs_on_start(**_: Any) -> None:
    """A worker that starts (often: restarted after one was killed) recovers at once rather
    than at beat's next turn."""
    try:
        current_app.send_task("compaction.recover_runs")
    except Exception as exc:  # beat sends it again; a worker must start whatever the broker does
        logger.warning("could not enqueue run recovery at worker start: %s", exc)
