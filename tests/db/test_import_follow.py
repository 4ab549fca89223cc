"""`import_transcripts --follow` as an operator runs it: a separate process beside the agents,
polling files that appear, grow and rotate, stopped with Ctrl-C (issue 11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from telemetry.models import AgentSession, LLMCall
from tests.db.conftest import ROOT, _database_url_for_worker, wait_until
from tests.unit.imports import fixtures as fx


def test_follow_imports_new_lines_files_and_rotations_and_stops_on_ctrl_c(
    transactional_db: None, make_agent: Any, tmp_path: Path
) -> None:
    make_agent("follow")
    folder = tmp_path / "projects"
    folder.mkdir()
    lines = fx.claude_code_session(truncated=False).splitlines(keepends=True)
    main = folder / f"{fx.SESSION}.jsonl"
    main.write_text("".join(lines[:6]))
    env = os.environ.copy()
    env["DATABASE_URL"] = _database_url_for_worker()
    env["CONSOLE_VAR_DIR"] = str(settings.VAR_DIR)
    log = (tmp_path / "follow.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "import_transcripts",
            str(folder),
            "--profile",
            "follow",
            "--follow",
            "--interval",
            "0.2",
            "--quiet-seconds",
            "0.5",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    calls = LLMCall.objects.filter(session__profile__name="follow")
    try:
        wait_until(lambda: calls.filter(request_id="req_1").exists(), what="the first request")
        with main.open("a") as handle:  # the agent writes on
            handle.writelines(lines[6:])
        wait_until(lambda: calls.filter(request_id="req_s").exists(), what="the grown lines")
        (folder / "rollout-new.jsonl").write_text(fx.codex_rollout())  # a file appears
        wait_until(
            lambda: calls.filter(session__external_id=fx.CODEX_SESSION).count() == 3,
            what="the new file",
        )
        main.rename(folder / "rotated.old")  # rotation: a new file at the same path
        main.write_text(fx.codex_without_usage().replace("no-usage-0000", "rotated-0001"))
        wait_until(
            lambda: AgentSession.objects.filter(external_id="rotated-0001").exists(),
            what="the rotated file",
        )
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=30)
    output = (tmp_path / "follow.log").read_text()
    assert code == 0, output
    assert "stopped" in output
    assert "Traceback" not in output
    # Nothing was counted twice along the way.
    assert calls.filter(session__external_id=fx.SESSION).count() == 3


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_follow_stops_cleanly_when_started_in_the_background_or_by_a_service_manager(
    transactional_db: None, make_agent: Any, tmp_path: Path, stop: signal.Signals
) -> None:
    """A follower started by a non-interactive shell's `&` inherits SIGINT as ignored, and a
    service manager stops it with SIGTERM: either signal still stops it with "stopped", exit 0."""
    make_agent("follow-stop")
    (tmp_path / "projects").mkdir()
    env = os.environ.copy()
    env["DATABASE_URL"] = _database_url_for_worker()
    env["CONSOLE_VAR_DIR"] = str(settings.VAR_DIR)
    log_path = tmp_path / "follow.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "import_transcripts", str(tmp_path / "projects")]
            + ["--profile", "follow-stop", "--follow", "--interval", "0.2"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
        )
        try:
            wait_until(lambda: "following" in log_path.read_text(), what="the follower to start")
            process.send_signal(stop)
            code = process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    output = log_path.read_text()
    assert code == 0, output
    assert "stopped" in output
    assert "Traceback" not in output
