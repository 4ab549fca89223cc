"""`manage.py import_transcripts PATH... --profile NAME [--follow] [--format ...]` (issue 11)."""

from __future__ import annotations

import json
import signal
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from compaction.imports.files import FORMATS, Format, NotATranscript
from compaction.imports.following import Watch, transcript_paths
from compaction.imports.store import FileReport, import_file
from telemetry.errors import FieldError
from telemetry.models import AgentProfile
from telemetry.profiles import get_or_create_profile


class Command(BaseCommand):
    help = (
        "Import Claude Code sessions and Codex rollouts (files, or folders searched for *.jsonl) "
        "into a profile; --follow keeps importing new lines until Ctrl-C."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--profile", required=True, help="agent profile (created if new)")
        parser.add_argument("--format", choices=FORMATS, default=None)
        parser.add_argument("--follow", action="store_true", help="poll for new lines")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
        parser.add_argument(
            "--quiet-seconds",
            type=float,
            default=5.0,
            help="a followed file quiet this long has its open response imported",
        )
        parser.add_argument("--json", action="store_true", help="one JSON report per file")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            profile = get_or_create_profile(name=options["profile"])
        except FieldError as exc:
            raise CommandError(str(exc)) from None
        fmt: Format | None = options["format"]
        paths: list[str] = options["paths"]
        if not options["follow"]:
            files = transcript_paths(paths)
            if not files:
                raise CommandError(f"no transcript files under {', '.join(paths)}")
            failed = 0
            for path in files:
                report = self._import(profile, path, fmt, final=True, as_json=options["json"])
                failed += report.status in ("refused", "failed")
            if failed:
                raise CommandError(f"{failed} file(s) not imported")
            return
        self._follow(profile, paths, fmt, options)

    def _follow(
        self, profile: AgentProfile, paths: list[str], fmt: Format | None, options: dict[str, Any]
    ) -> None:
        watch = Watch(quiet_seconds=options["quiet_seconds"])
        refused: set[str] = set()
        self.stderr.write(f"following {', '.join(paths)} (Ctrl-C or SIGTERM stops)")
        # Ctrl-C and a service manager's SIGTERM both stop the follower. Set explicitly: a process
        # started in the background by a non-interactive shell inherits SIGINT as ignored, and
        # Python then never turns it into KeyboardInterrupt.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                now = time.monotonic()
                for path in transcript_paths(paths):
                    if str(path) in refused:
                        continue
                    due = watch.due(path, now)
                    if due is None or not due[0]:
                        continue
                    report = self._import(
                        profile, path, fmt, final=due[1], as_json=options["json"], quiet=True
                    )
                    if report.status == "refused":
                        refused.add(str(path))
                time.sleep(options["interval"])
        except KeyboardInterrupt:
            # Each chunk commits with its import state, so stopping here loses nothing.
            self.stderr.write("stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _import(
        self,
        profile: AgentProfile,
        path: Path,
        fmt: Format | None,
        *,
        final: bool,
        as_json: bool,
        quiet: bool = False,
    ) -> FileReport:
        try:
            with path.open("rb") as handle:
                report = import_file(
                    profile=profile, path=str(path.resolve()), handle=handle, fmt=fmt, final=final
                )
        except NotATranscript as exc:
            report = FileReport(path=str(path), status="refused", detail=str(exc))
        except OSError as exc:
            report = FileReport(path=str(path), status="failed", detail=str(exc))
        if quiet and report.status in ("unchanged", "empty") and not report.skipped:
            return report
        if as_json:
            self.stdout.write(json.dumps(report.as_dict()))
        else:
            self.stdout.write(describe(report))
        return report


def describe(report: FileReport) -> str:
    """The report of one file as a few lines of text."""
    head = f"{report.path}: {report.status}"
    if report.format:
        head += f" ({report.format})"
    lines = [head]
    if report.detail:
        lines.append(f"  {report.detail}")
    if report.status in ("imported", "unchanged"):
        lines.append(
            f"  sessions {len(report.sessions)}, messages {report.messages}, calls {report.calls}"
            f" (+{report.duplicates} already stored), compactions {report.compactions},"
            f" lines {report.lines}, skipped {len(report.skipped)}"
        )
    lines.extend(f"  skipped line {line}: {reason}" for line, reason in report.skipped[:50])
    if len(report.skipped) > 50:
        lines.append(f"  ... and {len(report.skipped) - 50} more skipped lines")
    lines.extend(f"  note line {line}: {text}" for line, text in report.notes[:20])
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)
