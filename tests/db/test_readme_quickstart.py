"""The README's API quick start, run as written (bash + curl) against a fresh `make run`-style
console: its own SQLite database under a temporary CONSOLE_VAR_DIR, migrated and seeded as
`runconsole` does, served as `runconsole` serves it (gunicorn with the project's config, one
worker) with DEBUG off and CONSOLE_LOCAL_HTTP=true.

The only change to the text is the port (8000 may be taken). Every curl fails the script on an
HTTP error (a `curl` function adds `--fail-with-body`), so a 422, 404 or 409 anywhere fails the
test."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def quick_start() -> str:
    text = README.read_text()
    section = text.split("## API quick start", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_readme_quick_start_runs_as_written_on_a_fresh_console(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_", "CONSOLE_"))
    }
    env |= {
        "CONSOLE_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_DEBUG": "false",
        "CONSOLE_LOCAL_HTTP": "true",
        "DJANGO_SECRET_KEY": "quickstart-" + "k" * 60,
        "COMPACTION_AUTO_ENQUEUE": "false",
    }
    manage = [sys.executable, "manage.py"]

    def run(*args: str) -> None:
        subprocess.run([*manage, *args], cwd=ROOT, env=env, check=True, capture_output=True)

    run("migrate", "--noinput")
    run("shell", "-c", "from telemetry.seeding import ensure_defaults; ensure_defaults()")
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "console.wsgi",
            "--config",
            "python:console.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "8",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.3)
        script = quick_start().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        prelude = (
            "set -euo pipefail\n"
            'curl() { command curl --fail-with-body "$@"; echo; }\n'
            f"cd {tmp_path}\n"
            f"ln -s {ROOT / '.venv'} .venv\nln -s {ROOT / 'manage.py'} manage.py\n"
        )
        result = subprocess.run(
            ["bash", "-c", prelude + script],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    answers = [
        json.loads(line) for line in result.stdout.splitlines() if line.startswith(("{", "["))
    ]
    compact = next(a for a in answers if isinstance(a, dict) and a.get("mode") == "manual")
    assert compact["status"] == "applied" and compact["archived"] is True
    searched = [a for a in answers if isinstance(a, list) and a and "snippet" in a[0]]
    assert searched and "<mark>" in searched[0][0]["snippet"]
    whole = answers[-1]
    assert (
        isinstance(whole, dict) and len(whole["log"]) == 14
    )  # the system prompt (seq 0) and 13 messages
    assert re.search(r'"surface_version": ?\d+', result.stdout)
