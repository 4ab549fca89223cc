"""Private services for fault tests: a throwaway PostgreSQL cluster, a private redis-server, a
fake AMQP endpoint that accepts and stalls, and gunicorn with the production settings.

Fault tests stop, freeze and restart only what they started here, never the shared services
the rest of the suite uses.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def pg_bin(name: str) -> str | None:
    found = sorted(str(p) for p in Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return found[-1] if found else None


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` system user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@dataclass
class PrivatePostgres:
    """A throwaway cluster in a temporary folder, on its own port (trust auth, user postgres)."""

    data_dir: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/console"

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(self.data_dir), "-l", str(self.log), "-w", *args]),
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        self._pg_ctl(
            "-o",
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data_dir} -c fsync=off",
            "start",
        )

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "stop")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    initdb = pg_bin("initdb")
    if initdb is None or shutil.which("runuser") is None:
        raise RuntimeError("initdb (PostgreSQL server binaries) and runuser are needed")
    base = Path(tempfile.mkdtemp(prefix="console-pg-"))
    base.chmod(0o777)
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    subprocess.run(
        _as_postgres([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = PrivatePostgres(data_dir=data, port=free_port(), log=base / "postgres.log")
    cluster.start()
    try:
        createdb = pg_bin("createdb")
        assert createdb is not None
        subprocess.run(
            [createdb, "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "console"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class PrivateRedis:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def freeze(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (its connections refused from now on), as a crashed cache is seen."""
        self.process.terminate()
        self.process.wait(timeout=10)

    def start(self) -> None:
        """Start an empty server again on the same port (what a restarted cache holds)."""
        self.process = _redis_server(self.port)
        wait_for_port(self.port)


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is needed (apt-get install redis-server)")
    port = free_port()
    redis = PrivateRedis(process=_redis_server(port, binary), port=port)
    try:
        wait_for_port(port)
        yield redis
    finally:
        redis.process.send_signal(signal.SIGCONT)
        redis.process.terminate()
        redis.process.wait(timeout=10)


def _redis_server(port: int, binary: str | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [binary or shutil.which("redis-server") or "redis-server", "--port", str(port)]
        + ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def stalled_amqp_endpoint() -> Iterator[str]:
    """A TCP port that accepts connections and never answers: a frozen AMQP broker as a client
    sees it (the kernel completes the handshake, the broker never speaks)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"amqp://guest:guest@127.0.0.1:{port}//"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


@dataclass
class Gunicorn:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def service_env(**overrides: str) -> dict[str, str]:
    """The environment of a production-like process: DEBUG off, plain HTTP on loopback."""
    env = os.environ.copy()
    env.update(
        {
            "DJANGO_DEBUG": "false",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SESSION_COOKIE_SECURE": "false",
            "DJANGO_CSRF_COOKIE_SECURE": "false",
            "DB_CONN_MAX_AGE": "60",
        }
    )
    env.update(overrides)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.stdout


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str],
    log_path: Path,
    *,
    threads: int = 4,
    workers: int = 1,
    extra: tuple[str, ...] = (),
) -> Iterator[Gunicorn]:
    """gunicorn with the project's config file (`console/gunicorn_conf.py`), gthread workers."""
    port = free_port()
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "console.wsgi",
            "--config",
            "python:console.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--worker-class",
            "gthread",
            "--threads",
            str(threads),
            *extra,
        ],
        cwd=ROOT,
        # No worker is replaced mid-test (the production safety net `WEB_MAX_REQUESTS` would
        # swap workers during a fault test's traffic and lose the per-process state it reads).
        env={"WEB_MAX_REQUESTS": "0", **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Gunicorn(process=process, port=port, log_path=log_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited during start-up:\n{server.log()}")
            with contextlib.suppress(OSError):
                status, _, _ = request(port, "GET", "/api/openapi.json", timeout=5)
                if status < 500:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"gunicorn did not answer:\n{server.log()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def request(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None
        sent = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
