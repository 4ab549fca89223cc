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


def test_18_make_run_prints_the_login_last_and_ctrl_c_is_a_stop(tmp_path: Path) -> None:
    """And between the two, what it serves stores a chunked OTLP export (one start for both)."""
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
        out = "".join(lines)
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
