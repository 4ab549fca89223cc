"""Asking for relief (D4) without importing compaction: jobs are sent by task name.

A session gets at most one pending job: a conditional UPDATE claims `relief_requested_at` and
only the sessions it claimed are published. Ingest must answer even when the broker is down: the
publish is bounded (the broker settings cap connection time and retries); on failure the claim is
released so the periodic sweeper in `compaction` enqueues the session once the broker is back.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.conf import settings
from django.utils import timezone

from telemetry.models import AgentSession

logger = logging.getLogger(__name__)

RELIEF_TASK = "compaction.relieve_session"


def request_relief(session_ids: list[int]) -> list[int]:
    """Enqueue relief for the given sessions that have no pending job; returns those enqueued."""
    if not settings.COMPACTION_AUTO_ENQUEUE:
        return []
    enqueued = []
    for session_id in session_ids:
        claimed = AgentSession.objects.filter(
            pk=session_id, relief_requested_at__isnull=True
        ).update(relief_requested_at=timezone.now())
        if not claimed:
            continue
        try:
            current_app.send_task(RELIEF_TASK, args=[session_id], retry=True)
        except Exception as exc:  # a broker outage must never fail ingest; the sweeper retries
            AgentSession.objects.filter(pk=session_id).update(relief_requested_at=None)
            logger.warning("could not enqueue relief for session %s: %s", session_id, exc)
            continue
        enqueued.append(session_id)
    return enqueued
