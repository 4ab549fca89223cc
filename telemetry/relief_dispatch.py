"""Asking for relief (D4) without importing compaction: jobs are sent by task name.

A session gets at most one pending job: a conditional UPDATE claims `relief_requested_at` and
only the sessions it claimed are published. Ingest must answer in its normal time whatever the
broker does — down, refusing, or frozen with TCP still accepting — so a web request never
publishes itself: it claims and hands the session to this process's publisher thread
(`background=True`). The thread publishes with bounded broker timeouts; when a publish fails,
or the hand-off queue is full because the broker hangs, the claim is released and the periodic
sweeper in `compaction` enqueues the session once the broker is back (a claim whose publish
hung is stale after `compaction.sweeper.STALE_CLAIM`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

from celery import current_app
from django.conf import settings
from django.db import connection

from telemetry.session_state import claim_relief, release_relief

logger = logging.getLogger(__name__)

RELIEF_TASK = "compaction.relieve_session"
QUEUE_SIZE = 1000


def request_relief(session_ids: list[int], *, background: bool = True) -> list[int]:
    """Claim relief for the given sessions that have no pending job and publish it; returns the
    claimed ids. With `background` (the web path) the publish happens on the publisher thread,
    so this never waits on the broker; without it (the sweeper, a worker) it publishes here."""
    if not settings.COMPACTION_AUTO_ENQUEUE:
        return []
    claimed_ids = []
    for session_id in session_ids:
        if not claim_relief(session_id):
            continue
        if background:
            if not _PUBLISHER.submit(session_id):
                release_claim(session_id, "the publisher queue is full (the broker is stuck)")
                continue
        elif not publish(session_id):
            continue
        claimed_ids.append(session_id)
    return claimed_ids


def publish(session_id: int) -> bool:
    """Send one relief job; on failure release the claim for the sweeper. Bounded by the broker
    settings (connection timeout, socket timeouts, publish retry policy)."""
    try:
        current_app.send_task(RELIEF_TASK, args=[session_id], retry=True)
    except Exception as exc:  # a broker outage must never fail ingest; the sweeper retries
        release_claim(session_id, str(exc))
        return False
    return True


def release_claim(session_id: int, reason: str) -> None:
    release_relief([session_id])
    logger.warning("could not enqueue relief for session %s: %s", session_id, reason)


class _Publisher:
    """One daemon thread per process that publishes what requests handed it, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.Queue[int] = queue.Queue(maxsize=QUEUE_SIZE)
        self._pid = 0

    def submit(self, session_id: int) -> bool:
        self._ensure_thread()
        try:
            self._queue.put_nowait(session_id)
        except queue.Full:
            return False
        return True

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            # first use in this process (gunicorn forks workers after import): a fresh queue
            self._queue = queue.Queue(maxsize=QUEUE_SIZE)
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="relief-publisher", daemon=True).start()

    def _run(self) -> None:
        work = self._queue
        while True:
            session_id = work.get()
            try:
                publish(session_id)
            except Exception:  # the thread must outlive any one failure (a database outage)
                logger.exception("relief publish for session %s failed", session_id)
            finally:
                if work.empty():
                    connection.close()  # hold no database connection while idle
                work.task_done()

    def pending(self) -> int:
        return self._queue.unfinished_tasks


_PUBLISHER = _Publisher()


def wait_for_publisher(timeout: float = 30) -> bool:
    """Until this process's publisher has sent everything handed to it (tests, shutdown)."""
    deadline = time.monotonic() + timeout
    while _PUBLISHER.pending():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
