"""A stale surface never reaches the model: the console's log falls behind the agent's history
(a failed append, the client's breaker open, an outage) while the history outgrows the
provider's window, and every request the fake provider receives is either the agent's own
history or a surface that follows all of it. The real SDKs talk to the fake provider; the
console is the live server behind a transport that fails on demand."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from compaction.models import LogMessage
from context_console import AsyncConsole, Console, ReportingOptions
from context_console.anthropic import wrap as wrap_anthropic
from context_console.fake_provider import FakeProvider, Recorded
from context_console.openai import wrap as wrap_openai
from context_console.records import jsonable

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful engineer."
TOOLS = [{"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
]
WINDOW = 6_000
RESULT_CHARS = 3_000
ROUNDS = 14
FAILING = range(3, 10)  # the rounds during which the console's log falls behind


class Failing:
    """Which console requests fail: `None` (none), "append" (every `POST /messages` answers
    422, so the breaker stays closed), "once" (the next request is refused: the breaker opens
    while the console is up) or "all" (an outage: every request is refused)."""

    def __init__(self) -> None:
        self.mode: str | None = None

    def refuses(self, request: httpx.Request) -> httpx.Response | None:
        if self.mode == "all" or self.mode == "once":
            if self.mode == "once":
                self.mode = None
            raise httpx.ConnectError("refused (test)", request=request)
        if self.mode == "append" and request.url.path.endswith("/messages"):
            return httpx.Response(422, json={"detail": "messages: refused (test)"})
        return None


class FlakyTransport(httpx.HTTPTransport):
    def __init__(self, failing: Failing) -> None:
        super().__init__()
        self.failing = failing

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.failing.refuses(request) or super().handle_request(request)


class AsyncFlakyTransport(httpx.AsyncHTTPTransport):
    def __init__(self, failing: Failing) -> None:
        super().__init__()
        self.failing = failing

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return self.failing.refuses(request) or await super().handle_async_request(request)


def plain(value: Any) -> Any:
    """A message as JSON values, without cache_control markers (transport, not content) and
    with a string content as its one text block (a breakpoint needs the block form)."""
    value = jsonable(value)
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and value.get("role") in ("user", "assistant"):
            value = {**value, "content": [{"type": "text", "text": value["content"]}]}
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def call_ids(messages: list[Any]) -> tuple[list[str], list[str]]:
    """(tool call ids, tool result ids) in order, Anthropic blocks or OpenAI Chat messages."""
    calls: list[str] = []
    results: list[str] = []
    for message in messages:
        calls += [c["id"] for c in message.get("tool_calls") or []]
        if message.get("role") == "tool":
            results.append(message["tool_call_id"])
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
    return calls, results


def assert_follows(sent: list[Any], history: list[Any]) -> None:
    """`sent` is the agent's history, or a surface that follows all of it: its tool calls are
    the history's latest ones (older ones only pruned or summarized away, never a round
    missing at the end), each with its result, and it ends with the history's last message."""
    sent, history = plain(sent), plain(history)
    if sent == history:
        return
    calls, results = call_ids(sent)
    all_calls, _ = call_ids(history)
    assert calls == results, "a tool call without its result (or a result without its call)"
    assert calls == all_calls[len(all_calls) - len(calls) :], "rounds missing"
    assert calls or not all_calls, "every round missing"
    assert sent[-1] == history[-1], "the last message of the history is not the last sent"


def check_every_request(calls: list[tuple[int, int, list[Any]]], provider: FakeProvider) -> None:
    """Each call's requests (from its first index to the next call's) against its history."""
    requests: list[Recorded] = provider.requests
    for first, last, history in calls:
        assert last > first, "a call sent no request"
        for request in requests[first:last]:
            messages = request.body.get("messages")
            if request.api == "openai_chat":
                messages = [m for m in messages if m.get("role") != "system"]
                history = [m for m in history if m.get("role") != "system"]
            assert_follows(messages, history)


