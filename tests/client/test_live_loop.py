"""Issue 40's "Done when", the live loop: the real `anthropic` and `openai` SDKs through the
adapters, a fake provider that refuses requests above 100,000 tokens, a real console (the live
server, behind a proxy this test stops for 30 s mid-loop and starts again on the same port) and
a real worker,
60 rounds of growing tool results. No agent call fails and no request carries a stale surface
(each is the agent's own history or a surface that follows all of it).

Relief keeps up (at most one overflow once the window is known) and every call is reported
exactly once (the client's on-disk report spool carries the outage's reports)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest
from pytest_django.live_server_helper import LiveServer

from context_console import Console, ReportingOptions
from context_console.anthropic import wrap as wrap_anthropic
from context_console.fake_provider import FakeProvider, tokens_of
from context_console.openai import wrap as wrap_openai
from context_console.records import jsonable
from telemetry.models import LLMCall
from tests.client.test_log_behind import check_every_request

WINDOW = 100_000
ROUNDS = 60
OUTAGE_FROM = 25
OUTAGE_SECONDS = 30.0
SYSTEM = "You are a careful engineer."
TOOLS = [{"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
]


def result_of(number: int) -> str:
    """A tool result growing with the round: 2,000 chars, then 250 more each round (the whole
    history ends near 140,000 tokens, well past the window)."""
    return f"round {number}: " + "log line\n" * ((2_000 + 250 * number) // 9)


class Outage:
    """A TCP proxy in front of the live console that can be stopped (its port refuses, every
    open connection is cut: the console is gone for a client, keep-alive or not) and started
    again on the same port. The console's own server keeps its data; only the route is cut."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.listener: socket.socket | None = None
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.port = 0
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            connections, self.connections = self.connections, []
        if listener is not None:
            # shutdown wakes the accept() blocked in `_accept` (close alone does not on Linux:
            # that accept would still take one more connection, which nothing would cut)
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            host, port = self.upstream.hostname or "localhost", self.upstream.port or 80
            with self.lock:
                stopped = self.listener is not listener
            if stopped:  # accepted as the proxy stopped: refused like the rest
                client.close()
                return
            server = socket.create_connection((host, port))
            with self.lock:
                self.connections += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@pytest.fixture
def outage(live_server: LiveServer) -> Iterator[Outage]:
    proxy = Outage(live_server.url)
    try:
        yield proxy
    finally:
        proxy.stop()


class AnthropicAgent:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.history: list[Any] = [{"role": "user", "content": "Fix the build."}]
        self.calls: list[tuple[int, int, list[Any]]] = []

    def step(self, provider: FakeProvider, number: int) -> None:
        first = len(provider.requests)
        reply = self.client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=256,
            system=SYSTEM,
            tools=TOOLS,
            messages=self.history,
        )
        self.calls.append((first, len(provider.requests), list(self.history)))
        self.history.append({"role": "assistant", "content": reply.content})
        self.history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": result_of(number)}
                    for b in reply.content
                    if b.type == "tool_use"
                ],
            }
        )


class OpenAIAgent:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.history: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Fix the build."},
        ]
        self.calls: list[tuple[int, int, list[Any]]] = []

    def step(self, provider: FakeProvider, number: int) -> None:
        first = len(provider.requests)
        completion = self.client.chat.completions.create(
            model="gpt-5", messages=self.history, tools=OPENAI_TOOLS
        )
        self.calls.append((first, len(provider.requests), list(self.history)))
        message = completion.choices[0].message
        calls = [c.model_dump() for c in message.tool_calls or []]
        self.history.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        self.history += [
            {"role": "tool", "tool_call_id": c["id"], "content": result_of(number)} for c in calls
        ]


@pytest.mark.celery_worker
def test_the_live_loop_survives_a_console_outage_with_no_failed_call_and_no_stale_surface(
    outage, agent_key, settings, celery_worker
):
    settings.COMPACTION_AUTO_ENQUEUE = True
    reporting = ReportingOptions(linger_seconds=0.01)
    # A timeout above the first request's (a fresh server on a loaded machine): the breaker is
    # to open for the outage, not before it.
    console = Console(outage.url, agent_key, timeout=10.0, reporting=reporting)
    console.policy()
    with FakeProvider(window_tokens=WINDOW) as claude, FakeProvider(window_tokens=WINDOW) as gpt:
        anthropic_agent = AnthropicAgent(
            wrap_anthropic(
                anthropic.Anthropic(base_url=claude.url, api_key="k", max_retries=0),
                console.session("live-anthropic"),
                use_surface=True,
            )
        )
        openai_agent = OpenAIAgent(
            wrap_openai(
                openai.OpenAI(base_url=gpt.url + "/v1", api_key="k", max_retries=0),
                console.session("live-openai", format="openai"),
                use_surface=True,
            )
        )
        stopped_at: float | None = None
        for number in range(ROUNDS):
            if number == OUTAGE_FROM:
                outage.stop()
                stopped_at = time.monotonic()
            if stopped_at is not None:
                if time.monotonic() - stopped_at >= OUTAGE_SECONDS:
                    outage.start()
                    stopped_at = None
                else:
                    time.sleep(1.0)  # an agent's pace while the console is away
            anthropic_agent.step(claude, number)  # raises if an agent call failed
            openai_agent.step(gpt, number)
        assert stopped_at is None, "the loop ended before the console came back"

        check_every_request(anthropic_agent.calls, claude)
        check_every_request(openai_agent.calls, gpt)
        for agent, provider in ((anthropic_agent, claude), (openai_agent, gpt)):
            link = agent.client.context
            assert len(provider.accepted()) == ROUNDS
            assert link.overflows_failed == 0
            # the outage was worked through on local surfaces
            assert link.local_surfaces > 0, (link.breaker.failures, link.breaker.last_error)
            # Not asserted: that the console's surface is used again by the end. When the outage
            # cuts an append whose row the console did store, the client re-sends that seq from
            # the caller's copy, whose bytes differ from the reply it logged; the hashes then
            # disagree and the client stays on its own (valid, relieved) surfaces.
        # the history outgrew the window: without relief (the console's or local) calls fail
        for agent in (anthropic_agent, openai_agent):
            assert tokens_of(len(json.dumps(jsonable(agent.history)))) > WINDOW

    for provider in (claude, gpt):
        # the first overflow is how the window becomes known (no window_tokens is passed)
        after_known = sum(r.status != 200 for r in provider.requests) - 1
        assert after_known <= 1, f"{after_known} overflows once the window was known"
    assert console.flush(30)
    # flush waits for the queue; the spool of the outage's reports replays in the background
    deadline = time.monotonic() + 60
    while console.spooled and time.monotonic() < deadline:
        time.sleep(0.2)
    assert console.spooled == 0
    reported = LLMCall.objects.filter(
        session__external_id__in=("live-anthropic", "live-openai")
    ).count()
    assert reported == 2 * ROUNDS  # every call once: through the outage by the report spool
    console.close()
