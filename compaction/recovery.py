"""Runs left `running` by a process that died: failed once, their session's relief asked again.

A compaction holds its session's advisory lock (`services.compaction_lock`) on its own database
connection from the moment its run row is created or resumed until it finishes, and PostgreSQL
releases that lock as soon as the connection ends: the process was killed, its host went down,
or the database restarted under it. So on PostgreSQL a run still `running` while no connection
holds its session's lock has no process left to finish it, and it is failed within one beat
interval (`COMPACTION_RECOVERY_INTERVAL_SECONDS`) and at every worker start. SQLite has no such
lock: there, as everywhere, a run is failed once it is older than the job time limit plus a
minute (Celery would have killed its job by then).

Exactly once: each stale run is failed by a conditional UPDATE (still `running`, lock still
free), and only the caller whose UPDATE matched asks for relief again. The relief job that
follows compacts once whatever else runs (the lock, the version check and the unique operation
key in `services`), so a broker that also redelivers the dead worker's job (RabbitMQ at once,
Redis after its visibility timeout) only adds a job that finds nothing left to do.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from compaction.models import CompactionRun
from compaction.services import LOCK_CLASS
from compaction.sweeper import sessions_needing_relief
from telemetry.relief_dispatch import request_relief
from telemetry.session_state import release_relief

logger = logging.getLogger("compaction")

Status = CompactionRun.Status

# A run younger than this is left alone: `_stale_run` and `record_failed_run` create a row
# and finish it a moment later without the lock (they compact nothing).
GRACE = timedelta(seconds=5)

# No connection of this database holds the run's session lock (pg_advisory_lock(int4, int4)
# shows as classid = first key, objid = second key, objsubid = 2).
_LOCK_FREE = f"""NOT EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = %s AND l.objid = "{CompactionRun._meta.db_table}"."session_id"
)"""

ERROR = "orphaned: its process stopped before the run finished"


def stale_runs() -> Q:
    """The rule: `running`, and its process is gone (PostgreSQL: the session's lock is free) or
    it has outlived the job time limit plus a minute."""
    now = timezone.now()
    limit = timedelta(seconds=int(settings.COMPACTION_JOB_TIME_LIMIT) + 60)
    rule = Q(started_at__lt=now - limit)
    if connection.vendor == "postgresql":
        lock_free = RawSQL(_LOCK_FREE, [LOCK_CLASS], output_field=BooleanField())
        rule |= Q(lock_free, started_at__lt=now - GRACE)
    return Q(rule, status=Status.RUNNING)


def fail_stale_runs() -> list[int]:
    """Record every stale run `failed`; returns the sessions of the runs this call failed."""
    sessions: list[int] = []
    candidates = CompactionRun.objects.filter(stale_runs()).values_list("pk", "session_id")
    for pk, session_id in list(candidates):
        # The rule again, in the UPDATE itself: a run resumed or finished meanwhile is skipped,
        # and of two callers only one matches.
        failed = CompactionRun.objects.filter(stale_runs(), pk=pk).update(
            status=Status.FAILED, error=ERROR, finished_at=timezone.now()
        )
        if failed:
            logger.warning("compaction run %s of session %s: %s", pk, session_id, ERROR)
            sessions.append(session_id)
    return sessions


def recover_stale_runs() -> list[int]:
    """Fail stale runs, then enqueue relief for their sessions that still need it (the dead
    job's claim is released first). Returns the sessions relief was enqueued for."""
    sessions = sorted(set(fail_stale_runs()))
    if not sessions:
        return []
    release_relief(sessions)
    return request_relief(sessions_needing_relief(only=sessions), background=False)
