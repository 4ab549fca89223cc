"""Compaction as a service (D4, D5): the one write path of compaction runs and operations.

`compact_session` plans with the pure core, archives first, then applies under a check that no
other operation was stored since it planned (messages appended meanwhile follow the relieved
surface: they never supersede it). The manual/automatic difference on archive failure (D5)
is one branch here: manual refuses and changes nothing; automatic and overflow compact anyway
with one loud ERROR line, and the run row records it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from compaction.archives import ArchiveBackend, ArchiveRequest, archive_backend, log_entries
from compaction.cache_report import session_pricing
from compaction.calibration import (
    compaction_estimate,
    estimate_appended,
    next_round_tokens,
    session_calibration,
)
from compaction.errors import (
    CompactionBusy,
    CompactionRefused,
    OverflowBusy,
    OverflowUnrecoverable,
)
from compaction.models import CompactionOperation, CompactionRun, OverflowEvent, Surface
from compaction.plans import relief_policy
from compaction.relief_state import GIVEN_UP
from compaction.summarizers import LLMSummarizer, SummarizerError
from compaction.transcripts import derive, load_log, load_operations, store_surface
from context_core import (
    Calibration,
    ExtractiveSummarizer,
    Message,
    Operation,
    ReliefPlan,
    Summarizer,
    derive_surface,
    plan_relief,
)
from context_core import Surface as CoreSurface
from telemetry.database_errors import note_fault, public_text
from telemetry.errors import FieldError
from telemetry.learned_window import learn_window_from_overflow
from telemetry.models import AgentSession
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy
from telemetry.session_state import (
    give_up_relief,
    lock_session,
    mark_relief_tried,
    record_compaction_result,
    release_relief,
)

Status = CompactionRun.Status
Action = CompactionRun.Action
Kind = CompactionOperation.Kind
logger = logging.getLogger("compaction")

# The services' input type (mypy checks every call); stored as `CompactionRun.Mode`, the same
# values (tests/db/test_status_choices.py).
Mode = Literal["manual", "auto", "overflow"]
# A forced plan ignores the thresholds and the worth-it rule (manual and overflow, D4).
_PLAN_MODE = {"manual": "forced", "overflow": "forced", "auto": "normal"}
LOCK_CLASS = 0x636F6D70  # "comp": the advisory-lock namespace of compaction (and recovery)


@dataclass(frozen=True)
class RunOutcome:
    run: CompactionRun
    surface: Surface | None


@contextmanager
def compaction_lock(session_id: int) -> Iterator[bool]:
    """One compaction at a time per session.

    PostgreSQL: a session-level advisory lock, released by the server if the process dies.
    SQLite has none; there the unique operation key and the version check under the IMMEDIATE
    write transaction make a second concurrent pass fail to apply instead.
    """
    if connection.vendor != "postgresql":
        yield True
        return
    if settings.DATABASE_POOLER == "pgbouncer-transaction":
        with _transaction_lock(session_id) as acquired:
            yield acquired
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, session_id])
        acquired = bool(cursor.fetchone()[0])
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, session_id])


@contextmanager
def _transaction_lock(session_id: int) -> Iterator[bool]:
    """The compaction lock behind a transaction-mode pooler, where a session-level lock could be
    released on another server connection than took it (or outlive the compaction there).

    A connection of its own opens a transaction and takes the same lock at transaction level;
    the pooler keeps that transaction on one server connection until it ends, and closing the
    connection ends it (the lock goes with it, also when the process dies). `pg_locks` shows it
    like the session-level one, so `compaction.recovery` reads both alike.
    """
    raw = psycopg.connect(**connection.get_connection_params())
    try:
        with raw.cursor() as cursor:  # psycopg opens the transaction (no autocommit)
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_CLASS, session_id])
            row = cursor.fetchone()
        acquired = bool(row and row[0])
        if not acquired:
            # Given back at once: a held transaction pins one of the pool's server connections,
            # and the compaction refused here still needs one to record why.
            _end(raw)
        yield acquired
    finally:
        _end(raw)


def _end(raw: psycopg.Connection[Any]) -> None:
    """End the lock's transaction (released once the server answers, not when it notices the
    closed socket) and close its connection."""
    if raw.closed:
        return
    try:
        raw.rollback()
    finally:
        raw.close()


def configured_summarizer() -> Summarizer:
    """The extractive default, or an LLM endpoint when COMPACTION_SUMMARIZER_URL is set."""
    if settings.COMPACTION_SUMMARIZER_URL:
        return LLMSummarizer(
            api=settings.COMPACTION_SUMMARIZER_API,  # type: ignore[arg-type]
            base_url=settings.COMPACTION_SUMMARIZER_URL,
            model=settings.COMPACTION_SUMMARIZER_MODEL,
            api_key=settings.COMPACTION_SUMMARIZER_KEY,
        )
    return ExtractiveSummarizer()


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _finish(run: CompactionRun, status: CompactionRun.Status, **fields: object) -> CompactionRun:
    run.status = status
    for name, value in fields.items():
        setattr(run, name, value)
    run.finished_at = timezone.now()
    run.save()
    return run


def compact_session(
    *,
    session_id: int,
    mode: Mode,
    trigger: str = "",
    requested_by: str = "",
    expected_version: int | None = None,
    task_id: str = "",
    attempts: int = 1,
    archive: ArchiveBackend | None = None,
) -> RunOutcome:
    """Plan, archive (to `archive`, else the configured backend), apply. Returns the run and the surface after it.

    Raises CompactionRefused (manual, archive failed: nothing changed) and CompactionBusy (another
    compaction of the session holds the lock, or the surface moved past `expected_version`).
    A job that runs twice does the work once: the second pass plans on the new surface, and two
    passes planned on the same operations cannot both apply (the operations are counted under
    the session lock before the apply, and the unique operation key backs it).
    """
    session = AgentSession.objects.select_related("profile").get(pk=session_id)
    with compaction_lock(session.pk) as acquired:
        # Created (or resumed) under the lock: a `running` run whose session lock no connection
        # holds has lost its process (compaction.recovery).
        run = _retried_run(session, task_id, attempts) or CompactionRun.objects.create(
            session=session,
            mode=mode,
            trigger=trigger,
            requested_by=requested_by,
            task_id=task_id,
            attempts=attempts,
        )
        if not acquired:
            _finish(run, Status.SUPERSEDED, reason="another compaction of this session is running")
            raise CompactionBusy(run)
        try:
            return _compact_locked(session, run, mode, expected_version, archive)
        except (CompactionRefused, CompactionBusy):
            raise
        except Exception as exc:
            # Nothing was applied (the apply step is one transaction); the run says why.
            _finish(run, Status.FAILED, error=public_text(exc))
            if isinstance(exc, SummarizerError):
                exc.run_id = run.pk  # the caller shows this run, not the latest failed one
            raise


def _retried_run(session: AgentSession, task_id: str, attempts: int) -> CompactionRun | None:
    """A Celery retry of a job continues the run its failed attempt left: one record per job."""
    if not task_id or attempts <= 1:
        return None
    run = CompactionRun.objects.filter(session=session, task_id=task_id).order_by("-pk").first()
    if run is None or run.status != Status.FAILED:
        return None
    run.status, run.attempts, run.error, run.finished_at = Status.RUNNING, attempts, "", None
    run.save(update_fields=["status", "attempts", "error", "finished_at"])
    return run


@dataclass(frozen=True)
class _Planned:
    """A plan and what it was made on: the surface row, the log's length and the operations
    then in force. The plan's operations name seqs of that log only."""

    plan: ReliefPlan
    state: Surface
    log_messages: int
    operations: int
    policy: PolicyValues
    calibration: Calibration
    surface: CoreSurface


