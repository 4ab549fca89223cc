"""Run database tests through PgBouncer in transaction mode (`scripts/test.sh`, docs/scaling.md).

    pgbouncer_stage.py POSTGRES_URL BROKER_URL -- PYTEST_ARGS...

Starts Debian's `pgbouncer` on a free loopback port with a generated ini (transaction pooling,
`auth_type = trust`, every database forwarded to POSTGRES_URL's server), runs pytest with
`DATABASE_URL` pointing at it and `DATABASE_POOLER=pgbouncer-transaction` (the settings the docs
prescribe), then stops it and drops the test database on the server directly: PgBouncer keeps
server connections to it open, which a `DROP DATABASE` through it would trip over (hence
pytest's `--reuse-db`, which leaves the drop to this script). Exits with pytest's status.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(port: int, process: subprocess.Popen[bytes], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"pgbouncer does not listen on 127.0.0.1:{port} after {seconds}s")


POOL_SIZE = 30


def ini(port: int, host: str, server_port: int, workdir: Path) -> str:
    return f"""[databases]
* = host={host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "userlist.txt"}
pool_mode = transaction
max_client_conn = 400
; a compaction pins a server connection for its lock (compaction.services), and the suite runs
; ten at once beside the test's own connections and a worker's
default_pool_size = {POOL_SIZE}
query_wait_timeout = 30
logfile = {workdir / "pgbouncer.log"}
"""


@dataclass
class Pooler:
    """A running pgbouncer (`start`), its port and working directory."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path

    def url(self, server_url: str, database: str) -> str:
        """A URL of `database` through this pooler, as `server_url`'s user."""
        server = urlsplit(server_url)
        user = unquote(server.username or "postgres")
        auth = user + (f":{server.password}" if server.password else "")
        return f"postgres://{auth}@127.0.0.1:{self.port}/{database}"


def binary() -> str:
    return shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def version() -> str:
    """What `pgbouncer -V` says of itself (its first line), "" when it says nothing."""
    done = subprocess.run([binary(), "-V"], capture_output=True, text=True, check=False)
    return (done.stdout.strip().splitlines() or [""])[0]


def start(server_url: str) -> Pooler:
    """Debian's pgbouncer in transaction mode on a free loopback port, forwarding every database
    to `server_url`'s server; listening when this returns (stop it with `stop`)."""
    server = urlsplit(server_url)
    user = unquote(server.username or "postgres")
    password = unquote(server.password or "")
    workdir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    port = free_port()
    (workdir / "userlist.txt").write_text(f'"{user}" "{password}"\n')
    (workdir / "pgbouncer.ini").write_text(
        ini(port, server.hostname or "127.0.0.1", server.port or 5432, workdir)
    )
    command = [binary(), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(workdir, "nobody")
        for path in workdir.iterdir():
            shutil.chown(path, "nobody")
        command[1:1] = ["-u", "nobody"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    pooler = Pooler(process, port, workdir)
    try:
        wait_for(port, process)
    except RuntimeError:
        stop(pooler)
        raise
    return pooler


def stop(pooler: Pooler) -> None:
    """Stop accepting, close the server connections, remove the working directory."""
    process = pooler.process
    process.send_signal(signal.SIGINT)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.returncode not in (0, -signal.SIGINT):
        log = pooler.workdir / "pgbouncer.log"
        if log.exists():
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
    shutil.rmtree(pooler.workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    server, broker, pytest_args = urlsplit(argv[0]), argv[1], argv[3:]
    name = f"console_pgbouncer_{os.getpid()}"
    pooler = start(argv[0])
    env = dict(
        os.environ,
        DATABASE_URL=pooler.url(argv[0], name),
        CELERY_BROKER_URL=broker,
        DATABASE_POOLER="pgbouncer-transaction",
    )
    try:
        print(f"pgbouncer (transaction pooling) on 127.0.0.1:{pooler.port} -> {server.hostname}")
        pytest = [str(ROOT / ".venv/bin/pytest"), "--reuse-db", "--durations=12", *pytest_args]
        return subprocess.call(pytest, cwd=ROOT, env=env)
    finally:
        stop(pooler)
        maintenance = urlunsplit(server._replace(path="/postgres"))
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "test_{name}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
