"""After an ingest commits, ask a worker to evaluate the per-session rules of the sessions it
touched — never on the request path.

The listener only checks (remembered for a few seconds) that a per-session rule is enabled and
hands the ids to this process's publisher thread, which coalesces them and sends one
`alerts.evaluate_sessions` job per batch with the broker's bounded timeouts. A full hand-off
queue or a broker outage drops the nudge: beat's pass evaluates sessions reported since its
last run anyway, so an alert is late, never lost, and ingest never waits.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

from celery import current_app
from django.conf import settings

from telemetry.changes import sessions_changed

logger = logging.getLogger(__name__)

EVALUATE_TASK = "alerts.evaluate_sessions"
RULES_SECONDS = 5.0

_rules_checked = (0.0, False)


def forget_rules() -> None:
    global _rules_checked
    _rules_checked = (0.0, False)


def _session_rules_exist() -> bool:
    global _rules_checked
    at, exists = _rules_checked
    now = time.monotonic()
    if now - at < RULES_SECONDS:
        return exists
    from alerts.evaluation import INGEST_METRICS
    from alerts.models import AlertRule

    exists = AlertRule.objects.filter(enabled=True, metric__in=INGEST_METRICS).exists()
    _rules_checked = (now, exists)
    return exists


def on_sessions_changed(sender: Any, session_ids: list[int], **_: Any) -> None:
    if not settings.ALERTS_NUDGE or not _session_rules_exist():
        return
    _PUBLISHER.submit(session_ids)


class _Publisher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.Queue[list[int]] = queue.Queue(maxsize=1000)
        self._pid = 0

    def submit(self, session_ids: list[int]) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="alerts-nudge", daemon=True).start()
        try:
            self._queue.put_nowait(list(session_ids))
        except queue.Full:
            logger.warning("alert nudge dropped (the broker is stuck); beat evaluates later")

    def _run(self) -> None:
        while True:
            ids = set(self._queue.get())
            while len(ids) < 1000:
                try:
                    ids.update(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                current_app.send_task(EVALUATE_TASK, args=[sorted(ids)], retry=True)
            except Exception as exc:  # never fails ingest; beat catches up
                logger.warning("could not enqueue alert evaluation: %s", exc)


_PUBLISHER = _Publisher()


def connect_ingest_nudge() -> None:
    sessions_changed.connect(on_sessions_changed, dispatch_uid="alerts-nudge")