def _compact_locked(
    session: AgentSession,
    run: CompactionRun,
    mode: Mode,
    expected_version: int | None,
    backend: ArchiveBackend | None,
) -> RunOutcome:
    """Plan, archive, apply, record: the steps of one run (the caller holds the lock)."""
    state = Surface.objects.filter(session=session).first()
    if state is None:
        _finish(
            run,
            Status.NOOP,
            action=Action.NOTHING,
            reason="the session has no transcript log to compact",
        )
        return RunOutcome(run, None)
    if expected_version is not None and expected_version != state.version:
        _finish(
            run,
            Status.SUPERSEDED,
            reason=f"the surface is at version {state.version}, not {expected_version}",
            surface_version_before=state.version,
        )
        raise CompactionBusy(run)
    planned = _plan(session, run, mode, state)
    if planned.plan.action == "nothing" or not planned.plan.operations:
        return RunOutcome(_finish(run, Status.NOOP, tokens_after=planned.plan.tokens_before), state)
    _archive(session, run, mode, state, backend)
    return _apply(session, run, planned)


def _plan(session: AgentSession, run: CompactionRun, mode: Mode, state: Surface) -> _Planned:
    """Plan on the log as it is now; record the plan's figures on the run."""
    policy = effective_policy(session.profile)
    started = time.monotonic()
    log, operations, surface = derive(session)
    if len(log) > state.log_messages:
        # Appended after `state` was read: plan on what the archive will hold.
        log = log[: state.log_messages]
        surface = derive_surface(log, operations)
    # D1: the worth-it rule and the run's predicted figures use the model's real cache rates and
    # the session's typical remaining calls (compaction.cache_report).
    pricing = session_pricing(session, policy, _measured_tokens(session) or surface.tokens)
    calibration = session_calibration(session)
    plan = plan_relief(
        surface,
        policy=relief_policy(policy, session.window_tokens),
        mode=_PLAN_MODE[mode],  # type: ignore[arg-type]
        summarizer=configured_summarizer(),
        calibration=calibration,
        context_tokens=_measured_tokens(session),
        pricing=pricing.pricing,
        # The agent's next round lands before this job's next chance (proactive relief).
        growth_tokens=next_round_tokens(calibration, surface),
    )
    run.action = plan.action
    run.reason = plan.reason
    run.tokens_before = plan.tokens_before
    run.tokens_after = plan.tokens_after
    run.skipped = list(plan.skipped)
    if plan.operations and plan.economics is not None:
        run.rewrite_tokens = plan.cache_write_tokens
        run.break_even_calls = plan.economics.break_even_calls
        run.remaining_calls = pricing.pricing.horizon_calls
        if pricing.priced:
            run.rewrite_premium_usd = plan.economics.rewrite_premium_usd
            run.saving_per_call_usd = plan.economics.saving_per_call_usd
    run.surface_version_before = state.version
    run.plan_ms = _ms(started)
    return _Planned(plan, state, len(log), len(operations), policy, calibration, surface)


