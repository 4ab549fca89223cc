"""`manage.py import_sessions PATH`: restore sessions from an export (`compaction.session_import`).

Idempotent: a session that exists gets only the rows it lacks, its figures and the hour rollups
unchanged; a new one is created with its exported figures and its calls added to the rollups.
`-` reads standard input.
"""

from __future__ import annotations

import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from compaction.session_import import import_lines
from context_core.export_lines import ExportLineError


class Command(BaseCommand):
    help = "Import sessions exported by export_sessions or the export API (JSON lines)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("path", help="an export file, or - for standard input")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["path"]
        try:
            if path == "-":
                report = import_lines(sys.stdin)
            else:
                with Path(path).open(encoding="utf-8") as lines:
                    report = import_lines(lines)
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from None
        except ExportLineError as exc:
            raise CommandError(f"{path}: {exc} (the sessions before it were imported)") from None
        self.stdout.write(report.summary())
