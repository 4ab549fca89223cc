"""The session's learned tokens per character (D6), by kind: tool results and prose.

Fitted on the session's own consecutive calls, from aggregates only (no log rows read), so the
transcript log can price what an append adds (`compaction.transcripts`) and the calibration can
price what a compaction removes (`compaction.calibration`) without either importing the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from django.db.models import Min, Q, Sum

from compaction.models import LogMessage, SurfaceVersion
from context_core.estimates import KindChars, TokenRates, fit_token_rates, step_tokens
from telemetry.models import LLMCall

# Steps the token rates are fitted on (the latest; each is a pair of consecutive calls).
RATE_STEPS = 30


def session_token_rates(session_id: int) -> TokenRates:
    """D6: tokens per character of tool results and of prose, fitted on the session's latest
    steps: for consecutive calls on the same operations, the characters the log gained after
    the first call's reply (by kind) against what the second call measured beyond the first
    (`context_core.estimates.step_tokens`). Four queries, none reading log rows; chars // 4
    while too few steps."""
    calls = [
        (version, context, output, reasoning)
        for version, context, output, reasoning in LLMCall.objects.filter(
            session_id=session_id, surface_version__isnull=False
        )
        .order_by("-turn", "-call")
        .values_list("surface_version", "context_tokens", "output", "reasoning_output")[
            : RATE_STEPS + 1
        ]
        if version is not None
    ][::-1]
    if len(calls) < 2:
        return fit_token_rates([])
    versions = {
        version: (count, operations)
        for version, count, operations in SurfaceVersion.objects.filter(
            session_id=session_id, version__in={call[0] for call in calls}
        ).values_list("version", "log_messages", "operations")
    }
    spans, tokens = [], []
    for (v_a, context, output, reasoning), (v_b, next_context, _, _) in pairwise(calls):
        a, b = versions.get(v_a), versions.get(v_b)
        if a is None or b is None or a[1] != b[1] or b[0] <= a[0]:
            continue  # unknown versions, a compaction between them, or nothing appended
        spans.append((a[0], b[0]))
        tokens.append(
            step_tokens(
                context_tokens=context,
                output=output,
                reasoning_output=reasoning,
                next_context_tokens=next_context,
            )
        )
    return fit_token_rates(list(zip(appended_between(session_id, spans), tokens, strict=True)))


def appended_between(session_id: int, spans: Sequence[tuple[int, int]]) -> list[KindChars]:
    """`context_core.estimates.appended_after_reply` of the log's messages in each [start, end)
    of `spans`, summed by the database: two aggregate queries whatever the spans hold, so the
    rates cost no log rows read however large the steps (an import stays linear)."""
    if not spans:
        return []
    log = LogMessage.objects.filter(
        session_id=session_id,
        seq__gte=min(start for start, _ in spans),
        seq__lt=max(end for _, end in spans),
    )
    replies = log.aggregate(
        **{
            f"r{i}": Min("seq", filter=Q(seq__gte=start, seq__lt=end, role="assistant"))
            for i, (start, end) in enumerate(spans)
        }
    )
    after = {
        i: Q(seq__gt=reply, seq__lt=end)
        for i, (_, end) in enumerate(spans)
        if (reply := replies[f"r{i}"]) is not None
    }
    sums = (
        log.aggregate(
            **{
                name: Sum(field, filter=where, default=0)
                for i, where in after.items()
                for name, field in ((f"c{i}", "chars"), (f"t{i}", "tool_chars"))
            }
        )
        if after
        else {}
    )
    found = []
    for i in range(len(spans)):
        if i not in after:
            found.append(KindChars())
            continue
        chars, tool = sums[f"c{i}"], sums[f"t{i}"]
        tool = min(tool, chars)
        found.append(KindChars(tool, chars - tool))
    return found