def _archive(
    session: AgentSession,
    run: CompactionRun,
    mode: Mode,
    state: Surface,
    backend: ArchiveBackend | None,
) -> None:
    """Archive the log and the surface the plan was made on. D5: manual refuses when this
    fails (CompactionRefused, nothing changed); automatic and overflow go on with one ERROR."""
    started = time.monotonic()
    try:
        archive = (backend or archive_backend()).archive(
            ArchiveRequest(
                session=session,
                format=state.format,
                log=log_entries(session, state.log_messages),
                surface_version=state.version,
                surface_body=state.body,
            )
        )
    except Exception as exc:  # any backend failure: the branch below decides (D5)
        run.archive_ms = _ms(started)
        # public_text: a database error's text names server files; only the log keeps it whole
        if note_fault(exc, f"archive of session {session.pk}") is None:
            logger.warning("archive of session %s failed: %r", session.pk, exc)
        run.archive_error = public_text(exc)
        if mode == "manual":
            # D5: the manual path is never lossy — refuse, change nothing.
            _finish(
                run, Status.REFUSED, reason=f"archive failed, nothing changed: {run.archive_error}"
            )
            raise CompactionRefused(run, run.reason) from exc
        # D5: the automatic path compacts even when the archive fails (safety valve).
        logger.error(
            "compaction of session %s (%s) proceeds WITHOUT an archive: %s",
            session.pk,
            f"{session.profile.name}/{session.external_id}",
            run.archive_error,
        )
    else:
        run.archive_ms = _ms(started)
        run.archived = True
        run.archive = archive


