"""Session metadata for transcripts imported before the console kept it: read again from the
imported files, by the import's own parsers (`make_parser`: one reading of a transcript).

Only the part of a file an import already took (up to its stored offset) is read, and only
what the parser says about sessions (`SessionMeta`) is kept; calls, messages and the import's
place are not touched. The merge is the doors' one (`record_metadata`, door "import"), so a
second run changes nothing. A file no longer on disk is skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from compaction.imports.files import make_parser
from compaction.imports.reader import read_lines
from compaction.imports.records import SessionMeta
from compaction.imports.store import _external_id
from compaction.models import TranscriptImport
from telemetry.models import AgentSession
from telemetry.session_state import record_metadata

_FORMATS = {"claude-code", "codex"}


@dataclass
class Backfill:
    files: int = 0
    missing: int = 0
    sessions: int = 0  # sessions whose metadata changed

    def line(self) -> str:
        return (
            f"{self.files} imported files read, {self.missing} no longer on disk; "
            f"{self.sessions} sessions given metadata"
        )


def file_metadata(state: TranscriptImport) -> list[tuple[str, dict[str, str]]] | None:
    """What the imported part of the file says about its sessions: (external id, metadata) in
    file order, as the import met them; None when the file is gone."""
    path = Path(state.path)
    if not path.is_file() or state.format not in _FORMATS:
        return None
    parser = make_parser(state.format, state.path, None)  # type: ignore[arg-type]
    with path.open("rb") as handle:
        records = []
        for line in read_lines(handle):
            if line.start >= state.offset:
                break
            records.extend(parser.feed(line.number, line.text))
        records.extend(parser.flush(final=True))
    return [
        (_external_id(record.session), record.metadata)
        for record in records
        if isinstance(record, SessionMeta)
    ]


def backfill_metadata(*, batch: int = 200, dry_run: bool = False) -> Backfill:
    """Give imported sessions the metadata their files hold, `batch` imports a transaction."""
    report = Backfill()
    after = 0
    while True:
        states = list(
            TranscriptImport.objects.filter(pk__gt=after, session__isnull=False).order_by("pk")[
                :batch
            ]
        )
        if not states:
            return report
        after = states[-1].pk
        with transaction.atomic():
            for state in states:
                found = file_metadata(state)
                if found is None:
                    report.missing += 1
                    continue
                report.files += 1
                sessions = {
                    s.external_id: s
                    for s in AgentSession.objects.select_for_update().filter(
                        profile_id=state.profile_id, external_id__in={sid for sid, _ in found}
                    )
                }
                before = {pk: dict(s.metadata or {}) for pk, s in _by_pk(sessions).items()}
                for sid, metadata in found:  # in file order, as the import merged them
                    if (session := sessions.get(sid)) is not None:
                        record_metadata({session.pk: session}, {session.pk: metadata}, "import")
                report.sessions += sum(
                    1 for pk, s in _by_pk(sessions).items() if s.metadata != before[pk]
                )
            if dry_run:
                transaction.set_rollback(True)


def _by_pk(sessions: dict[str, AgentSession]) -> dict[int, AgentSession]:
    return {s.pk: s for s in sessions.values()}
