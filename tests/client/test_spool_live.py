"""Reports survive a console outage: the live console is stopped while the agent keeps
reporting, then started again on the same address; the stored calls are the calls made, each
once, and those made during the outage keep the time they were made."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from context_console import Console, ReportingOptions
from telemetry.models import LLMCall
from tests.live import free_port

USAGE = {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}


class StoppingServer(ThreadedWSGIServer):
    """The live server's HTTP server, which also ends its open connections when it stops, as a
    stopped process would (the stock one keeps serving kept-alive connections)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        # Started again on the same address at once: the closed connections' TIME_WAIT must not
        # keep the port (the live server binds without SO_REUSEADDR).
        super().__init__(*args, **{**kwargs, "allow_reuse_address": True})

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._open_lock:
            for connection in self._open:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


def start_console(address: str) -> LiveServer:
    server = LiveServer(address, start=False)
    server.thread.server_class = StoppingServer  # type: ignore[attr-defined]  # a class attribute the stubs omit
    server.start()
    return server


def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_calls_reported_while_the_console_is_down_are_stored_once_after_it_restarts(
    agent_key, settings
):
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    address = f"127.0.0.1:{free_port()}"
    options = ReportingOptions(
        linger_seconds=0.01, max_retries=1, backoff_seconds=0.05, max_backoff_seconds=0.2
    )
    with override_settings(SECURE_SSL_REDIRECT=False):
        server = start_console(address)
        console = Console(server.url, agent_key, reporting=options)
        session = console.session("outage")
        try:
            for _ in range(5):
                session.report(USAGE, model="claude-sonnet-4-6")
            assert console.flush(20)
            wait_until(lambda: LLMCall.objects.filter(session__external_id="outage").count() == 5)
            assert console.spooled == 0

            server.stop()
            session.report(USAGE, model="claude-sonnet-4-6")
            assert console.flush(30)  # tried, then spooled: the outage is known
            for _ in range(19):
                session.report(USAGE, model="claude-sonnet-4-6")
            assert console.flush(30)
            assert console.spooled == 20 and console.dropped == 0
            down_until = datetime.now(UTC)
            time.sleep(0.05)

            server = start_console(address)  # the console again, on the same address
            for _ in range(5):
                session.report(USAGE, model="claude-sonnet-4-6")
            assert console.flush(20)
            wait_until(lambda: console.spooled == 0)
            wait_until(lambda: LLMCall.objects.filter(session__external_id="outage").count() >= 30)
        finally:
            console.close()
            server.stop()

    stored = list(LLMCall.objects.filter(session__external_id="outage").order_by("turn", "call"))
    assert [(c.turn, c.call) for c in stored] == [(0, n) for n in range(30)]  # each once
    assert console.dropped == 0 and console.stats.rejected == 0
    assert console.stats.sent == 30
    # Reported during the outage: stored with the time of the call, not of the replay (the
    # first of them was on the wire before the outage was known, and is stamped on arrival).
    assert stored[5].at > down_until
    assert all(c.at <= down_until for c in stored[6:25])
    assert all(c.at > down_until for c in stored[25:])
