"""The per-session estimates (D6), learned from the session's own reports: the calibration of
what a planner frees and the size of the next request after a compaction (one estimate for the
plan and the run), both at the learned token rates (`compaction.token_rates`)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from compaction.models import SurfaceVersion
from compaction.token_rates import session_token_rates
from compaction.transcripts import record_version_chars, surface_at
from context_core import Calibration, Message, round_growth_chars
from context_core import Surface as CoreSurface
from context_core.estimates import (
    PostCompactionEstimate,
    TokenRates,
    drops_head,
    fit_surface,
    kind_chars,
    overhead_removed,
    post_compaction_estimate,
)
from telemetry.models import AgentSession, LLMCall


def session_calibration(session: AgentSession) -> Calibration:
    """D6: tokens ≈ slope · chars/4 + overhead, fitted on the session's own calls.

    First on the calls that reported their request size (`request_chars`); when too few did,
    on the calls that named the surface version they used (its characters are known exactly:
    measured context tokens vs surface chars, `context_core.estimates`). The overhead is
    what the log lacks (system prompt, tools). Falls back to chars // 4 (`fitted` False) when
    neither has enough points or the fit is not sane."""
    rows = (
        LLMCall.objects.filter(session=session, request_chars__isnull=False)
        .order_by("-turn", "-call")
        .values_list("request_chars", "context_tokens")[:CALIBRATION_POINTS]
    )
    by_request = Calibration.fit([(chars, tokens) for chars, tokens in rows if chars is not None])
    if by_request.fitted:
        return by_request
    by_surface = fit_surface(surface_points(session))
    return by_surface if by_surface.fitted else by_request


def latest_surface_calls(session: AgentSession) -> list[tuple[int, int]]:
    """(surface version, measured context tokens) of the session's latest calls that named their
    surface version, newest first: what calibration and the overhead estimate read."""
    return [
        (version, tokens)
        for version, tokens in LLMCall.objects.filter(
            session=session, surface_version__isnull=False
        )
        .order_by("-turn", "-call")
        .values_list("surface_version", "context_tokens")[:CALIBRATION_POINTS]
        if version is not None
    ]


def surface_points(session: AgentSession) -> list[tuple[int, int]]:
    """(surface chars, measured context tokens) of the session's latest calls that named their
    surface version. Versions stored before their size was recorded are rebuilt once."""
    rows = latest_surface_calls(session)
    if not rows:
        return []
    sizes = dict(
        SurfaceVersion.objects.filter(
            session=session, version__in={version for version, _ in rows}
        ).values_list("version", "chars")
    )
    missing = [version for version, chars in sizes.items() if chars is None]
    sizes.update(record_version_chars(session, missing[:REBUILT_PER_CALL]))
    return [
        (chars, tokens) for version, tokens in rows if (chars := sizes.get(version)) is not None
    ]


# The latest calls describe the current tokenizer and prompt best.
CALIBRATION_POINTS = 200
# Earlier compactions whose first call after them tells how much overhead survives one.
OVERHEAD_COMPACTIONS = 3
# Old surface versions rebuilt per call at most (each is a derivation of the log).
REBUILT_PER_CALL = 50


def compaction_estimate(
    session: AgentSession,
    *,
    before: CoreSurface,
    after: CoreSurface,
    tokens_before: int,
) -> PostCompactionEstimate:
    """D6: the next request's size once `before` became `after`: the one estimate the plan
    (`GET …/compact/plan`) shows and the run records.

    The measured `tokens_before` less the learned tokens of what changed, by kind; when the
    compaction drops the surface's first messages, also less the overhead such a compaction was
    seen to remove on this session (`context_core.estimates.overhead_removed`)."""
    rates = session_token_rates(session.pk)
    chars_before, chars_after = kind_chars(before.messages), kind_chars(after.messages)
    removed_overhead = 0
    if rates.fitted and drops_head(before.messages, after.messages):
        now = tokens_before - rates.tokens(chars_before)
        removed = overhead_removed([now], _residuals_after_head_drops(session, rates))
        removed_overhead = removed or 0
    return post_compaction_estimate(
        rates,
        tokens_before=tokens_before,
        before=chars_before,
        after=chars_after,
        removed_overhead=removed_overhead,
    )


def estimate_appended(session: AgentSession, messages: Sequence[Message]) -> int:
    """D6: the tokens of log messages appended after a compaction was planned (they follow
    its surface unchanged), at the session's learned rates."""
    if not messages:
        return 0
    return session_token_rates(session.pk).tokens(kind_chars(messages))


def _residuals_after_head_drops(session: AgentSession, rates: TokenRates) -> list[int]:
    """Measured context − learned tokens of the surface, of the first call after each of the
    session's latest earlier compactions that dropped the surface's first messages."""
    calls = latest_surface_calls(session)[::-1]
    operations = dict(
        SurfaceVersion.objects.filter(
            session=session, version__in={version for version, _ in calls}
        ).values_list("version", "operations")
    )
    changes = [
        (a, b) for a, b in pairwise(calls) if operations.get(a[0], 0) < operations.get(b[0], 0)
    ][-OVERHEAD_COMPACTIONS:]
    residuals = []
    for (v_a, _), (v_b, context) in changes:
        old, new = surface_at(session, v_a), surface_at(session, v_b)
        if old is not None and new is not None and drops_head(old.messages, new.messages):
            residuals.append(context - rates.tokens(kind_chars(new.messages)))
    return residuals


def next_round_tokens(calibration: Calibration, surface: CoreSurface) -> int:
    """D6: what the agent's next round is expected to add (the largest of its latest rounds,
    `round_growth_chars`), in tokens: the growth a plan allows for, so a relief the next round
    would undo is made now (proactive relief). The run and `GET …/compact/plan` both use it."""
    return calibration.delta(round_growth_chars(surface.messages))
