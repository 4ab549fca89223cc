"""Reads of automatic relief in trouble for the console: the sessions list's relief filter, the
overview's counts, and one session's relief state. The states and their rules are
`compaction.relief_state`'s (the same that `/metrics` exports); this only picks and sums."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from django.db.models import F, Q, QuerySet

from compaction.relief_state import (
    ReliefCounts,
    ReliefState,
    SessionRelief,
    in_relief_state,
    in_trouble,
    profile_policies,
    relief_counts,
    session_reliefs,
)
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_rules import PolicyValues

# The sessions list's `?relief=` values → the states each selects; "any-trouble" is failing,
# given up, or pending too long (`compaction.relief_state.in_trouble`);
# "overdue" is the pending ones whose job was asked for too long ago.
ANY_TROUBLE: Final = "any-trouble"
OVERDUE: Final = "overdue"
RELIEF_FILTERS: Final[dict[str, tuple[ReliefState, ...]]] = {
    "failing": (ReliefState.FAILING,),
    "given_up": (ReliefState.GIVEN_UP,),
    "pending": (ReliefState.PENDING,),
    OVERDUE: (ReliefState.PENDING,),
    ANY_TROUBLE: (),
}
RELIEF_FILTER_LABELS: Final = (
    (ANY_TROUBLE, "any trouble"),
    ("failing", "failing"),
    ("given_up", "given up"),
    (OVERDUE, "pending too long"),
    ("pending", "pending"),
)
TROUBLE_SHOWN: Final = 5


def relief_filter(value: str, policies: Mapping[int, PolicyValues] | None = None) -> Q:
    """The sessions list's condition for `?relief=value` ("" or unknown: none), as a plain
    `pk__in` subquery so the list's count stays unannotated. `policies`: every profile's."""
    if value not in RELIEF_FILTERS:
        return Q()
    sessions = AgentSession.objects.all()
    if value == ANY_TROUBLE:
        chosen = in_trouble(sessions, policies)
    else:
        chosen = in_relief_state(sessions, *RELIEF_FILTERS[value], policies=policies)
        if value == OVERDUE:
            chosen = chosen.filter(relief_overdue=True)
    return Q(pk__in=chosen.values("pk"))


def filter_by_relief(
    sessions: QuerySet[AgentSession],
    value: str,
    policies: Mapping[int, PolicyValues] | None = None,
) -> QuerySet[AgentSession]:
    """`sessions` narrowed by the list's `?relief=` value (unknown values narrow nothing)."""
    return sessions.filter(relief_filter(value, policies)) if value in RELIEF_FILTERS else sessions


@dataclass(frozen=True)
class TroubledSession:
    """A session in trouble as the overview links it: to its latest failed run when it has one."""

    pk: int
    external_id: str
    profile: str
    state: str
    overdue: bool
    failures: int
    failed_run: int | None


@dataclass(frozen=True)
class ReliefSummary:
    """The overview's relief counts: the fleet's, or one profile's (`profile` set), and the
    sessions in trouble at the highest pressure."""

    counts: ReliefCounts
    profile: str = ""
    worst: tuple[TroubledSession, ...] = ()


def relief_summary(
    profile_name: str = "",
    policies: Mapping[int, PolicyValues] | None = None,
    by_profile: Mapping[int, ReliefCounts] | None = None,
) -> ReliefSummary:
    """Sessions failing, given up, pending and pending too long, for the fleet or one
    profile (by name; an unknown name counts nothing), and the first `TROUBLE_SHOWN` in
    trouble. Four queries whatever the number of sessions (two fewer given `policies`: every
    profile's effective policy, as `profile_policies` reads them; one fewer given `by_profile`:
    `relief_counts` under those policies, read beforehand)."""
    policies = profile_policies() if policies is None else policies
    by_profile = relief_counts(policies) if by_profile is None else by_profile
    sessions = AgentSession.objects.all()
    if profile_name:
        profile_id = (
            AgentProfile.objects.filter(name=profile_name).values_list("pk", flat=True).first()
        )
        if profile_id is None:
            return ReliefSummary(ReliefCounts(), profile_name)
        counts = by_profile.get(profile_id, ReliefCounts())
        sessions = sessions.filter(profile_id=profile_id)
    else:
        counts = ReliefCounts(
            pending=sum(c.pending for c in by_profile.values()),
            failing=sum(c.failing for c in by_profile.values()),
            given_up=sum(c.given_up for c in by_profile.values()),
            overdue=sum(c.overdue for c in by_profile.values()),
        )
    worst: tuple[TroubledSession, ...] = ()
    if counts.trouble:
        rows = (
            in_trouble(sessions, policies)
            .order_by(F("pressure").desc(nulls_last=True), "-pk")
            .values_list(
                "pk",
                "external_id",
                "profile__name",
                "relief_state",
                "relief_overdue",
                "relief_failures",
                "relief_failed_run",
            )[:TROUBLE_SHOWN]
        )
        worst = tuple(TroubledSession(*row) for row in rows)
    return ReliefSummary(counts, profile_name, worst)


def session_relief(session: AgentSession) -> SessionRelief:
    """One session's relief state (its page): one query."""
    return session_reliefs([session.pk]).get(session.pk, SessionRelief(ReliefState.NONE))
