"""How good each compaction's estimate was: the next call's measured context beside it (D6)."""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery

from compaction.models import CompactionRun
from telemetry.models import LLMCall


def with_next_call(runs: QuerySet[CompactionRun]) -> QuerySet[CompactionRun]:
    """`runs` annotated with `next_context_tokens`: the measured context of the first call the
    session reported after the run finished (None until there is one). One query."""
    next_call = LLMCall.objects.filter(
        session=OuterRef("session"), received_at__gte=OuterRef("finished_at")
    ).order_by("received_at", "pk")
    return runs.annotate(next_context_tokens=Subquery(next_call.values("context_tokens")[:1]))
