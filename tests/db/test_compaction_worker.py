"""Automatic compaction through a real Celery worker process on a real broker.

Kills use SIGKILL on the worker's main process and, separately, on its pool child; the broker
must then redeliver the unacknowledged job (acks_late, reject_on_worker_lost). Kombu's
filesystem transport (the embedded default) cannot redeliver a job whose consumer died, so the
kill tests run where the broker is AMQP (`make test`'s RabbitMQ stage).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.conf import settings
from kombu import pools as kombu_pools

from compaction.models import Archive, CompactionOperation, CompactionRun, LogMessage, Surface
from telemetry.models import AgentSession
from telemetry.relief_dispatch import wait_for_publisher
from tests.db.conftest import start_worker, stop_worker, wait_until
from tests.db.test_compaction_api import assert_surface_is_derived_from_the_log
from tests.support import append_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

amqp_only = pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("amqp"),
    reason="redelivery after a killed worker needs an AMQP broker (filesystem transport has no acks)",
)


def pressure_record(session_id: str, context: int = 150_000) -> dict[str, Any]:
    """A call whose context puts the session at ~0.83 of a 200k window (16k reserved)."""
    return {
        "session_id": session_id,
        "turn": 0,
        "model": "claude-sonnet-4-5-20250929",
        "usage": {
            "input_tokens": 2_000,
            "cache_read_input_tokens": context - 2_000,
            "cache_creation_input_tokens": 0,
            "output_tokens": 500,
        },
        "appended_chars": 0,
    }


def session_over_threshold(agent, session_id: str = "auto-1") -> AgentSession:
    assert agent.post(f"/api/v1/sessions/{session_id}/messages", append_body(12)).status_code == 201
    response = agent.post("/api/v1/telemetry", pressure_record(session_id))
    assert response.status_code == 201, response.content
    assert response.json()["sessions"][0]["pressure"] >= 0.6
    return AgentSession.objects.get(profile=agent.key.profile, external_id=session_id)


def applied_runs(session: AgentSession) -> list[CompactionRun]:
    return list(CompactionRun.objects.filter(session=session, status="applied"))


def assert_compacted_exactly_once(session: AgentSession, log_before: list[tuple[int, str]]) -> None:
    runs = applied_runs(session)
    assert len(runs) == 1, list(CompactionRun.objects.values("status", "error"))
    assert CompactionOperation.objects.filter(session=session).values("run").distinct().count() == 1
    assert Archive.objects.filter(session=session, log_messages=len(log_before)).count() == 1
    assert (
        list(LogMessage.objects.filter(session=session).order_by("seq").values_list("seq", "raw"))
        == log_before
    )
    assert_surface_is_derived_from_the_log(session)


def log_of(session: AgentSession) -> list[tuple[int, str]]:
    return list(
        LogMessage.objects.filter(session=session).order_by("seq").values_list("seq", "raw")
    )


def test_ingest_over_threshold_enqueues_relief_and_the_worker_compacts_archive_first(
    celery_worker, make_agent
):
    agent = make_agent("default")
    session = session_over_threshold(agent)
    log_before = log_of(session)
    wait_until(lambda: bool(applied_runs(session)), what="an applied automatic compaction")
    run = applied_runs(session)[0]
    assert run.mode == "auto" and run.archived is True
    session.refresh_from_db()
    assert session.relief_requested_at is None
    assert session.pressure is not None and session.pressure < 0.83
    assert_compacted_exactly_once(session, log_before)


def test_automatic_compaction_with_a_failing_archive_compacts_and_logs_one_error(
    make_agent, tmp_path: Path, client
):
    worker = start_worker(
        tmp_path / "worker.log",
        extra_env={"COMPACTION_ARCHIVE_BACKEND": "compaction.archives.FailingArchive"},
    )
    try:
        agent = make_agent("default")
        session = session_over_threshold(agent)
        wait_until(lambda: bool(applied_runs(session)), what="an applied automatic compaction")
        run = applied_runs(session)[0]
        assert run.archived is False and "unavailable" in run.archive_error
        wait_until(lambda: "WITHOUT an archive" in worker.log(), what="the error line")
    finally:
        stop_worker(worker)
    error_lines = [line for line in worker.log().splitlines() if re.search(r"\bERROR\b", line)]
    assert len(error_lines) == 1, error_lines
    assert f"session {session.pk}" in error_lines[0]
    metrics = client.get("/metrics").content.decode()
    assert 'compaction_archive_failures_total{mode="auto"} 1.0' in metrics
    assert not Archive.objects.exists()
    assert_surface_is_derived_from_the_log(session)


def _slow_worker(tmp_path: Path, name: str, seconds: int = 600) -> tuple[Any, Path]:
    marker = tmp_path / f"{name}.marker"
    worker = start_worker(
        tmp_path / f"{name}.log",
        extra_env={
            "COMPACTION_ARCHIVE_BACKEND": "tests.support.SlowOnceArchive",
            "TEST_SLOW_ARCHIVE_MARKER": str(marker),
            "TEST_SLOW_ARCHIVE_SECONDS": str(seconds),
        },
    )
    return worker, marker


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" in status.read_text()


@amqp_only
def test_main_process_killed_mid_compaction_the_job_completes_once_after_a_restart(
    make_agent, tmp_path: Path
):
    worker, marker = _slow_worker(tmp_path, "main")
    agent = make_agent("default")
    session = session_over_threshold(agent)
    log_before = log_of(session)
    try:
        wait_until(marker.exists, what="the job to reach its archive")
        child = int(marker.read_text())
        # A crash of the whole worker host: the main process and its pool child die at once.
        os.kill(worker.process.pid, signal.SIGKILL)
        os.kill(child, signal.SIGKILL)
        worker.process.wait(timeout=10)
        wait_until(lambda: _gone(child), what="the pool child to die")
        assert not applied_runs(session)
    finally:
        stop_worker(worker)
    restarted = start_worker(tmp_path / "restarted.log")
    try:
        wait_until(lambda: bool(applied_runs(session)), timeout=60, what="the redelivered job")
        time.sleep(1)
    finally:
        stop_worker(restarted)
    assert_compacted_exactly_once(session, log_before)
    lost = CompactionRun.objects.filter(session=session, status="failed")
    assert lost.count() == 1 and "worker lost" in lost.get().error


@amqp_only
def test_only_the_main_process_killed_mid_compaction_the_work_is_still_done_once(
    make_agent, tmp_path: Path
):
    """SIGKILL to the main process alone: the broker redelivers the job to a restarted worker
    while the orphaned pool child may still be finishing the same compaction. Whichever gets
    there, the work happens once (advisory lock, version check, unique operation key)."""
    worker, marker = _slow_worker(tmp_path, "orphan", seconds=8)
    agent = make_agent("default")
    session = session_over_threshold(agent)
    log_before = log_of(session)
    try:
        wait_until(marker.exists, what="the job to reach its archive")
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
    finally:
        stop_worker(worker)
    restarted = start_worker(tmp_path / "after-orphan.log")
    try:
        wait_until(lambda: bool(applied_runs(session)), timeout=90, what="the compaction")
        child = int(marker.read_text())
        wait_until(lambda: _gone(child), timeout=60, what="the orphaned child to finish")
        time.sleep(1)
    finally:
        stop_worker(restarted)
    assert_compacted_exactly_once(session, log_before)


@amqp_only
def test_pool_child_killed_mid_compaction_the_job_completes_once(make_agent, tmp_path: Path):
    worker, marker = _slow_worker(tmp_path, "child")
    agent = make_agent("default")
    session = session_over_threshold(agent)
    log_before = log_of(session)
    try:
        wait_until(marker.exists, what="the job to reach its archive")
        child = int(marker.read_text())
        assert child in _children(worker.process.pid)
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: bool(applied_runs(session)), timeout=60, what="the requeued job")
        time.sleep(1)
    finally:
        stop_worker(worker)
    assert_compacted_exactly_once(session, log_before)


def _reset_producer_pool() -> None:
    """Make the next publish connect afresh with the current broker settings."""
    app: Any = current_app
    app.pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    kombu_pools.reset()


def test_broker_down_during_ingest_ingest_answers_and_the_sweeper_compacts_when_it_is_back(
    celery_worker, make_agent
):
    conf = current_app.conf
    saved = conf.broker_write_url
    # The web process's broker goes away: nothing listens on port 9 (publishing uses the write URL).
    conf.update(CELERY_BROKER_WRITE_URL="amqp://guest:guest@127.0.0.1:9//")
    _reset_producer_pool()
    try:
        agent = make_agent("default")
        started = time.monotonic()
        session = session_over_threshold(agent)
        assert time.monotonic() - started < 30
        assert wait_for_publisher(timeout=60)  # the publish happens off the request path
        session.refresh_from_db()
        assert session.relief_requested_at is None  # the claim was released for the sweeper
    finally:
        conf.update(CELERY_BROKER_WRITE_URL=saved)
        _reset_producer_pool()
    time.sleep(1)
    assert not applied_runs(session)
    current_app.send_task("compaction.sweep")
    wait_until(lambda: bool(applied_runs(session)), timeout=60, what="the sweeper's compaction")
    assert_compacted_exactly_once(session, log_of(session))
    assert Surface.objects.get(session=session).version == 2
