"""Where each session's automatic relief stands: pending, failing or given up (D4; D5: loud).

Read only: every function here is a query, nothing is written. The states, one per session, the
first that holds:

- **given up**: the session is over its prune threshold and its last `RELIEF_RETRY_MAX_ATTEMPTS`
  automatic runs, or more, failed in a row. The sweeper tries no more; the next append asks for
  relief as usual, and a run that succeeds ends the streak.
- **failing**: over its threshold, and the latest automatic run that finished (applied, nothing
  to do, refused or failed) failed. The sweeper tries again after `retry_delay(failures)`.
- **pending**: relief is queued (`relief_requested_at` is set), or the session is over its
  threshold and not yet tried at its surface version (the sweeper or ingest will ask). A pending
  session whose relief job was asked for more than `RELIEF_PENDING_TOO_LONG_SECONDS` ago is
  also **overdue** (`relief_overdue`): its job is waiting or running too long (no worker, a
  lost publish, a summarizer that hangs). A session not yet asked has no server-time mark to
  age from; the sweeper asks for it within `COMPACTION_SWEEP_INTERVAL_SECONDS`.

"Over its threshold" is the profile's prune threshold under its effective policy, with a
transcript log to relieve (`surface_version > 0`). A run `running` or `superseded` neither
counts as a failure nor ends a streak; manual and overflow runs are not automatic relief.

The console's sessions list flags and filters with `with_relief_state` / `in_relief_state` /
`in_trouble`, its overview counts with `relief_counts`; `/metrics` exports the same counts
(`compaction.fleet_metrics`). The sweeper retries with `retry_candidates`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from compaction.models import CompactionRun
from context_core import (
    RetryDecision,
    retry_backoff_seconds,
    retry_decision,
    retry_wait_seconds,
)
from telemetry.compiled import CompiledRead, Read, Result, run_reads
from telemetry.models import AgentProfile, AgentSession, Policy
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import layered_policy

Status = CompactionRun.Status

# What ends a streak of failures: an automatic run that reached an outcome other than failing.
ENDS_STREAK = (Status.APPLIED, Status.NOOP, Status.REFUSED)

# The reason the sweeper writes on the last failed run of a session it gave up on.
GIVEN_UP = "relief given up"


class ReliefState(StrEnum):
    NONE = ""
    PENDING = "pending"
    FAILING = "failing"
    GIVEN_UP = "given_up"


class ReliefAnnotations(TypedDict):
    relief_failures: int
    relief_failed_at: datetime | None
    relief_failed_run: int | None
    relief_state: str
    relief_overdue: bool


if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    AnnotatedSession = WithAnnotations[AgentSession, ReliefAnnotations]


@dataclass(frozen=True)
class ReliefCounts:
    """One profile's sessions in each relief state."""

    pending: int = 0
    failing: int = 0
    given_up: int = 0
    # of the pending ones, those whose job was asked for too long ago (`pending_too_long`)
    overdue: int = 0

    @property
    def trouble(self) -> int:
        """Sessions an operator must look at: failing, given up, or pending too long."""
        return self.failing + self.given_up + self.overdue


def retry_delay(failures: int) -> timedelta:
    """How long after its latest failure the sweeper tries a failing session again
    (`context_core.retry_backoff_seconds` at `RELIEF_RETRY_BASE_SECONDS`). Requires failures ≥ 1."""
    base = int(settings.RELIEF_RETRY_BASE_SECONDS)
    return timedelta(seconds=retry_backoff_seconds(failures, base_seconds=base))


def pending_limit() -> timedelta:
    return timedelta(seconds=int(settings.RELIEF_PENDING_TOO_LONG_SECONDS))


def pending_too_long(asked_before: datetime | None = None) -> Q:
    """A relief job asked for more than `RELIEF_PENDING_TOO_LONG_SECONDS` ago (server time)
    and not finished: the claim ingest or the sweeper set is still held. `asked_before`: that
    moment (default: now minus the limit)."""
    if asked_before is None:
        asked_before = timezone.now() - pending_limit()
    return Q(relief_requested_at__lt=asked_before)


def profile_policies() -> dict[int, PolicyValues]:
    """Every profile's effective policy, in two queries whatever the number of profiles."""
    rows = list(Policy.objects.all())
    global_row = next((row for row in rows if row.is_global), None)
    by_profile = {row.profile_id: row for row in rows if row.profile_id is not None}
    return {
        pk: layered_policy(global_row, by_profile.get(pk))
        for pk in AgentProfile.objects.values_list("pk", flat=True)
    }


def over_threshold(policies: Mapping[int, PolicyValues] | None = None) -> Q:
    """Sessions at or above their profile's prune threshold, with a log to relieve."""
    policies = profile_policies() if policies is None else policies
    rule = Q(pk__in=[])
    for profile_id, policy in policies.items():
        rule |= Q(profile_id=profile_id, pressure__gte=policy.prune_threshold)
    return rule & Q(surface_version__gt=0)


