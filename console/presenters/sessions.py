"""The sessions' presentation: the list's columns and rows (band, round flag, hit ratio), the
live figures of one session's page, its compactions as chart markers, and a compaction run's
outcome in words. Pure: no query (what these need is read by `console.selectors`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from django.core.paginator import Page
from django.utils.timezone import localtime

from compaction.models import CompactionRun
from compaction.relief_state import ReliefState, SessionRelief
from console.charts import Marker
from console.gauge_chart import gauge_figure
from console.selectors.session import AppliedCompaction
from console.selectors.session_list import META_FILTER_LABELS, SessionsPage
from telemetry.models import AgentSession
from telemetry.otlp.costs import AgentCost
from telemetry.policy_rules import PolicyValues
from telemetry.pressure import PressureBand, round_signal
from telemetry.session_state import cache_savings, session_band
from telemetry.windows import SOURCE_LABELS

# (sort key, header, numeric column)
SESSION_COLUMNS = (
    ("session", "Session", False),
    # pressure second: on a phone it is in view without scrolling the table
    ("pressure", "Pressure", False),
    ("profile", "Profile", False),
    ("model", "Model", False),
    ("last_hit", "Cache hit, last turn", True),
    ("hit", "Cache hit, overall", True),
    ("cost", "Cost", True),
    ("turns", "Turns", True),
    ("rounds", "Rounds, last turn", True),
    ("last_seen", "Last seen", False),
)


@dataclass(frozen=True)
class SessionRow:
    session: AgentSession
    policy: PolicyValues
    band: PressureBand
    # "hard" once a turn reached round_hard_cap, "soft" once one reached round_soft_limit.
    round_flag: str | None
    hit_ratio: float | None
    # where its automatic relief stands (`compaction.relief_state`); NONE when nothing is asked
    relief: SessionRelief = SessionRelief(ReliefState.NONE)
    # the operators' tags on it, sorted
    tags: tuple[str, ...] = ()


NO_RELIEF = SessionRelief(ReliefState.NONE)


def relief_flag(relief: SessionRelief) -> tuple[str, str, str] | None:
    """The relief flag of a session as (css classes, text, title), None for no flag: failing,
    given up, pending too long (loud), or pending (quiet)."""
    if relief.state == ReliefState.GIVEN_UP:
        return (
            "flag hard relief-given_up",
            "relief given up",
            f"automatic relief failed {relief.failures} times in a row; the sweeper stopped"
            " trying (the next append asks again)",
        )
    if relief.state == ReliefState.FAILING:
        return (
            "flag hard relief-failing",
            "relief failing",
            f"automatic relief failed {relief.failures} time{'s' if relief.failures != 1 else ''}"
            " in a row; the sweeper tries again with backoff",
        )
    if relief.state == ReliefState.PENDING and relief.overdue:
        return (
            "flag soft relief-overdue",
            "relief pending too long",
            "the relief job was asked for and has not finished: is a worker running?",
        )
    if relief.state == ReliefState.PENDING:
        return ("flag quiet relief-pending", "relief pending", "automatic relief is asked for")
    return None


def round_flag(max_rounds: int, policy: PolicyValues) -> str | None:
    signal = round_signal(max_rounds, policy.round_soft_limit, policy.round_hard_cap)
    return {"stop": "hard", "nudge": "soft"}.get(signal)


@dataclass(frozen=True)
class SessionsListing:
    """A page of the sessions list as the table draws it."""

    rows: list[SessionRow]
    page: Page[AgentSession]
    profiles: list[str]
    models: list[str]
    # each metadata filter: (query parameter, label, the values to choose from, those chosen)
    meta_filters: list[tuple[str, str, list[str], tuple[str, ...]]] = field(default_factory=list)


def sessions_listing(found: SessionsPage) -> SessionsListing:
    """Each session of the page with its profile's policy, band and round flag."""
    rows = []
    for session in found.sessions:
        policy = found.policies.of(session.profile_id)
        rows.append(
            SessionRow(
                session=session,
                policy=policy,
                band=session_band(session, policy),
                round_flag=round_flag(session.max_turn_rounds, policy),
                hit_ratio=session.cache_hit_ratio,
                relief=found.reliefs.get(session.pk, NO_RELIEF),
                tags=found.tags.get(session.pk, ()),
            )
        )
    meta_filters = []
    for name, label in META_FILTER_LABELS.items():
        values = found.choices.get(name, [])
        chosen: tuple[str, ...] = getattr(found.filters, name)
        missing = [v for v in chosen if v not in values]
        meta_filters.append((name, label, sorted([*values, *missing]), chosen))
    missing_tags = [t for t in found.filters.tags if t not in found.tag_choices]
    meta_filters.append(
        ("tag", "Tag", sorted([*found.tag_choices, *missing_tags]), found.filters.tags)
    )
    return SessionsListing(rows, found.page, found.profiles, found.models, meta_filters)


