"""What the session page's parts show, for the views that render the page, its fragments, its
live poll and Compact now: each part read through `console.selectors` and shaped by
`console.presenters`, so every view that draws a part draws it from the same context."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from compaction.log_retention import removed_note
from console import charts
from console.parts import DIGEST_MARK, keyed
from console.presenters.sessions import compaction_markers, live_context
from console.presenters.transcripts import shown_surface
from console.selectors.compaction import (
    compaction_runs,
    session_archives,
    surface_now,
    surface_on_turn,
)
from console.selectors.session import applied_compactions, session_series, turns_page
from telemetry.models import AgentSession
from telemetry.otlp.costs import reported_agent_cost
from telemetry.policy_rules import PolicyValues

# The parts of the session page that refresh together when the session's version changes
# (`console.views.session_live`), each a named partial of console/session.html with an id and
# `oob` support. A new part: add its partial, put its name here, and give `live_parts` what it
# needs.
LIVE_PARTS: tuple[str, ...] = ("live", "charts", "turns", "runs", "archives")


def live_figures(session: AgentSession, policy: PolicyValues, version: str) -> dict[str, Any]:
    """The live figures and gauge, with the agent's own reported cost beside ours."""
    return live_context(session, policy, version, reported_agent_cost(session))


def compaction_parts(session: AgentSession, *, surface_turn: int | None = None) -> dict[str, Any]:
    """What the surface, runs and archives fragments show."""
    archives = session_archives(session)
    return {
        "surface_archive": archives[0] if archives else None,
        # log retention: the messages whose text went, and the archive that holds it
        "surface_removed": removed_note(session.pk),
        "session": session,
        "surface": shown_surface(
            surface_now(session) if surface_turn is None else surface_on_turn(session, surface_turn)
        ),
        "runs": compaction_runs(session),
        "archives": archives,
    }


def live_parts(
    session: AgentSession, policy: PolicyValues, version: str, turns_page_number: str | None
) -> dict[str, Any]:
    """Everything the live parts show: figures and gauge, charts, the turns page the reader is
    on, runs and archives."""
    series = session_series(session)
    markers = compaction_markers(applied_compactions(session))
    figures = charts.session_figures(
        series=series,
        markers=markers,
        projected=session.projected_tokens,
        window=session.window_tokens,
        reserved=policy.reserved_output_tokens,
        prune_threshold=policy.prune_threshold,
        summarize_threshold=policy.summarize_threshold,
    )
    return (
        live_figures(session, policy, version)
        | {"runs": compaction_runs(session), "archives": session_archives(session)}
        | {
            "figures": figures,
            "turns": turns_page(session, turns_page_number),
            "markers": markers,
            "has_turns": bool(series.turns),
            "turn_bounds": (series.turns[0], series.turns[-1]) if series.turns else None,
        }
    )


def rendered_part(
    name: str,
    context: dict[str, Any],
    request: HttpRequest,
    held: frozenset[str] = frozenset(),
    *,
    template: str = "console/session.html",
) -> str | None:
    """A part of `template` (the session page's, or the overview's) rendered with its key in it
    (`console.parts.keyed`), or None when the browser already holds that key: the poll leaves
    such a part out."""
    html, key = keyed(
        name,
        render_to_string(f"{template}#{name}", context | {"part_digest": DIGEST_MARK}, request),
    )
    return None if key in held else html


def rendered_parts(
    names: tuple[str, ...] | list[str], context: dict[str, Any], request: HttpRequest
) -> dict[str, str]:
    """The page's parts rendered once each, for the page to place (`{{ parts.live }}`)."""
    return {name: mark_safe(rendered_part(name, context, request) or "") for name in names}