def _apply(session: AgentSession, run: CompactionRun, planned: _Planned) -> RunOutcome:
    """Append the plan's operations and store the surface they derive, in one transaction.

    Messages the agent appended since the plan do not supersede it: the operations name only
    seqs the plan saw, which an append never changes, so on the grown log they derive the
    planned surface followed by the new messages (a property of `derive_surface`, tested in
    tests/unit/core). Only another change of the operations (a compaction, the agent's own
    cut) does: the plan was made without it.
    """
    started = time.monotonic()
    state, plan = planned.state, planned.plan
    try:
        with transaction.atomic():
            lock_session(session.pk)
            current = Surface.objects.get(session=session)
            operations = load_operations(session)
            if len(operations) != planned.operations:
                return RunOutcome(
                    _finish(
                        run,
                        Status.SUPERSEDED,
                        reason=f"{run.reason}; the operations changed (surface v{current.version})",
                    ),
                    current,
                )
            CompactionOperation.objects.bulk_create(
                CompactionOperation(
                    session=session,
                    run=run,
                    base_version=state.version,
                    position=position,
                    kind=Kind.PRUNE
                    if operation.to_dict()["kind"] == Kind.PRUNE
                    else Kind.SUMMARIZE,
                    data=operation.to_dict(),
                )
                for position, operation in enumerate(plan.operations)
            )
            log = load_log(session)
            new_surface = derive_surface(log, [*operations, *plan.operations])
            new_state = store_surface(session, current.format, new_surface, bump=True)
            _record(session, run, planned, log, operations, new_surface)
            run.surface_version_after = new_state.version
            run.apply_ms = _ms(started)
            # under the session's lock no turn can arrive: this is what the server had received
            run.turn_received = (
                AgentSession.objects.filter(pk=session.pk)
                .values_list("last_turn", flat=True)
                .first()
            )
            _finish(run, Status.APPLIED)
    except IntegrityError:
        # Another pass planned on the same version applied first (unique operation key).
        run.refresh_from_db()
        return RunOutcome(
            _finish(run, Status.SUPERSEDED, reason=f"{run.reason}; another pass applied first"),
            Surface.objects.get(session=session),
        )
    return RunOutcome(run, new_state)


def _record(
    session: AgentSession,
    run: CompactionRun,
    planned: _Planned,
    log: list[Message],
    operations: list[Operation],
    new_surface: CoreSurface,
) -> None:
    """D6: the post-compaction estimate replaces the stale projection. It is the plan's one
    estimate (`GET …/compact/plan` shows the same, `compaction_estimate`) of the snapshot the
    plan saw; what the agent appended since rides on both sides and is added at the session's
    learned rates."""
    appended = log[planned.log_messages :]
    after = (
        derive_surface(log[: planned.log_messages], [*operations, *planned.plan.operations])
        if appended
        else new_surface
    )
    estimate = compaction_estimate(
        session, before=planned.surface, after=after, tokens_before=planned.plan.tokens_before
    )
    # tokens_after is the plan's figure (the snapshot); the estimate adds the appended messages
    run.tokens_after = estimate.tokens
    tokens = estimate.tokens + estimate_appended(session, appended)
    run.estimate_tokens, run.estimate_method = tokens, estimate.method
    record_compaction_result(session, tokens_after=tokens, policy=planned.policy)


def _measured_tokens(session: AgentSession) -> int | None:
    """D6: the projected next request when telemetry has one (system prompt and tools included,
    which the log lacks); None lets the planner estimate from the surface."""
    return session.projected_tokens


def relieve_session(
    *,
    session_id: int,
    task_id: str = "",
    attempts: int = 1,
    archive: ArchiveBackend | None = None,
) -> RunOutcome | None:
    """The automatic job (D4, D5): re-read the session, plan in normal mode, archive, compact.

    A redelivered job (worker lost) first marks its own unfinished run failed; the retry then
    plans on the current surface, so the work happens once.
    """
    if task_id:
        CompactionRun.objects.filter(task_id=task_id, status=Status.RUNNING).update(
            status=Status.FAILED,
            error="worker lost before the run finished; redelivered",
            finished_at=timezone.now(),
        )
    try:
        outcome = compact_session(
            session_id=session_id,
            mode="auto",
            trigger="pressure",
            requested_by="worker",
            task_id=task_id,
            attempts=attempts,
            archive=archive,
        )
    except CompactionBusy:
        return None
    finally:
        release_relief([session_id])
    if outcome.run.surface_version_before is not None:
        mark_relief_tried(session_id, outcome.run.surface_version_before)
    return outcome


