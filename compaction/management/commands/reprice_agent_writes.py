"""`manage.py reprice_agent_writes [--dry-run]`: bill the stored calls of Claude Code whose cache
writes carry no tier at the tier Claude Code writes with (`telemetry.usage.untiered_write_tier`),
not at their profile's `cache_ttl`, and bring their turns, sessions and hour rollups up to date.

Claude Code's calls are those its OTLP doors brought (`telemetry.repricing.claude_code_calls`)
and those of its imported transcripts (and their subagents' sessions). Idempotent: a second
run re-prices nothing.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from compaction.imports.files import Format
from compaction.models import SessionLink, TranscriptImport
from telemetry.repricing import claude_code_calls, reprice_agent_writes
from telemetry.usage import CLAUDE_CODE

_CLAUDE_CODE_FORMAT: Format = "claude-code"


def claude_code_sessions() -> set[int]:
    """Sessions of imported Claude Code transcripts, their subagents' included."""
    main = set(
        TranscriptImport.objects.filter(
            format=_CLAUDE_CODE_FORMAT, session__isnull=False
        ).values_list("session_id", flat=True)
    )
    found = set(main)
    while main:  # subagents of subagents: each level one query
        main = (
            set(SessionLink.objects.filter(parent_id__in=main).values_list("child_id", flat=True))
            - found
        )
        found |= main
    return found


class Command(BaseCommand):
    help = (
        "Re-bill stored Claude Code calls whose cache writes carry no tier at 5-minute writes "
        "(Claude Code's tier), and re-derive their turns, sessions and hour rollups."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would change, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        calls = claude_code_calls(claude_code_sessions())
        if options["dry_run"]:
            with transaction.atomic():
                report = reprice_agent_writes(calls, agent=CLAUDE_CODE)
                transaction.set_rollback(True)
            self.stdout.write(f"Dry run: {report.line()}; nothing changed.")
            return
        report = reprice_agent_writes(calls, agent=CLAUDE_CODE)
        self.stdout.write(f"Claude Code's untiered cache writes: {report.line()}.")
