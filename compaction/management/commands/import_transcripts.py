"""`manage.py import_transcripts PATH... --profile NAME [--follow] [--format ...]` (issue 11).

Safe on any file by construction: a line longer than `--max-line-bytes` is refused by its number
without being held; a symlink out of a given folder, a FIFO or a device is refused by its path;
nothing of a refused file's content is printed; `--follow` reads at most `--pass-bytes` of each
file per pass, in turn, so one endless file never holds up the others.
"""

from __future__ import annotations

import json
import signal
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from compaction.imports.files import FORMATS, Format, NotATranscript
from compaction.imports.following import Watch, open_regular, transcript_paths
from compaction.imports.store import FileReport, import_file
from context_core.line_framing import DEFAULT_MAX_LINE_BYTES, pass_order
from telemetry.errors import FieldError
from telemetry.models import AgentProfile
from telemetry.profiles import get_or_create_profile

# Bytes read from one file per --follow pass: enough to keep up with any agent, small enough
# that a pass over many files stays short.
PASS_BYTES = 4 << 20


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
        parser.add_argument(
            "--max-line-bytes",
            type=_positive,
            default=DEFAULT_MAX_LINE_BYTES,
            help="a longer line is refused by its number (default 16 MiB)",
        )
        parser.add_argument(
            "--pass-bytes",
            type=_positive,
            default=PASS_BYTES,
            help="with --follow, bytes read from one file per pass before the next file's turn",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            profile = get_or_create_profile(name=options["profile"])
        except FieldError as exc:
            raise CommandError(str(exc)) from None
        fmt: Format | None = options["format"]
        paths: list[str] = options["paths"]
        if not options["follow"]:
            found = transcript_paths(paths)
            for path, reason in found.refused:
                self._print(FileReport(path=str(path), status="refused", detail=reason), options)
            if not found.files and not found.refused:
                raise CommandError(f"no transcript files under {', '.join(paths)}")
            failed = len(found.refused)
            for path in found.files:
                report = self._import(profile, path, fmt, options, final=True)
                failed += report.status in ("refused", "failed")
            if failed:
                raise CommandError(f"{failed} file(s) not imported")
            return
        self._follow(profile, paths, fmt, options)

    def _follow(
        self, profile: AgentProfile, paths: list[str], fmt: Format | None, options: dict[str, Any]
    ) -> None:
        follower = Follower(self, profile, paths, fmt, options)
        self.stderr.write(f"following {', '.join(paths)} (Ctrl-C or SIGTERM stops)")
        # Ctrl-C and a service manager's SIGTERM both stop the follower. Set explicitly: a process
        # started in the background by a non-interactive shell inherits SIGINT as ignored, and
        # Python then never turns it into KeyboardInterrupt.
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                if not follower.run_pass(time.monotonic()):
                    # nothing left to read anywhere: wait for the agents to write (no busy loop)
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
        options: dict[str, Any],
        *,
        final: bool,
        budget: int | None = None,
        quiet: bool = False,
    ) -> FileReport:
        try:
            with open_regular(path) as handle:
                report = import_file(
                    profile=profile,
                    path=str(path.resolve()),
                    handle=handle,
                    fmt=fmt,
                    final=final,
                    max_line_bytes=options["max_line_bytes"],
                    budget=budget,
                )
        except NotATranscript as exc:
            report = FileReport(path=str(path), status="refused", detail=str(exc))
        except OSError as exc:
            report = FileReport(path=str(path), status="failed", detail=exc.strerror or str(exc))
        if quiet and report.status in ("unchanged", "empty") and not report.skipped:
            return report
        self._print(report, options)
        return report

    def _print(self, report: FileReport, options: dict[str, Any]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
        else:
            self.stdout.write(describe(report))


class Follower:
    """One `--follow` run: each pass visits every file in turn (`pass_order`), reading at most
    `--pass-bytes` of each, so a file that is huge or never stops growing gets its share and
    the others theirs."""

    def __init__(
        self,
        command: Command,
        profile: AgentProfile,
        paths: list[str],
        fmt: Format | None,
        options: dict[str, Any],
    ) -> None:
        self.command, self.profile, self.paths, self.fmt = command, profile, paths, fmt
        self.options = options
        self.watch = Watch(quiet_seconds=options["quiet_seconds"])
        self.refused: set[str] = set()
        self.turn = 0

    def run_pass(self, now: float) -> bool:
        """Import what is due in every file once; True when a file has bytes left to read."""
        found = transcript_paths(self.paths)
        for path, reason in found.refused:
            if str(path) not in self.refused:
                self.refused.add(str(path))
                report = FileReport(path=str(path), status="refused", detail=reason)
                self.command._print(report, self.options)
        names = [str(p) for p in found.files if str(p) not in self.refused]
        # a file gone from the listing has nothing left to read (no pass without work)
        self.watch.backlog &= set(names)
        for name in pass_order(names, self.turn):
            path = Path(name)
            due = self.watch.due(path, now)
            if due is None or not due[0]:
                continue
            report = self.command._import(
                self.profile,
                path,
                self.fmt,
                self.options,
                final=due[1],
                budget=self.options["pass_bytes"],
                quiet=True,
            )
            self.watch.more(path, report.more)
            if report.status == "refused":
                self.refused.add(name)
        self.turn += 1
        return bool(self.watch.backlog)


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


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)
