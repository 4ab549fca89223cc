"""The per-session chars-to-tokens calibration (D6), fitted on the session's own reports."""

from __future__ import annotations

from compaction.core import Calibration
from telemetry.models import AgentSession, LLMCall


def session_calibration(session: AgentSession) -> Calibration:
    """D6: tokens ≈ slope · chars/4 + overhead, fitted on the session's own calls that reported
    their request size (the system prompt and tools are not in the log; the overhead is them).
    Falls back to chars // 4 when there are too few points or the fit is not sane."""
    rows = (
        LLMCall.objects.filter(session=session, request_chars__isnull=False)
        .order_by("-turn", "-call")
        .values_list("request_chars", "context_tokens")[:CALIBRATION_POINTS]
    )
    return Calibration.fit([(chars, tokens) for chars, tokens in rows if chars is not None])


# The latest calls describe the current tokenizer and prompt best.
CALIBRATION_POINTS = 200