def _failed_in_streak() -> QuerySet[CompactionRun]:
    """The session's (OuterRef "pk") failed automatic runs after its latest one that did not."""
    ended = (
        CompactionRun.objects.filter(
            session=OuterRef(OuterRef("pk")), mode=CompactionRun.Mode.AUTO, status__in=ENDS_STREAK
        )
        .order_by("-pk")
        .values("pk")[:1]
    )
    return CompactionRun.objects.filter(
        session=OuterRef("pk"),
        mode=CompactionRun.Mode.AUTO,
        status=Status.FAILED,
        pk__gt=Coalesce(Subquery(ended), Value(0)),
    )


def with_relief_state(
    sessions: QuerySet[AgentSession],
    policies: Mapping[int, PolicyValues] | None = None,
    *,
    asked_before: datetime | None = None,
) -> QuerySet[AnnotatedSession]:
    """`sessions` annotated with `relief_failures` (failed automatic runs in a row),
    `relief_failed_at` (when the latest of them finished), `relief_failed_run` (its id) and
    `relief_state` (a `ReliefState` value) and `relief_overdue` (pending too long).
    Subqueries per row: filter `sessions` first. `asked_before`: see `pending_too_long`."""
    failed = _failed_in_streak()
    over = over_threshold(policies)
    cap = int(settings.RELIEF_RETRY_MAX_ATTEMPTS)
    annotated = sessions.annotate(
        relief_failures=Coalesce(
            Subquery(
                failed.order_by().values("session").annotate(n=Count("pk")).values("n")[:1],
                output_field=IntegerField(),
            ),
            Value(0),
        ),
        relief_failed_at=Subquery(failed.order_by("-pk").values("finished_at")[:1]),
        relief_failed_run=Subquery(failed.order_by("-pk").values("pk")[:1]),
    )
    states = annotated.annotate(
        relief_state=Case(
            When(over & Q(relief_failures__gte=cap), then=Value(ReliefState.GIVEN_UP.value)),
            When(over & Q(relief_failures__gte=1), then=Value(ReliefState.FAILING.value)),
            When(
                Q(relief_requested_at__isnull=False)
                | (over & ~Q(relief_tried_version=F("surface_version"))),
                then=Value(ReliefState.PENDING.value),
            ),
            default=Value(ReliefState.NONE.value),
            output_field=CharField(),
        )
    )
    return states.annotate(
        relief_overdue=Case(
            When(
                Q(relief_state=ReliefState.PENDING.value) & pending_too_long(asked_before),
                then=Value(True),
            ),
            default=Value(False),
            output_field=BooleanField(),
        )
    )


def candidates(policies: Mapping[int, PolicyValues] | None = None) -> Q:
    """The only sessions that can be in a state other than NONE (a filter to apply first)."""
    return over_threshold(policies) | Q(relief_requested_at__isnull=False)


def in_relief_state(
    sessions: QuerySet[AgentSession],
    *states: ReliefState,
    policies: Mapping[int, PolicyValues] | None = None,
) -> QuerySet[AnnotatedSession]:
    """`sessions` in any of `states` (NONE excluded from the pre-filter), annotated as by
    `with_relief_state`: the sessions list's filter ("relief failing": FAILING, GIVEN_UP)."""
    policies = profile_policies() if policies is None else policies
    return with_relief_state(sessions.filter(candidates(policies)), policies).filter(
        Q(relief_state__in=[state.value for state in states])
    )


def in_trouble(
    sessions: QuerySet[AgentSession], policies: Mapping[int, PolicyValues] | None = None
) -> QuerySet[AnnotatedSession]:
    """`sessions` failing, given up or pending too long (the sessions list's "any trouble")."""
    return in_relief_state(
        sessions, ReliefState.FAILING, ReliefState.GIVEN_UP, ReliefState.PENDING, policies=policies
    ).filter(~Q(relief_state=ReliefState.PENDING.value) | Q(relief_overdue=True))


def session_relief_states(session_ids: Iterable[int]) -> dict[int, ReliefState]:
    """The state of each given session: one query."""
    return {pk: found.state for pk, found in session_reliefs(session_ids).items()}


@dataclass(frozen=True)
class SessionRelief:
    """Where one session's automatic relief stands, as the console shows it."""

    state: ReliefState
    overdue: bool = False
    failures: int = 0  # failed automatic runs in a row
    failed_at: datetime | None = None  # when the latest of them finished
    failed_run: int | None = None  # its id
    requested_at: datetime | None = None  # the claim of a queued or running job

    @property
    def trouble(self) -> bool:
        return self.state in (ReliefState.FAILING, ReliefState.GIVEN_UP) or self.overdue

    def retry_in_seconds(self, now: datetime) -> float | None:
        """Seconds until the sweeper tries a failing session again (0: at its next pass);
        None when it will not (given up, or not failing)."""
        if self.state != ReliefState.FAILING or self.failures < 1:
            return None
        elapsed = 0.0 if self.failed_at is None else (now - self.failed_at).total_seconds()
        return retry_wait_seconds(
            self.failures,
            elapsed_seconds=max(elapsed, 0.0),
            base_seconds=int(settings.RELIEF_RETRY_BASE_SECONDS),
            max_attempts=int(settings.RELIEF_RETRY_MAX_ATTEMPTS),
        )