def record_failed_run(
    *, session_id: int, error: str, task_id: str = "", attempts: int = 1
) -> CompactionRun:
    """A job that gave up: an operator sees a `failed` run with the error."""
    CompactionRun.objects.filter(task_id=task_id, status=Status.RUNNING).exclude(task_id="").update(
        status=Status.FAILED, error=error, finished_at=timezone.now()
    )
    run = (
        CompactionRun.objects.filter(task_id=task_id, status=Status.FAILED)
        .exclude(task_id="")
        .last()
    )
    if run is None:
        run = CompactionRun.objects.create(
            session_id=session_id,
            mode="auto",
            trigger="pressure",
            requested_by="worker",
            task_id=task_id,
        )
        _finish(run, Status.FAILED, error=error, attempts=attempts)
    else:
        CompactionRun.objects.filter(pk=run.pk).update(error=error, attempts=attempts)
    give_up_relief(session_id)
    return run


def record_relief_given_up(*, session_id: int, run_id: int, failures: int) -> bool:
    """The sweeper gives up on a session's relief: the reason on its last failed run says so,
    and one WARNING line. Once per run: of two sweepers only the one whose conditional UPDATE
    matched the reason it read records and logs it. Returns whether this call recorded it."""
    reason = CompactionRun.objects.filter(pk=run_id).values_list("reason", flat=True).first()
    if reason is None or reason.startswith(GIVEN_UP):
        return False
    given_up = (
        f"{GIVEN_UP} after {failures} failed automatic reliefs in a row; the sweeper tries no"
        " more (the next append asks again, and a relief that succeeds clears this)"
    )
    recorded = CompactionRun.objects.filter(pk=run_id, reason=reason).update(
        reason=f"{given_up}; {reason}" if reason else given_up
    )
    if recorded:
        logger.warning(
            "automatic relief of session %s given up after %s failed runs in a row (run %s)",
            session_id,
            failures,
            run_id,
        )
    return bool(recorded)


def report_overflow(
    *, session: AgentSession, surface_version: int | None, detail: str = ""
) -> RunOutcome:
    """D4: the provider rejected a request as too long. Forced compaction now, counted once per
    surface version; a second report on a version already relieved raises OverflowUnrecoverable
    and applies nothing (OverflowBusy while another compaction runs), a version ahead of the
    session's a FieldError on `surface_version`. A limit stated in `detail` (the provider's
    error text) becomes the session's window before planning, so the compaction aims at the real
    wall."""
    state = Surface.objects.filter(session=session).first()
    version = state.version if state is not None else 0
    if surface_version is not None and surface_version > version:
        # refused before anything is learned or stored (the window from `detail` included)
        raise FieldError(
            "surface_version", f"{surface_version} is ahead of the session's ({version})"
        )
    learn_window_from_overflow(session, detail)
    reported = version if surface_version is None else surface_version
    if surface_version is not None and surface_version < version:
        # The surface already changed since that request; the agent should retry on the new one.
        OverflowEvent.objects.create(session=session, surface_version=reported, detail=detail)
        return RunOutcome(_stale_run(session, reported, version), state)
    if OverflowEvent.objects.filter(
        session=session, surface_version=reported, recovered=True
    ).exists():
        OverflowEvent.objects.create(session=session, surface_version=reported, detail=detail)
        raise OverflowUnrecoverable(
            f"the surface at version {reported} was already compacted after an overflow; it cannot shrink further safely"
        )
    try:
        outcome = compact_session(
            session_id=session.pk,
            mode="overflow",
            trigger="context_length_exceeded",
            requested_by="agent",
        )
    except CompactionBusy as exc:
        raise OverflowBusy(str(exc)) from exc
    try:
        OverflowEvent.objects.create(
            session=session,
            surface_version=reported,
            recovered=True,
            run=outcome.run,
            detail=detail,
        )
    except IntegrityError:
        raise OverflowUnrecoverable(
            f"an overflow on surface version {reported} was already handled"
        ) from None
    return outcome


def _stale_run(session: AgentSession, reported: int, current: int) -> CompactionRun:
    run = CompactionRun.objects.create(
        session=session,
        mode="overflow",
        trigger="context_length_exceeded",
        requested_by="agent",
    )
    return _finish(
        run,
        Status.NOOP,
        action=Action.NOTHING,
        reason=f"the overflow was on version {reported}; the surface is already at {current}",
        surface_version_before=current,
    )
