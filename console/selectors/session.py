"""Reads of one session: the session with its policy and live version, its per-turn series for
the charts, its turns table and the compactions applied to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, cast

from django.core.paginator import Page, Paginator
from django.db.models import Count, FloatField, Max, Min, OuterRef, Subquery
from django.db.models.functions import Cast
from django.http import Http404

from compaction.models import CompactionRun
from console.selectors.policies import load_policies
from console.selectors.session_list import digest
from telemetry.models import AgentSession, ContextEvent, LLMCall, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.usage import BUCKETS

TURNS_PER_PAGE: Final = 25


def session_or_404(pk: int) -> AgentSession:
    """The session with its profile (one query), or the console's 404."""
    session = AgentSession.objects.select_related("profile").filter(pk=pk).first()
    if session is None:
        raise Http404("no such session")
    return session


def session_detail(pk: int) -> tuple[AgentSession, PolicyValues, str] | None:
    """The session, its profile's effective policy and a version key of what the live fragment
    shows (figures + policy). Two queries; None when there is no such session."""
    # The runs and context events are part of the version: a refused run or an agent's
    # compaction changes what the page shows without changing the session row.
    runs = CompactionRun.objects.filter(session_id=OuterRef("pk")).order_by()
    events = ContextEvent.objects.filter(session_id=OuterRef("pk")).order_by()
    session = (
        AgentSession.objects.select_related("profile")
        .annotate(
            runs_stamp=Subquery(
                runs.values("session_id")
                .annotate(n=Count("id"), last=Max("finished_at"))
                .values("n")[:1]
            ),
            runs_last=Subquery(runs.order_by("-pk").values("status")[:1]),
            events_stamp=Subquery(
                events.values("session_id").annotate(n=Count("id")).values("n")[:1]
            ),
        )
        .filter(pk=pk)
        .first()
    )
    if session is None:
        return None
    policies = load_policies([session.profile_id])
    policy = policies.of(session.profile_id)
    version = digest(
        str(session.pk),
        session.last_seen_at.isoformat() if session.last_seen_at else "",
        repr(
            (
                session.pressure,
                session.projected_tokens,
                session.window_tokens,
                session.window_source,
                session.turns_count,
                session.calls_count,
                session.surface_version,
                session.surface_estimate_tokens,
                str(session.cost_usd),
                session.cache_read_tokens,
                session.cache_denominator_tokens,
                session.last_turn_rounds,
                getattr(session, "runs_stamp", None),
                getattr(session, "runs_last", None),
                getattr(session, "events_stamp", None),
            )
        ),
        policies.version,
    )
    return session, policy, version


def session_last_modified(session: AgentSession) -> datetime | None:
    return session.last_seen_at


COST_FIELDS: Final = BUCKETS


@dataclass
class SessionSeries:
    """Per-turn figures in turn order, ready for `console.charts`."""

    turns: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    hit: list[float | None] = field(default_factory=list)
    write_5m: list[int] = field(default_factory=list)
    write_1h: list[int] = field(default_factory=list)
    costs: dict[str, list[float | None]] = field(
        default_factory=lambda: {key: [] for key in COST_FIELDS}
    )


def session_series(session: AgentSession) -> SessionSeries:
    """Every turn's figures for the charts. One query, whatever the number of turns.

    Costs arrive as floats cast by the database and the columns are built by transposing the
    rows: making a Decimal per cost and appending per field was ~40% of a 10,000-turn session
    page (make bench, P3).
    """
    series = SessionSeries()
    rows = list(
        Turn.objects.filter(session=session)
        .order_by("turn")
        .annotate(**{f"float_{key}": Cast(f"cost_{key}", FloatField()) for key in COST_FIELDS})
        .values_list(
            "turn",
            "context_tokens",
            "cache_reported_calls",
            "cache_read_reported",
            "cache_denominator",
            "cache_write_5m",
            "cache_write_1h",
            *(f"float_{key}" for key in COST_FIELDS),
        )
    )
    if not rows:
        return series
    turns, context, reported, read, denominator, w5, w1, *costs = (
        list(column) for column in zip(*rows, strict=True)
    )
    series.turns = turns
    series.context = context
    series.hit = [
        None if not n else (r / d if d else 0.0)
        for n, r, d in zip(reported, read, denominator, strict=True)
    ]
    series.write_5m = w5
    series.write_1h = w1
    series.costs = dict(zip(COST_FIELDS, costs, strict=True))
    return series


def turn_bounds(session: AgentSession) -> tuple[int, int] | None:
    """The session's first and last turn numbers (agents count from 0 or from 1). One query."""
    found = Turn.objects.filter(session=session).aggregate(first=Min("turn"), last=Max("turn"))
    if found["first"] is None:
        return None
    return int(found["first"]), int(found["last"])


def turns_page(session: AgentSession, number: str | None) -> Page[Turn]:
    """A page of the turns table, latest first. Two queries."""
    # each turn's first call, for the link to the call page (one subquery on the calls' index)
    first_call = LLMCall.objects.filter(
        session_id=OuterRef("session_id"), turn=OuterRef("turn")
    ).order_by("call")
    turns = (
        Turn.objects.filter(session=session)
        .annotate(first_call_pk=Subquery(first_call.values("pk")[:1]))
        .order_by("-turn")
    )
    page = Paginator(turns, TURNS_PER_PAGE, allow_empty_first_page=True).get_page(number)
    return cast("Page[Turn]", page)


@dataclass(frozen=True)
class AppliedCompaction:
    """A compaction that changed the surface: the turn it took effect at, its mode and action,
    when it finished (the server's clock) and the turn before it with that turn's last call
    time (the agent's clock); `after` is None when no turn had been received."""

    turn: int
    mode: str
    action: str
    finished_at: datetime | None = None
    after: int | None = None
    after_at: datetime | None = None


def applied_compactions(session: AgentSession) -> list[AppliedCompaction]:
    """The session's applied compactions in the order they finished. One query.

    A run took effect at the turn after the last turn the server had received when it was
    applied (`CompactionRun.turn_received`; 0 before any turn), so a chart marking it keeps the
    two turns either side of the drop it caused. Runs are timed by the server's clock and
    turns by the agent's: the two are never compared.
    """
    after_at = Turn.objects.filter(
        session_id=OuterRef("session_id"), turn=OuterRef("turn_received")
    ).values("last_at")[:1]
    rows = (
        CompactionRun.objects.filter(session=session, status=CompactionRun.Status.APPLIED)
        .annotate(after_at=Subquery(after_at))
        .order_by("finished_at", "pk")
        .values_list("turn_received", "mode", "action", "finished_at", "after_at")
    )
    return [
        AppliedCompaction(
            0 if before is None else before + 1, mode, action, finished, before, before_at
        )
        for before, mode, action, finished, before_at in rows
    ]


def first_seen(session: AgentSession) -> datetime | None:
    """When the session's first call was made, by the agent's clock (as `last_seen_at` is):
    the earliest first call of its turns. One query."""
    found: datetime | None = Turn.objects.filter(session=session).aggregate(at=Min("first_at"))[
        "at"
    ]
    return found
