"""What `make run` starts (`manage.py runconsole` with DEBUG off and CONSOLE_LOCAL_HTTP=true):
static files hashed, gzipped and cached for a year (defect 11), a console output that ends
with the URL and the admin login and reads Ctrl-C as a stop, not a crash (defect 18), and a
server that stores a chunked OTLP export as Claude Code sends it (no Content-Length)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client

from console.plotly_bundle import bundle
from tests.db.test_chunked_bodies import assert_export_accepted, send_claude_code_export

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_11_static_files_are_compressed_and_cached_for_a_year(settings: Any, tmp_path: Path):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path / "static"
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", interactive=False, verbosity=0)
    url = static(bundle().static_name)
    assert re.search(r"plotly-finance\.min\.[0-9a-f]{12}\.js$", url)  # a hashed name
    response = Client().get(url, headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert len(body) < 500_000  # 1.3 MB uncompressed
    cache = response["Cache-Control"]
    max_age = re.search(r"max-age=(\d+)", cache)
    assert "immutable" in cache and max_age is not None and int(max_age.group(1)) >= 31_536_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stores_a_chunked_claude_code_export(port: int, env: dict[str, str]) -> None:
    """An OpenTelemetry JS-style export (gzipped protobuf, chunked, no Content-Length) is
    stored: the session's one turn shows the event's call."""
    manage = [sys.executable, "manage.py"]
    issued = subprocess.run(
        [*manage, "create_agent_key", "--profile", "default"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    key = issued.stdout.strip().splitlines()[-1]
    assert_export_accepted(*send_claude_code_export(port, key))
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/sessions/cc-chunked",
        headers={"Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        (turn,) = json.load(response)["turns_series"]
    assert (turn["calls"], turn["cache_read"]) == (1, 40000)


def _start_console(tmp_path: Path) -> tuple[subprocess.Popen[str], int, dict[str, str], str]:
    """`manage.py runconsole --no-demo` as `make run` starts it, in a process group of its own
    as a terminal gives it, once its banner is out: the console, its port, its environment and
    its output so far."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_", "CONSOLE_"))
    }
    env |= {
        "CONSOLE_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_DEBUG": "false",
        "CONSOLE_LOCAL_HTTP": "true",
        "CONSOLE_ADMIN_PASSWORD": "a-test-admin-password",
        "CELERY_TASK_DEFAULT_QUEUE": f"make-run-test-{os.getpid()}",
        "PYTHONUNBUFFERED": "1",
    }
    port = _free_port()
    console = subprocess.Popen(
        [sys.executable, "manage.py", "runconsole", "--no-demo", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        assert console.stdout is not None
        while time.monotonic() < deadline:
            line = console.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops web, worker and beat" in line:
                break
    except BaseException:
        os.killpg(console.pid, signal.SIGKILL)
        raise
    return console, port, env, "".join(lines)


def test_18_make_run_prints_the_login_last_and_ctrl_c_is_a_stop(tmp_path: Path) -> None:
    """And between the two, what it serves stores a chunked OTLP export (one start for both)."""
    console, port, env, out = _start_console(tmp_path)
    try:
        banner = out[out.rindex("Console running at") :]
        assert f"http://127.0.0.1:{port}/" in banner
        assert "Admin login: username admin password a-test-admin-password" in banner
        _stores_a_chunked_claude_code_export(port, env)
        os.killpg(console.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        rest, _ = console.communicate(timeout=60)
    finally:
        if console.poll() is None:
            os.killpg(console.pid, signal.SIGKILL)
    assert "Ctrl-C: stopping web, worker and beat" in rest
    assert "unexpectedly" not in rest and "exited; stopping the rest" not in rest


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="reads /proc; the kernel's parent-death signal is Linux's",
)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_web_server_worker_and_beat_end_with_the_console_however_it_is_stopped(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """`kill` (a service manager, `docker stop`) stops the three as Ctrl-C does; killed outright
    (SIGKILL, the OOM killer), the console leaves no web server holding its port and no worker
    taking jobs: the kernel sends each SIGTERM."""
    console, port, _, _ = _start_console(tmp_path)
    children: list[int] = []
    try:
        children = _children(console.pid)
        assert len(children) == 3, children  # web, worker, beat
        os.kill(console.pid, stop)  # the console alone, not its process group
        rest, _ = console.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while any(map(_running, children)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in children if _running(pid)]
    finally:
        if console.poll() is None:
            os.killpg(console.pid, signal.SIGKILL)
        for pid in filter(_running, children):
            os.killpg(pid, signal.SIGKILL)  # each child leads a process group of its own
    if stop == signal.SIGTERM:
        assert "SIGTERM: stopping web, worker and beat" in rest
        assert "unexpectedly" not in rest
    with socket.socket() as probe:  # nothing listens on the port any more
        # as a server binds (gunicorn too): the port's closed connections in TIME_WAIT do not
        # count, a socket still listening on it does
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()
