"""The periodic sweeper: sessions at or above their prune threshold with no pending job.

Ingest enqueues relief after commit, but a broker outage loses that publish; this catches up.
A session already tried at its current surface version is skipped, so a surface that cannot be
relieved further is not compacted again every minute. A session whose relief *failed* is tried
again with exponential backoff until `RELIEF_RETRY_MAX_ATTEMPTS` failed in a row, then given up,
loudly (`compaction.relief_state`). The sweeper applies the threshold rule
only: proactive relief below the threshold needs the size of the latest append, which only the
append itself knows (`telemetry.session_state.refresh_projection`).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from compaction.models import CompactionRun
from compaction.relief_state import retry_candidates
from compaction.services import record_relief_given_up
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_store import effective_policy
from telemetry.relief_dispatch import request_relief
from telemetry.session_state import needing_relief, release_relief

# A claim older than this is from a job that was lost (broker restarted without it, a publish
# that hung): the longest a job may run plus five minutes (15 minutes by default).
STALE_CLAIM = timedelta(seconds=settings.COMPACTION_JOB_TIME_LIMIT + 300)


def sessions_needing_relief(limit: int = 500, *, only: list[int] | None = None) -> list[int]:
    """Sessions over their prune threshold with no live claim and no run at their version
    (of `only`, when given), highest pressure first."""
    now = timezone.now()
    tried = CompactionRun.objects.filter(
        session=OuterRef("pk"), surface_version_before=OuterRef("surface_version")
    ).exclude(status__in=[CompactionRun.Status.FAILED, CompactionRun.Status.SUPERSEDED])
    ids: list[int] = []
    for profile in AgentProfile.objects.all():
        threshold = effective_policy(profile).prune_threshold
        sessions = AgentSession.objects.filter(needing_relief(threshold), profile=profile)
        if only is not None:
            sessions = sessions.filter(pk__in=only)
        rows = (
            sessions
            # ...and, for the sweeper, no live claim and no run already at this version.
            .exclude(relief_requested_at__gt=now - STALE_CLAIM)
            .annotate(tried=Exists(tried))
            .filter(tried=False)
            .order_by(F("pressure").desc())
            .values_list("pk", flat=True)[: limit - len(ids)]
        )
        ids.extend(rows)
        if len(ids) >= limit:
            break
    return ids


def failed_relief_due() -> list[int]:
    """Sessions whose automatic relief failed, over their threshold still, whose backoff has
    passed (`context_core.retry_decision`). A session at the cap is given up instead: recorded
    on its last failed run and logged at WARNING, once (`services.record_relief_given_up`).
    A session whose surface changed since is also asked by `sessions_needing_relief`, at once,
    as any new version is (the caller drops the duplicate)."""
    now = timezone.now()
    due: list[int] = []
    for candidate in retry_candidates(claimed_before=now - STALE_CLAIM):
        decision = candidate.decision(now)
        if decision == "give_up":
            record_relief_given_up(
                session_id=candidate.session_id,
                run_id=candidate.failed_run,
                failures=candidate.failures,
            )
        elif decision == "retry":
            due.append(candidate.session_id)
    return due


def sweep_sessions_over_threshold() -> list[int]:
    # Runs whose process died are failed by `compaction.recovery` (every few seconds and at
    # worker start), which also asks relief for their sessions again.
    ids = sessions_needing_relief()
    ids += [pk for pk in failed_relief_due() if pk not in ids]
    # A stale claim is released first so request_relief can claim it again.
    release_relief(ids)
    return request_relief(ids, background=False)  # a worker task: publish here, bounded
