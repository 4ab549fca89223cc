"""Runs left `running` by a crash are failed within a minute, and a killed worker's compaction is
completed within two, once (issue 41; `compaction.recovery`).

On PostgreSQL a run is stale when no connection holds its session's compaction lock; SQLite
keeps the time-limit rule only, so the crash and kill tests need PostgreSQL (the kill test
RabbitMQ too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F

from compaction.archives import ArchiveRequest, DatabaseArchive
from compaction.models import Archive, CompactionOperation, CompactionRun
from compaction.recovery import fail_stale_runs, recover_stale_runs
from compaction.services import LOCK_CLASS, compact_session
from telemetry.models import AgentSession
from tests.db.conftest import start_worker, stop_worker, wait_until
from tests.db.test_compaction_worker import (
    _gone,
    _slow_worker,
    amqp_only,
    applied_runs,
    assert_compacted_exactly_once,
    log_of,
    session_over_threshold,
)
from tests.support import append_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

postgres_only = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="a live run is told by its PostgreSQL advisory lock",
)


def _logged_session(agent, external_id: str) -> AgentSession:
    response = agent.post(f"/api/v1/sessions/{external_id}/messages", append_body(12))
    assert response.status_code == 201, response.content
    return AgentSession.objects.get(profile=agent.key.profile, external_id=external_id)


def _lock_holder(session_id: int) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND objsubid = 2",
            [LOCK_CLASS, session_id],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _age(run: CompactionRun, seconds: float) -> None:
    CompactionRun.objects.filter(pk=run.pk).update(
        started_at=F("started_at") - timedelta(seconds=seconds)
    )


class _HeldArchive(DatabaseArchive):
    """Says when the run reached its archive, then waits to be let go."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def archive(self, request: ArchiveRequest) -> Archive:
        self.reached.set()
        self.release.wait(30)
        return super().archive(request)


@postgres_only
def test_a_run_is_stale_only_once_no_connection_holds_its_session_lock(make_agent, settings):
    settings.COMPACTION_AUTO_ENQUEUE = False
    session = _logged_session(make_agent("default"), "held-1")
    run = CompactionRun.objects.create(session=session, mode="manual")
    _age(run, 30)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, session.pk])
    try:
        # A live compaction holds the lock (here: this connection) however long it runs.
        assert fail_stale_runs() == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, session.pk])
    young = CompactionRun.objects.create(session=session, mode="manual")
    assert fail_stale_runs() == [session.pk]
    assert fail_stale_runs() == []  # failed once: a second caller matches nothing
    run.refresh_from_db()
    young.refresh_from_db()
    assert run.status == "failed" and "orphaned" in run.error and run.finished_at is not None
    assert young.status == "running"  # within the grace a run is still taking its lock


@postgres_only
def test_a_manual_compaction_cut_off_by_a_database_crash_is_failed_within_a_minute(
    make_agent, tmp_path: Path, settings
):
    settings.COMPACTION_AUTO_ENQUEUE = False
    # A worker with beat inside, recovering every second (20 s by default).
    worker = start_worker(
        tmp_path / "worker.log",
        extra_env={"COMPACTION_RECOVERY_INTERVAL_SECONDS": "1", "COMPACTION_AUTO_ENQUEUE": "false"},
        extra_args=("--beat", "--schedule", str(tmp_path / "beat-schedule")),
    )
    try:
        session = _logged_session(make_agent("default"), "crash-1")
        archive = _HeldArchive()
        errors: list[BaseException] = []

        def compact() -> None:
            try:
                compact_session(session_id=session.pk, mode="manual", archive=archive)
            except BaseException as exc:
                errors.append(exc)
            finally:
                # the connection is already gone: that is the point
                with contextlib.suppress(DatabaseError):
                    connection.close()

        thread = threading.Thread(target=compact)
        thread.start()
        assert archive.reached.wait(30)
        run = CompactionRun.objects.get(session=session)
        holder = _lock_holder(session.pk)
        assert run.status == "running" and holder is not None
        # The database drops the compaction's connection, as a crash or restart drops them all:
        # the process cannot even record that its run failed.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [holder])
        archive.release.set()
        thread.join(30)
        assert errors and isinstance(errors[0], DatabaseError), errors
        wait_until(
            lambda: CompactionRun.objects.get(pk=run.pk).status != "running",
            timeout=60,
            what="the stale run to be failed",
        )
    finally:
        stop_worker(worker)
    run.refresh_from_db()
    assert run.status == "failed" and "orphaned" in run.error, (run.status, run.error)
    assert not CompactionOperation.objects.filter(session=session).exists()


