"""What the console shows of an imported session: its file, parent and children, and each of the
agent's own compactions with the turn whose surface shows what the agent sent after it."""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.models import SessionLink, TranscriptImport
from telemetry.models import AgentSession, ContextEvent, LLMCall

_SOURCES = ("claude-code", "codex")


@dataclass
class AgentCompactionShown:
    event: ContextEvent
    turn_after: int | None  # the first turn whose request came after the compaction


@dataclass
class ImportedView:
    source: TranscriptImport | None
    parent: SessionLink | None
    children: list[SessionLink] = field(default_factory=list)
    compactions: list[AgentCompactionShown] = field(default_factory=list)


def imported_view(session: AgentSession) -> ImportedView | None:
    """None for a session that no transcript import touched."""
    source = TranscriptImport.objects.filter(session=session).order_by("-updated_at").first()
    parent = SessionLink.objects.select_related("parent").filter(child=session).first()
    children = list(
        SessionLink.objects.select_related("child").filter(parent=session).order_by("child__pk")
    )
    events = ContextEvent.objects.filter(
        session=session, origin=ContextEvent.Origin.AGENT, source__in=_SOURCES
    ).order_by("at", "pk")
    compactions = []
    for event in events:
        version = event.detail.get("surface_version") if isinstance(event.detail, dict) else None
        turn_after = None
        if isinstance(version, int):
            turn_after = (
                LLMCall.objects.filter(session=session, surface_version__gte=version)
                .order_by("turn", "call")
                .values_list("turn", flat=True)
                .first()
            )
        compactions.append(AgentCompactionShown(event, turn_after))
    if source is None and parent is None and not children and not compactions:
        return None
    return ImportedView(source, parent, children, compactions)
