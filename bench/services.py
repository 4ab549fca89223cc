"""What the bench starts and stops: its own database, gunicorn, a Celery worker.

Everything is started by the harness and stopped by it, on success, on error and on Ctrl-C
(`Cleanup`). Processes run in their own process group so that stopping one never reaches
anything the harness did not start; they are stopped by their own ids.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/console_bench"
DEFAULT_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
# Databases the bench must never create or drop, whatever it is told.
_PROTECTED = re.compile(r"^(console|test_console|postgres|template\d*|lead.*|test_.*)$")


# --- cleanup ---------------------------------------------------------------------------------


@dataclass
class Cleanup:
    """A stack of undo actions run once, in reverse, at exit or on SIGINT/SIGTERM."""

    actions: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    done: bool = False

    def push(self, what: str, action: Callable[[], None]) -> None:
        self.actions.append((what, action))

    def run(self) -> None:
        if self.done:
            return
        self.done = True
        while self.actions:
            what, action = self.actions.pop()
            try:
                action()
            except Exception as exc:  # keep undoing the rest
                print(f"cleanup: {what} failed: {exc}", file=sys.stderr)

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: object) -> None:
            print(f"\ninterrupted (signal {signum}); cleaning up", file=sys.stderr)
            self.run()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


# --- database --------------------------------------------------------------------------------


def database_name(url: str) -> str:
    name = urllib.parse.urlsplit(url).path.lstrip("/")
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name) or _PROTECTED.match(name):
        raise SystemExit(f"refusing to create or drop database {name!r} (from {url})")
    return name


def with_database(url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def postgres_reachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        with psycopg.connect(with_database(url, "postgres"), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def broker_reachable(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 3):
            return None
    except OSError as exc:
        return str(exc)


def create_database(url: str, cleanup: Cleanup, *, keep: bool = False) -> None:
    """(Re)create the bench database; drop it again at cleanup unless `keep`."""
    name = database_name(url)
    admin = with_database(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    if not keep:
        cleanup.push(f"drop database {name}", lambda: drop_database(url))


def drop_database(url: str) -> None:
    name = database_name(url)
    from django.db import connections

    connections.close_all()
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


# --- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Started:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM to the process group the harness created for it, then SIGKILL if needed."""
        if self.process.poll() is not None:
            return
        pgid = self.process.pid  # start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
        # Children that outlived their leader (pool processes, gunicorn workers).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _spawn(name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> Started:
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Started(name, process, log_path)


def start_gunicorn(
    env: dict[str, str],
    log_dir: Path,
    cleanup: Cleanup,
    *,
    workers: int,
    worker_class: str,
    threads: int,
    config: str = "",
    name: str = "gunicorn",
) -> tuple[Started, int]:
    """gunicorn on a free port, answering. With `config` (e.g. `python:console.gunicorn_conf`)
    the workers, threads and timeouts are the config's, as in production (WEB_CONCURRENCY in
    `env` sets the workers); without it, the flags below."""
    port = free_port()
    argv = [str(Path(sys.executable).parent / "gunicorn"), "console.wsgi"]
    argv += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    if config:
        argv += ["--config", config]
    else:
        argv += ["--workers", str(workers), "--worker-class", worker_class]
        argv += ["--keep-alive", "30", "--timeout", "300"]
        if worker_class == "gthread":
            argv += ["--threads", str(threads)]
    started = _spawn(name, argv, env, log_dir)
    cleanup.push(f"stop {name}", started.stop)
    deadline = time.monotonic() + 60
    import http.client

    while time.monotonic() < deadline:
        if started.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited during start-up:\n{started.log_tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/bench/noop")
            if conn.getresponse().status == 200:
                conn.close()
                return started, port
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer within 60 s:\n{started.log_tail()}")


def start_worker(
    env: dict[str, str],
    log_dir: Path,
    cleanup: Cleanup,
    *,
    queue: str,
    concurrency: int,
    name: str = "",
) -> Started:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.celery_app",
        "worker",
        "--loglevel",
        "WARNING",
        "--concurrency",
        str(concurrency),
        "--pool",
        "prefork",
        "--queues",
        queue,
        "--hostname",
        f"{name or f'bench-{os.getpid()}'}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    started = _spawn("worker", argv, env, log_dir)
    cleanup.push("stop the Celery worker", started.stop)
    return started


def pool_children(pid: int) -> list[int]:
    """The direct children of `pid` (the prefork pool processes of a Celery worker)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces, so split after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            children.append(int(entry.name))
    return sorted(children)


def status_kb(pid: int, field_name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM of `pid` (Linux: write 5 to clear_refs); False when not permitted."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False