def _purged(purged: list[int]) -> bool:
    """Purge the test queue (the only one the app knows); True once anything was purged."""
    purged.append(int(current_app.control.purge() or 0))
    return sum(purged) >= 1


@postgres_only
@amqp_only
def test_a_killed_workers_compaction_completes_within_two_minutes_once_without_redelivery(
    make_agent, tmp_path: Path
):
    """The embedded filesystem broker loses the job of a worker that died, and Redis hands it
    out again only after its visibility timeout (15 minutes by default): the queue is purged
    after the kill to stand for both. A late copy of the job (Redis's redelivery) then finds
    nothing left to do."""
    worker, marker = _slow_worker(tmp_path, "killed")
    session = session_over_threshold(make_agent("default"), "killed-1")
    log_before = log_of(session)
    try:
        wait_until(marker.exists, what="the job to reach its archive")
        child = int(marker.read_text())
        os.kill(worker.process.pid, signal.SIGKILL)
        os.kill(child, signal.SIGKILL)
        worker.process.wait(timeout=10)
        wait_until(lambda: _gone(child), what="the pool child to die")
    finally:
        stop_worker(worker)
    lost = CompactionRun.objects.get(session=session)
    assert lost.status == "running"
    purged: list[int] = []
    wait_until(
        lambda: _purged(purged),
        what="the dead worker's job back in the queue, to purge",
    )
    restarted = start_worker(
        tmp_path / "restarted.log",
        extra_env={"COMPACTION_RECOVERY_INTERVAL_SECONDS": "1"},
        extra_args=("--beat", "--schedule", str(tmp_path / "beat-schedule")),
    )
    try:
        wait_until(
            lambda: bool(applied_runs(session)), timeout=120, what="the recovered compaction"
        )
        current_app.send_task("compaction.relieve_session", args=[session.pk], task_id=lost.task_id)
        wait_until(
            lambda: (
                CompactionRun.objects.filter(task_id=lost.task_id).count() == 2
                and not CompactionRun.objects.filter(session=session, status="running").exists()
            ),
            timeout=60,
            what="the late copy of the job to run",
        )
    finally:
        stop_worker(restarted)
    assert_compacted_exactly_once(session, log_before)
    lost.refresh_from_db()
    assert lost.status == "failed" and "orphaned" in lost.error
    statuses = sorted(
        CompactionRun.objects.filter(session=session).values_list("status", flat=True)
    )
    assert statuses.count("applied") == 1 and "running" not in statuses, statuses


def test_recovery_asks_relief_again_only_for_sessions_that_still_need_it(
    make_agent, settings, monkeypatch
):
    settings.COMPACTION_AUTO_ENQUEUE = False  # ingest here enqueues nothing
    agent = make_agent("default")
    pressed = session_over_threshold(agent, "pressed-1")
    calm = _logged_session(agent, "calm-1")
    for session in (pressed, calm):
        run = CompactionRun.objects.create(session=session, mode="auto", task_id="gone")
        _age(run, settings.COMPACTION_JOB_TIME_LIMIT + 61)  # stale on SQLite too
    settings.COMPACTION_AUTO_ENQUEUE = True
    sent: list[int] = []

    def send_task(name: str, args: list[int] | None = None, **_: object) -> None:
        assert name == "compaction.relieve_session"
        sent.extend(args or [])

    monkeypatch.setattr(current_app, "send_task", send_task)
    assert recover_stale_runs() == [pressed.pk]
    assert sent == [pressed.pk]
    assert recover_stale_runs() == []
    assert sent == [pressed.pk]
