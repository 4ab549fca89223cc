"""What the console shows of an imported session: its file, parent and children. The agent's own
compactions are context events, listed once with the others in the session's compaction section
(`console.selectors.compaction.compaction_runs`), not here a second time."""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.models import SessionLink, TranscriptImport
from telemetry.models import AgentSession


@dataclass
class ImportedView:
    source: TranscriptImport | None
    parent: SessionLink | None
    children: list[SessionLink] = field(default_factory=list)


def imported_view(session: AgentSession) -> ImportedView | None:
    """None for a session that no transcript import touched (an OTLP or API session whose agent
    reported its own compactions has no file, parent or child to show)."""
    source = TranscriptImport.objects.filter(session=session).order_by("-updated_at").first()
    parent = SessionLink.objects.select_related("parent").filter(child=session).first()
    children = list(
        SessionLink.objects.select_related("child").filter(parent=session).order_by("child__pk")
    )
    if source is None and parent is None and not children:
        return None
    return ImportedView(source, parent, children)
