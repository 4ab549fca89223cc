"""Issue 38's done-when, end to end through a real Celery worker with beat inside it: the LLM
summarizer is stopped → the automatic relief fails → the failure is seen on the overview, the
sessions list's relief filter and `/metrics` → the summarizer is started again → the sweeper
retries on its own and the relief completes.

The summarizer is a local HTTP server speaking Anthropic's Messages API on a fixed port:
"stopped" is nothing listening there (connection refused), "started" is the server back on it.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from compaction.models import CompactionRun
from compaction.relief_state import ReliefState, session_reliefs
from telemetry.models import AgentSession
from telemetry.relief_dispatch import wait_for_publisher
from tests.db.conftest import start_worker, stop_worker, wait_until
from tests.db.test_compaction_worker import session_over_threshold
from tests.db.test_relief_retry import scrape

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


class Summarizer(BaseHTTPRequestHandler):
    """Anthropic's Messages API, answering every request with a summary."""

    calls = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Summarizer.calls += 1
        body = json.dumps({"content": [{"type": "text", "text": "Summary of the span."}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class SummarizerSwitch:
    """The summarizer on one port, stopped until `start`."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Summarizer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def summarizer() -> Iterator[SummarizerSwitch]:
    switch = SummarizerSwitch()
    Summarizer.calls = 0
    try:
        yield switch
    finally:
        switch.stop()


def runs(session: AgentSession, status: str) -> list[CompactionRun]:
    return list(CompactionRun.objects.filter(session=session, mode="auto", status=status))


def test_a_stopped_summarizer_is_seen_fleet_wide_and_the_sweeper_completes_relief_once_it_is_back(
    summarizer: SummarizerSwitch,
    make_agent: Any,
    client_as: Callable[..., Client],
    client: Client,
    tmp_path: Path,
) -> None:
    worker = start_worker(
        tmp_path / "worker.log",
        extra_env={
            "COMPACTION_SUMMARIZER_URL": summarizer.url,
            "COMPACTION_JOB_MAX_RETRIES": "0",  # Celery's own retries: none, the sweeper's count
            "COMPACTION_SWEEP_INTERVAL_SECONDS": "1",
            "RELIEF_RETRY_BASE_SECONDS": "3",
            "RELIEF_RETRY_MAX_ATTEMPTS": "30",
        },
        extra_args=("--beat", "--schedule", str(tmp_path / "beat-schedule")),
    )
    try:
        # the agent crosses its threshold: ingest asks for relief, the worker tries and fails
        session = session_over_threshold(make_agent("default"), "stuck-live-1")
        wait_for_publisher()
        wait_until(
            lambda: bool(runs(session, "failed")), timeout=60, what="a failed automatic relief"
        )
        assert runs(session, "applied") == []
        assert session_reliefs([session.pk])[session.pk].state in (
            ReliefState.FAILING,
            ReliefState.GIVEN_UP,
        )
        assert "SummarizerError" in runs(session, "failed")[0].error

        # seen on the overview, in the list's filter and on /metrics
        viewer = client_as("viewer")
        overview = viewer.get(reverse("overview")).content.decode()
        section = overview[overview.index('id="relief"') :].split("</section>", 1)[0]
        assert 'id="relief-failing">1 relief failing<' in section
        assert "stuck-live-1" in section
        listed = viewer.get(reverse("sessions"), {"relief": "failing"}).content.decode()
        assert ">stuck-live-1</a>" in listed and ">relief failing</a>" in listed
        calm = viewer.get(reverse("sessions"), {"relief": "given_up"}).content.decode()
        assert "stuck-live-1" not in calm
        default = (("profile", "default"),)
        assert scrape(client)["compaction_relief_failing_sessions"][default] == 1

        # the sweeper keeps trying with backoff while the summarizer is down
        failed_before = len(runs(session, "failed"))
        wait_until(
            lambda: len(runs(session, "failed")) > failed_before,
            timeout=60,
            what="the sweeper's retry (failing again)",
        )

        # the summarizer comes back: the sweeper's next retry completes the relief by itself
        summarizer.start()
        wait_until(lambda: bool(runs(session, "applied")), timeout=90, what="the relief completed")
        assert Summarizer.calls >= 1
        applied = runs(session, "applied")[0]
        assert applied.archived is True
        wait_until(
            lambda: (
                session_reliefs([session.pk])[session.pk].state
                not in (ReliefState.FAILING, ReliefState.GIVEN_UP)
            ),
            timeout=30,
            what="the failing state to clear",
        )
        assert scrape(client)["compaction_relief_failing_sessions"][default] == 0
        listed = viewer.get(reverse("sessions"), {"relief": "failing"}).content.decode()
        assert "stuck-live-1" not in listed
        overview = viewer.get(reverse("overview")).content.decode()
        section = overview[overview.index('id="relief"') :].split("</section>", 1)[0]
        assert "relief-failing" not in section
    except BaseException:
        print(worker.log()[-6_000:])
        raise
    finally:
        stop_worker(worker)
