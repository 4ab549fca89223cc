"""`manage.py export_sessions [--profile NAME] [--before TIME] [--output PATH]`: sessions as
JSON lines (`compaction.session_export`), streamed to a file or standard output.

`--before` takes every session with activity before that time (opened before it, or holding a
turn begun before it), whole: the sessions a retention cut-off at that time takes rows from.
"""

from __future__ import annotations

import sys
from argparse import ArgumentParser
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from compaction.session_export import export_lines, sessions_to_export
from context_core.export_lines import encode_line
from telemetry.models import AgentProfile

# how a session line starts: each is a chunk of its own (`session_lines`)
SESSION_START = encode_line("session", {}).partition('"row"')[0]


def aware_time(text: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 time with its offset."""
    try:
        found = parse_datetime(text)
        if found is None:
            day = parse_date(text)
            if day is not None:
                return datetime.fromisoformat(f"{day.isoformat()}T00:00:00+00:00")
    except ValueError:
        found = None
    if found is None or found.tzinfo is None:
        raise CommandError(f"--before: {text!r} is not a date or a time with an offset")
    try:  # the instant, in UTC: PostgreSQL takes offsets only up to ±15:59
        return found.astimezone(UTC)
    except OverflowError:
        raise CommandError(f"--before: {text!r} is outside the range of times") from None


class Command(BaseCommand):
    help = "Export sessions (calls, turns, events, log, compaction history) as JSON lines."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--profile", help="only this profile's sessions (default: all)")
        parser.add_argument(
            "--before",
            help="only sessions with activity before this date or time (ISO 8601, with offset)",
        )
        parser.add_argument("--output", help="write to this file (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        profile_id = None
        if options["profile"]:
            found = AgentProfile.objects.filter(name=options["profile"]).first()
            if found is None:
                raise CommandError(f"--profile: no profile named {options['profile']!r}")
            profile_id = found.pk
        before = aware_time(options["before"]) if options["before"] else None
        sessions = sessions_to_export(profile_id=profile_id, before=before)
        if options["output"]:
            with Path(options["output"]).open("w", encoding="utf-8") as out:
                written = _write(export_lines(sessions), out)
            self.stderr.write(f"exported {written} sessions to {options['output']}")
        else:
            written = _write(export_lines(sessions), sys.stdout)
            self.stderr.write(f"exported {written} sessions")


def _write(chunks: Any, out: TextIO) -> int:
    sessions = 0
    for chunk in chunks:
        if chunk.startswith(SESSION_START):
            sessions += 1
        out.write(chunk)
    return sessions
