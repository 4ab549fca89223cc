"""`manage.py backfill_session_meta [--batch N] [--dry-run]`: give sessions imported before
the console kept session metadata the cwd, branch, version, title and first prompt their
transcript files hold (`compaction.imports.metadata_backfill`). Sessions that arrived through
other doors get theirs when the door reports again. Idempotent: a second run changes nothing.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from compaction.imports.metadata_backfill import backfill_metadata


class Command(BaseCommand):
    help = (
        "Read imported transcript files again for the session metadata they hold (cwd, branch, "
        "agent version, title, first prompt); files no longer on disk are skipped."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--batch", type=int, default=200, help="imports per transaction")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would change, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = backfill_metadata(batch=max(1, options["batch"]), dry_run=options["dry_run"])
        prefix = "Dry run: " if options["dry_run"] else ""
        self.stdout.write(f"{prefix}{report.line()}.")
