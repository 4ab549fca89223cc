"""`python manage.py runconsole`: what `make run` starts.

Migrates, makes sure an admin login exists (printing it), starts the web server (gunicorn with
`console.gunicorn_conf`, one worker), one Celery worker and beat together, seeds demo data
through the real HTTP API when the database holds no session yet, prints the URL, and stops all
three on Ctrl-C, SIGTERM or SIGHUP (on Linux also when it is killed outright:
`_die_with_parent`). A second run reuses what exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser

from telemetry.seeding import ensure_defaults

# The signals that stop the console, and how its output names each.
_STOP_NAMES: Final = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}

_PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """On Linux, what a child runs before it starts: the kernel sends it SIGTERM when `parent`
    (this process) dies, however it dies; should it have died already, the child stops itself.
    None elsewhere (no such call)."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class Command(BaseCommand):
    help = "Run the console: web server, Celery worker and beat, with demo data on first start."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("CONSOLE_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("CONSOLE_PORT", "8000")))
        parser.add_argument("--no-demo", action="store_true", help="do not seed demo data")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        # Seed rows added since this database was created (new catalogue models) — never
        # overwriting what an admin edited.
        ensure_defaults()
        if not settings.DEBUG:
            # hashed, gzipped static files that browsers may cache for good (whitenoise)
            call_command("collectstatic", interactive=False, verbosity=0)
        login = self._ensure_admin()
        host, port = options["host"], options["port"]
        url = f"http://{host}:{port}/"
        python = sys.executable
        env = os.environ.copy()
        processes = {
            # gunicorn with the production config, as in production: it decodes chunked bodies
            # (Claude Code's OTLP exporter sends no Content-Length), which runserver cannot, and
            # bounds every read of a request. One worker: the in-process rate-limit counts and a
            # SQLite database see one process, as under runserver; no autoreload.
            "web": [
                python,
                "-m",
                "gunicorn",
                "console.wsgi",
                "--config",
                "python:console.gunicorn_conf",
                "--bind",
                f"{host}:{port}",
                "--workers",
                "1",
                "--threads",
                "8",
                "--access-logfile",
                "-",
            ],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(settings.CELERY_WORKER_CONCURRENCY),
                "--hostname",
                f"console-worker-{os.getpid()}@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
            ],
        }
        running: dict[str, subprocess.Popen[bytes]] = {}
        # Each child runs in a process group of its own, so a terminal's Ctrl-C reaches this
        # process only, which stops the children one way: SIGTERM, then SIGKILL to the child's
        # whole group (its own workers too) past the deadline. A child that got the terminal's
        # SIGINT and its parent's signal at once could hang in its handler (gunicorn's gthread
        # worker), and a grandchild left behind would hold the terminal's output open.
        # SIGTERM (`kill`, a service manager, `docker stop`) and SIGHUP (the terminal closed)
        # stop them the same way; were this process killed outright (SIGKILL, the OOM killer),
        # each child is sent SIGTERM by the kernel (`_die_with_parent`), so no web server is
        # left holding the port and no worker taking jobs.
        stopping: list[str] = []
        previous = {
            number: signal.signal(
                number, lambda got, _: stopping.append(_STOP_NAMES[signal.Signals(got)])
            )
            for number in _STOP_NAMES
        }
        try:
            for name, command in processes.items():
                running[name] = subprocess.Popen(
                    command,
                    env=env,
                    cwd=settings.BASE_DIR,
                    process_group=0,
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            self._wait_for(url + "healthz", running["web"])
            if not options["no_demo"] and not stopping:
                self._seed_demo(url)
            if not stopping:
                self._banner(url, login)
            while not stopping and all(proc.poll() is None for proc in running.values()):
                time.sleep(0.5)
            if stopping:
                self.stdout.write(f"\n{stopping[0]}: stopping web, worker and beat…")
            else:
                dead = [
                    f"{name} (exit code {proc.returncode})"
                    for name, proc in running.items()
                    if proc.poll() is not None
                ]
                self.stderr.write(
                    f"{', '.join(dead)} stopped unexpectedly; stopping the rest. "
                    "Its log lines above say why."
                )
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            for proc in running.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for proc in running.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if stopping:
                self.stdout.write("Stopped.")

    def _banner(self, url: str, login: str) -> None:
        """The URL and the admin login, last: after the start-up and demo logs, not under them."""
        rule = "=" * 72
        self.stdout.write(
            self.style.SUCCESS(
                f"\n{rule}\n  Console running at {url}\n  {login}\n"
                f"  Ctrl-C stops web, worker and beat.\n{rule}\n"
            )
        )

    def _ensure_admin(self) -> str:
        """Make sure an admin login exists; return the line that tells it (printed again last)."""
        user_model = get_user_model()
        credentials = Path(settings.VAR_DIR) / "admin-login.txt"
        if user_model.objects.filter(is_superuser=True).exists():
            if credentials.exists():
                line = f"Admin login: {credentials.read_text().strip()}  (from {credentials})"
            else:
                line = "Admin login: an admin user exists already."
            self.stdout.write(line)
            return line
        username = os.environ.get("CONSOLE_ADMIN_USER", "admin")
        password = os.environ.get("CONSOLE_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username=username, email="", password=password)
        credentials.write_text(f"username {username} password {password}\n")
        credentials.chmod(0o600)
        line = f"Admin login: username {username} password {password}  (kept in {credentials})"
        self.stdout.write(self.style.SUCCESS(f"Created admin login: {line}"))
        return line

    def _wait_for(self, url: str, web: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if web.poll() is not None:
                raise SystemExit("the web server exited during start-up")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        raise SystemExit(f"the web server did not answer {url} within 60 s")

    def _seed_demo(self, url: str) -> None:
        if "simulate" not in get_commands():
            return
        from telemetry.models import AgentProfile

        if AgentProfile.objects.filter(sessions__isnull=False).exists():
            self.stdout.write("Demo data present; not seeding again.")
            return
        self.stdout.write("Seeding demo data through the API (python manage.py simulate)…")
        call_command("simulate", base_url=url, cache_demo=True)