def tool_result(round_number: int) -> str:
    return f"round {round_number}: " + "log line\n" * (RESULT_CHARS // 9)


def run_anthropic(client: Any, provider: FakeProvider, failing: Failing, mode: str) -> Any:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
    calls: list[tuple[int, int, list[Any]]] = []
    for number in range(ROUNDS):
        failing.mode = mode if number in FAILING else None
        if number == FAILING.start + 1:
            provider.inject_overflow(1)  # an overflow while the log is behind, whatever its size
        if number == FAILING.stop:
            client.context.breaker.open_until = 0.0  # the console is back: the cooldown ends
        if mode == "all":
            client.context.breaker.cooldown = 0.0  # every call tries the console, and fails
        first = len(provider.requests)
        reply = client.messages.create(
            model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS, messages=history
        )
        calls.append((first, len(provider.requests), list(history)))
        history.append({"role": "assistant", "content": reply.content})
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": tool_result(number)}
                    for b in reply.content
                    if b.type == "tool_use"
                ],
            }
        )
    check_every_request(calls, provider)
    return history


@pytest.mark.parametrize("mode", ["append", "once", "all"])
def test_anthropic_never_sends_a_surface_behind_the_history(live_server, agent_key, mode):
    failing = Failing()
    console = Console(
        live_server.url,
        agent_key,
        transport=FlakyTransport(failing),
        reporting=ReportingOptions(linger_seconds=0.01, max_retries=0),
    )
    with FakeProvider(window_tokens=WINDOW) as provider:
        client = wrap_anthropic(
            anthropic.Anthropic(base_url=provider.url, api_key="k", max_retries=0),
            console.session(f"behind-{mode}"),
            use_surface=True,
        )
        history = run_anthropic(client, provider, failing, mode)
        link = client.context
        full = len(json.dumps(jsonable(history))) // 4
        assert full > 2 * WINDOW  # the history outgrew the window while the log was behind
        assert link.overflows_failed == 0
        assert link.overflows_recovered >= 1
        assert link.local_surfaces >= 1  # some calls went out on a surface composed here
        assert provider.accepted()[-1].body["messages"][-1]["content"][-1]["cache_control"]
        # reconciled: the log holds the whole history again, and the console's surface is used
        log = LogMessage.objects.filter(session__external_id=f"behind-{mode}").count()
        assert log == 1 + len(history) - 1  # the system prompt, everything but the last result
        assert link.last_surface_version is not None
    console.close()


def test_openai_async_never_sends_a_surface_behind_the_history_through_an_outage(
    live_server, agent_key
):
    failing = Failing()

    async def loop(provider: FakeProvider) -> tuple[Any, list[Any]]:
        console = AsyncConsole(
            live_server.url,
            agent_key,
            transport=AsyncFlakyTransport(failing),
            report_transport=FlakyTransport(failing),
            reporting=ReportingOptions(linger_seconds=0.01, max_retries=0),
        )
        client = wrap_openai(
            openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="k", max_retries=0),
            console.session("behind-openai", format="openai"),
            use_surface=True,
        )
        history: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Fix the build."},
        ]
        calls: list[tuple[int, int, list[Any]]] = []
        for number in range(ROUNDS):
            failing.mode = "all" if number in FAILING else None
            if number == FAILING.start + 1:
                provider.inject_overflow(1)
            if number == FAILING.stop:
                client.context.breaker.open_until = 0.0
            first = len(provider.requests)
            stream = await client.chat.completions.create(
                model="gpt-5", messages=history, tools=OPENAI_TOOLS, stream=True
            )
            chunks = [chunk async for chunk in stream]
            calls.append((first, len(provider.requests), list(history)))
            deltas = [
                c for chunk in chunks for ch in chunk.choices for c in ch.delta.tool_calls or []
            ]
            call_id = next(c.id for c in deltas if c.id)
            arguments = "".join(c.function.arguments or "" for c in deltas if c.function)
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": arguments},
                        }
                    ],
                }
            )
            history.append(
                {"role": "tool", "tool_call_id": call_id, "content": tool_result(number)}
            )
        await console.aclose()
        return client, calls

    with FakeProvider(window_tokens=WINDOW) as provider:
        client, calls = asyncio.run(loop(provider))
        check_every_request(calls, provider)
        assert client.context.overflows_failed == 0
        assert client.context.local_surfaces >= 1
        assert client.context.last_surface_version is not None  # the console's again at the end
