"""The console's Compact now shows the run of its own request after a summarizer failure, even
when another run of the session failed after it (defect of issue 17: it showed the latest)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from compaction.models import CompactionRun
from telemetry.models import AgentKey, AgentSession
from tests.db.test_console_views import fragment, key, state_of, worked_session

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["key"]  # fixtures this module uses

OTHER_ERROR = "another run of this session failed meanwhile"


@pytest.fixture
def summarizer_meanwhile() -> Iterator[tuple[str, list[AgentSession]]]:
    """A summarizer endpoint that fails (HTTP 500), and records another failed run of the session first
    (as a concurrent automatic run would): the newest failed run is then not the request's."""
    sessions: list[AgentSession] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            for session in sessions:
                CompactionRun.objects.create(
                    session=session, mode="auto", status="failed", error=OTHER_ERROR
                )
            connection.close()
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sessions
    finally:
        server.shutdown()
        server.server_close()


def test_compact_now_shows_its_own_failed_run_not_the_newest(
    client_as: Callable[[str], Client],
    key: AgentKey,
    settings: Any,
    summarizer_meanwhile: tuple[str, list[AgentSession]],
) -> None:
    url, sessions = summarizer_meanwhile
    session = worked_session(key, compact=False)
    sessions.append(session)
    settings.COMPACTION_SUMMARIZER_URL = url
    before = state_of(session)

    response = client_as("operator").post(
        reverse("session_compact", args=[session.pk]), headers={"HX-Request": "true"}
    )

    assert response.status_code == 200
    shown = fragment(response)
    own = CompactionRun.objects.filter(session=session, mode="manual").get()
    newest_failed = CompactionRun.objects.filter(session=session, status="failed").latest("pk")
    assert own.status == "failed" and newest_failed.pk != own.pk  # the case the defect was
    outcome = shown[shown.index('class="outcome-panel') :].split("</div>", 1)[0]
    assert "Not applied" in outcome and "SummarizerError" in outcome
    assert OTHER_ERROR not in outcome  # the runs table lists the other run too, rightly
    assert state_of(session) == before
