"""The per-session chars-to-tokens calibration (D6), fitted on the session's own reports."""

from __future__ import annotations

from compaction.models import SurfaceVersion
from context_core import Calibration
from context_core.estimates import fit_surface
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


def surface_points(session: AgentSession) -> list[tuple[int, int]]:
    """(surface chars, measured context tokens) of the session's latest calls that named their
    surface version. Versions stored before their size was recorded are rebuilt once."""
    rows = [
        (version, tokens)
        for version, tokens in LLMCall.objects.filter(
            session=session, surface_version__isnull=False
        )
        .order_by("-turn", "-call")
        .values_list("surface_version", "context_tokens")[:CALIBRATION_POINTS]
        if version is not None
    ]
    if not rows:
        return []
    sizes = dict(
        SurfaceVersion.objects.filter(
            session=session, version__in={version for version, _ in rows}
        ).values_list("version", "chars")
    )
    missing = [version for version, chars in sizes.items() if chars is None]
    if missing:
        from compaction.transcripts import surface_at  # transcripts imports this module

        for version in missing[:REBUILT_PER_CALL]:
            surface = surface_at(session, version)
            if surface is not None:
                sizes[version] = surface.chars
                SurfaceVersion.objects.filter(session=session, version=version).update(
                    chars=surface.chars
                )
    return [
        (chars, tokens) for version, tokens in rows if (chars := sizes.get(version)) is not None
    ]


# The latest calls describe the current tokenizer and prompt best.
CALIBRATION_POINTS = 200
# Old surface versions rebuilt per call at most (each is a derivation of the log).
REBUILT_PER_CALL = 50
