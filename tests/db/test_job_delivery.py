"""Issue 16: a poison job is retried by Celery's own settings then failed once; orphaned runs
are failed by recovery; a job longer than the broker's visibility timeout compacts once."""

from __future__ import annotations

import os
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from celery import current_app
from django.utils import timezone

from compaction.models import CompactionOperation, CompactionRun
from compaction.recovery import recover_stale_runs
from compaction.sweeper import sweep_sessions_over_threshold
from tests.db.conftest import start_worker, stop_worker, wait_until
from tests.db.test_compaction_worker import (
    applied_runs,
    assert_compacted_exactly_once,
    log_of,
    session_over_threshold,
)

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_a_poison_job_is_retried_with_backoff_then_recorded_failed_once(
    make_agent, tmp_path, settings
):
    settings.COMPACTION_AUTO_ENQUEUE = False  # only the job this test sends
    agent = make_agent("default")
    session = session_over_threshold(agent, "poison-1")
    # Poison: an operation row the derivation cannot read fails every attempt the same way.
    CompactionOperation.objects.create(
        session=session, base_version=1, position=0, kind="prune", data={"kind": "nonsense"}
    )
    worker = start_worker(
        tmp_path / "worker.log",
        extra_env={"COMPACTION_JOB_MAX_RETRIES": "2", "COMPACTION_JOB_RETRY_BACKOFF_SECONDS": "1"},
    )
    try:
        current_app.send_task("compaction.relieve_session", args=[session.pk])
        wait_until(
            lambda: "failed after 3 attempts" in worker.log(), timeout=60, what="the final failure"
        )
        time.sleep(1)
        log = worker.log()
    finally:
        stop_worker(worker)
    runs = list(CompactionRun.objects.filter(session=session))
    assert [(r.status, r.attempts) for r in runs] == [("failed", 3)], log
    assert "gave up after 3 attempts" in runs[0].error
    assert len(re.findall(r"retry: Retry in \d+s", log)) == 2, log  # Celery's own retries
    session.refresh_from_db()
    assert session.relief_requested_at is None
    assert session.relief_tried_version == session.surface_version  # not swept again
    assert session.pk not in sweep_sessions_over_threshold()


def test_a_run_left_running_past_the_job_time_limit_is_failed_by_recovery(make_agent, settings):
    settings.COMPACTION_AUTO_ENQUEUE = False  # neither ingest nor recovery publishes here
    agent = make_agent("default")
    session = session_over_threshold(agent, "orphan-1")
    run = CompactionRun.objects.create(session=session, mode="auto", task_id="lost-task")
    fresh = CompactionRun.objects.create(session=session, mode="auto", task_id="live-task")
    CompactionRun.objects.filter(pk=run.pk).update(
        started_at=timezone.now() - timedelta(seconds=settings.COMPACTION_JOB_TIME_LIMIT + 61)
    )
    # The time rule, which SQLite relies on (PostgreSQL also fails a run whose lock is free).
    recover_stale_runs()
    run.refresh_from_db()
    fresh.refresh_from_db()
    assert run.status == "failed" and "orphaned" in run.error
    assert fresh.status == "running"


@pytest.mark.skipif(
    not os.environ.get("CELERY_BROKER_URL", "").startswith("amqp"),
    reason="needs the PostgreSQL + broker stage (starts a private redis-server)",
)
def test_a_job_longer_than_the_visibility_timeout_compacts_once(
    make_agent, tmp_path: Path, settings
):
    from tests.live import private_redis

    settings.COMPACTION_AUTO_ENQUEUE = False  # only the job this test sends, on its own broker
    agent = make_agent("default")
    session = session_over_threshold(agent, "long-1")
    log_before = log_of(session)
    with private_redis() as redis:
        env = {
            "CELERY_BROKER_URL": redis.url,
            "CELERY_VISIBILITY_TIMEOUT_SECONDS": "2",
            "COMPACTION_ARCHIVE_BACKEND": "tests.support.SlowOnceArchive",
            "TEST_SLOW_ARCHIVE_MARKER": str(tmp_path / "slow-marker"),
            "TEST_SLOW_ARCHIVE_SECONDS": "8",
        }
        workers = [start_worker(tmp_path / f"worker-{i}.log", extra_env=env) for i in range(2)]
        try:
            with current_app.connection_for_write(redis.url) as conn:
                current_app.send_task(
                    "compaction.relieve_session", args=[session.pk], connection=conn
                )
            wait_until(lambda: bool(applied_runs(session)), timeout=60, what="the compaction")
            time.sleep(6)  # room for a redelivered copy to run
            logs = [w.log() for w in workers]
        finally:
            for worker in workers:
                stop_worker(worker)
    received = sum(log.count("Task compaction.relieve_session") for log in logs)
    assert received >= 2, logs  # the broker did hand the long job out again
    assert_compacted_exactly_once(session, log_before)