# The session page's metadata lines: (key, label, the sessions list's filter for it or "").
SESSION_META: Final = (
    ("user", "User", "user"),
    ("repository", "Repository", "repository"),
    ("cwd", "Working directory", ""),
    ("branch", "Branch", "branch"),
    ("commit", "Commit", ""),
    ("agent", "Agent", "agent"),
    ("agent_version", "Version", ""),
    ("entrypoint", "Entry point", ""),
    ("originator", "Originator", ""),
)


def session_meta(session: AgentSession) -> list[tuple[str, str, str]]:
    """The session's metadata as the page lists it: (label, value, filter parameter or "");
    a filter links only to the value its column holds."""
    values = session.metadata or {}
    column = {"user": session.meta_user, "branch": session.git_branch, "agent": session.agent_name}
    column["repository"] = session.repository
    rows = []
    for key, label, param in SESSION_META:
        value = values.get(key)
        if not value:
            continue
        link = param if param and column.get(key) == value else ""
        rows.append((label, str(value), link))
    return rows


def compaction_markers(applied: list[AppliedCompaction]) -> list[Marker]:
    """The applied compactions as markers on the pressure chart, at the turn each took effect."""
    # short labels: they are drawn slanted above the plot
    return [
        Marker(
            run.turn,
            f"{'summarize' if 'summarize' in run.action else run.action or 'compact'} ({run.mode})",
            run_hover(run),
        )
        for run in applied
    ]


def run_hover(run: AppliedCompaction) -> str:
    """Where a run of ours meets the turns, both clocks: when it finished (server) and the last
    turn the server had received then, with that turn's last call (agent)."""
    # in the operator's zone (`console.middleware.operator_zone`), its abbreviation named
    done = (
        f"{localtime(run.finished_at):%Y-%m-%d %H:%M:%S %Z} server time" if run.finished_at else "?"
    )
    if run.after is None:
        return f"run finished {done}, before any turn was received"
    when = (
        f" (last call {localtime(run.after_at):%Y-%m-%d %H:%M:%S %Z} agent time)"
        if run.after_at
        else ""
    )
    return f"run finished {done}, after turn {run.after}{when}, the last the server had received"


def live_context(
    session: AgentSession, policy: PolicyValues, version: str, agent_cost: AgentCost | None
) -> dict[str, Any]:
    """The session page's live figures: band, usable window, cache savings, the gauge, the round
    signal and the agent's own reported cost beside ours."""
    savings = cache_savings(session)
    gauge = None
    if (
        session.window_tokens is not None
        and session.projected_tokens is not None
        and session.window_tokens > policy.reserved_output_tokens
    ):
        gauge = gauge_figure(
            projected=session.projected_tokens,
            window=session.window_tokens,
            reserved=policy.reserved_output_tokens,
            prune_threshold=policy.prune_threshold,
            summarize_threshold=policy.summarize_threshold,
        )
    signal = round_signal(session.last_turn_rounds, policy.round_soft_limit, policy.round_hard_cap)
    return {
        "session": session,
        "policy": policy,
        "band": session_band(session, policy),
        "usable_window": (
            session.window_tokens - policy.reserved_output_tokens
            if session.window_tokens is not None
            else None
        ),
        "savings": savings,
        "cache_extra_cost": -savings if savings is not None and savings < 0 else None,
        "gauge": gauge,
        "round_signal": signal,
        "version": version,
        "window_label": SOURCE_LABELS.get(session.window_source),  # type: ignore[call-overload]
        "agent_cost": agent_cost,
    }


def run_outcome(run: CompactionRun) -> tuple[str, str]:
    """A run's outcome for the operator who asked for it: a title and what happened."""
    if run.status == CompactionRun.Status.APPLIED:
        return "Compacted", (
            f"{run.action}: {run.tokens_before or 0:,} → {run.tokens_after or 0:,} tokens, "
            f"surface v{run.surface_version_before} → v{run.surface_version_after}."
        )
    if run.status == CompactionRun.Status.NOOP:
        return "Nothing to do", run.reason
    if run.status == CompactionRun.Status.REFUSED:
        return "Refused", run.reason
    return "Not applied", f"{run.get_status_display()}: {run.reason or run.error}"