def session_reliefs(
    session_ids: Iterable[int], policies: Mapping[int, PolicyValues] | None = None
) -> dict[int, SessionRelief]:
    """The relief of each given session (a page of the sessions list, one session's page):
    one query (and two for the policies unless given), its subqueries bounded by the ids."""
    rows = with_relief_state(
        AgentSession.objects.filter(pk__in=list(session_ids)), policies
    ).values_list(
        "pk",
        "relief_state",
        "relief_overdue",
        "relief_failures",
        "relief_failed_at",
        "relief_failed_run",
        "relief_requested_at",
    )
    return {
        pk: SessionRelief(ReliefState(state), bool(overdue), failures, failed_at, run, asked)
        for pk, state, overdue, failures, failed_at, run, asked in rows
    }


def relief_counts(policies: Mapping[int, PolicyValues] | None = None) -> dict[int, ReliefCounts]:
    """Sessions pending (and of them overdue), failing and given up, by profile id (profiles
    with none are left out): one aggregate query over the sessions that can be in a state.

    The statement depends only on the thresholds, the retry cap and the time pending turns
    overdue; the ORM builds it (a case per profile, several times over, and three subqueries)
    at more CPU than it takes to run, so it is compiled once per set of those
    (`telemetry.compiled`), and the overview and /metrics run it as it is."""
    (result,) = run_reads([relief_counts_read(policies)])
    return relief_counts_from(result)


def relief_counts_read(policies: Mapping[int, PolicyValues] | None = None) -> Read:
    """`relief_counts`' statement, not yet run (`telemetry.compiled.run_reads`)."""
    policies = profile_policies() if policies is None else policies
    key = (
        tuple(sorted((pk, policy.prune_threshold) for pk, policy in policies.items())),
        int(settings.RELIEF_RETRY_MAX_ATTEMPTS),
    )
    asked_before = timezone.now() - pending_limit()
    return _COUNTS.read(key, (asked_before,), lambda at: _counts_query(at, policies))


def relief_counts_from(result: Result) -> dict[int, ReliefCounts]:
    """`relief_counts` from its statement's rows."""
    counts: dict[int, dict[str, int]] = {}
    for row in result.dicts():
        by_state = counts.setdefault(row["profile_id"], {})
        by_state[row["relief_state"]] = row["n"]
        if row["relief_state"] == ReliefState.PENDING.value:
            by_state["overdue"] = row["overdue"] or 0
    return {profile_id: ReliefCounts(**by_state) for profile_id, by_state in counts.items()}


def _counts_query(asked_before: datetime, policies: Mapping[int, PolicyValues]) -> QuerySet[Any]:
    return (
        with_relief_state(
            AgentSession.objects.filter(candidates(policies)), policies, asked_before=asked_before
        )
        .exclude(relief_state=ReliefState.NONE.value)
        .values("profile_id", "relief_state")
        .annotate(
            n=Count("pk"),
            overdue=Sum(Case(When(relief_overdue=True, then=Value(1)), default=Value(0))),
        )
        .order_by()
    )


_COUNTS = CompiledRead(AgentSession)


@dataclass(frozen=True)
class RetryCandidate:
    """A failing or given-up session with no live relief claim."""

    session_id: int
    failures: int
    failed_at: datetime | None
    failed_run: int

    def decision(self, now: datetime) -> RetryDecision:
        """`context_core.retry_decision` under the settings, at `now`."""
        elapsed = 0.0 if self.failed_at is None else (now - self.failed_at).total_seconds()
        return retry_decision(
            self.failures,
            elapsed_seconds=max(elapsed, 0.0),
            base_seconds=int(settings.RELIEF_RETRY_BASE_SECONDS),
            max_attempts=int(settings.RELIEF_RETRY_MAX_ATTEMPTS),
        )


def retry_candidates(*, claimed_before: datetime, limit: int = 500) -> list[RetryCandidate]:
    """Sessions failing or given up whose relief claim is absent or older than `claimed_before`
    (a lost job), highest pressure first."""
    policies = profile_policies()
    rows = (
        with_relief_state(AgentSession.objects.filter(over_threshold(policies)), policies)
        .filter(Q(relief_state__in=[ReliefState.FAILING.value, ReliefState.GIVEN_UP.value]))
        .exclude(relief_requested_at__gte=claimed_before)
        .order_by(F("pressure").desc(), "pk")
        .values_list("pk", "relief_failures", "relief_failed_at", "relief_failed_run")[:limit]
    )
    return [RetryCandidate(*row) for row in rows]
