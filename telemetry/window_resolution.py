"""Ingest step 5: the window in force for a session, read from its rows and the catalogue.

The order of the sources is a pure rule (`telemetry.windows.window_in_force`); this step only
gathers what the rule reads: the latest turn's reported window, the window learned from an
overflow, the profile's settings and the catalogue's price row.
"""

from __future__ import annotations

from collections.abc import Callable

from telemetry.models import AgentProfile, AgentSession, Turn
from telemetry.pricing import ModelPrice
from telemetry.windows import LearnedWindow, WindowInForce, window_in_force


def resolve_window(
    profile: AgentProfile,
    last: Turn,
    price_of: Callable[[str], ModelPrice | None],
    session: AgentSession,
) -> WindowInForce | None:
    """The window in force for the session's next request (order in `telemetry.windows`);
    `price_of` finds a model's catalogue row (`OnceCatalogue.price`)."""
    price = price_of(last.model)
    learned = (
        LearnedWindow(session.learned_window_model, session.learned_window_tokens)
        if session.learned_window_tokens is not None
        else None
    )
    return window_in_force(
        model=last.model,
        record_window=last.last_call_window_tokens,
        learned=learned,
        overrides=profile.window_overrides or {},
        family=price.family if price else None,
        catalogue_window=price.window_tokens if price else None,
    )
