"""The Anthropic adapter, with the real `anthropic` SDK against the fake provider and the live
console: surface swap (exactly the console's surface, D1 breakpoints), overflow recovery (D4),
streaming, round signals (D8), the async client, and the 60-round loop of the issue's
"Done when"."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anthropic
import pytest

from compaction.models import CompactionRun, LogMessage, OverflowEvent
from context_console import AsyncConsole, Console, ReportingOptions
from context_console.anthropic import wrap
from context_console.conversation import RoundLimitReached
from context_console.fake_provider import FakeProvider, Reply, tokens_of
from context_console.records import jsonable
from telemetry.models import AgentProfile, AgentSession, LLMCall
from telemetry.policy_store import update_policy
from telemetry.relief_dispatch import wait_for_publisher

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful engineer. " * 20
TOOLS = [{"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}]


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def as_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A string content is one text block to the API: a breakpoint needs the block form."""
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if isinstance(m["content"], str)
        else m
        for m in messages
    ]


def markers(value: Any) -> int:
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(markers(v) for v in value.values())
    if isinstance(value, list):
        return sum(markers(v) for v in value)
    return 0


def wait_for_relief(external_id: str, timeout: float = 60) -> None:
    """Until the session has no relief job pending: the publisher thread (in this process, the
    live server's) has sent what ingest claimed, and the worker has finished and released the
    claim (`AgentSession.relief_requested_at` back to NULL)."""
    assert wait_for_publisher(timeout=timeout)
    deadline = time.monotonic() + timeout
    while AgentSession.objects.filter(
        external_id=external_id, relief_requested_at__isnull=False
    ).exists():
        assert time.monotonic() < deadline, f"relief of {external_id} did not finish"
        time.sleep(0.05)


def sdk(provider: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=provider.url, api_key="test", max_retries=0)


class Agent:
    """A plain Anthropic tool loop, as an agent writes it: the history grows by the reply and
    the tool's result; the adapter is the only difference."""

    def __init__(self, client: Any, result_chars: int = 2000) -> None:
        self.client = client
        self.history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
        self.result_chars = result_chars
        self.rounds = 0

    def step(self, **extra: Any) -> Any:
        reply = self.client.messages.create(
            model=MODEL,
            max_tokens=1024,
            system=SYSTEM,
            tools=TOOLS,
            messages=self.history,
            **extra,
        )
        if extra.get("stream"):
            events = list(reply)
            assert events[-1].type == "message_stop"
            return events
        self.rounds += 1
        self.history.append({"role": "assistant", "content": reply.content})
        calls = [b for b in reply.content if b.type == "tool_use"]
        body = f"round {self.rounds}: " + ("log line\n" * (self.result_chars // 9))
        self.history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": body} for c in calls
                ],
            }
        )
        return reply


def test_surface_swap_sends_exactly_the_consoles_surface_with_d1_breakpoints(console, provider):
    session = console.session("swap")
    client = wrap(sdk(provider), session, use_surface=True)
    agent = Agent(client)
    for _ in range(5):
        agent.step()
    assert console.flush(10)
    accepted = provider.accepted("anthropic")
    assert len(accepted) == 5
    calls = list(LLMCall.objects.filter(session__external_id="swap").order_by("call"))
    assert [c.call for c in calls] == [0, 1, 2, 3, 4] and {c.turn for c in calls} == {0}
    for call, request in zip(calls, accepted, strict=True):
        expected = session.console.request(
            "GET", f"{session.state.path}/surface", params={"version": call.surface_version}
        ).json()
        sent = without_cache_control(request.body["messages"])
        assert as_blocks(sent) == as_blocks(expected["messages"])
        assert len(sent) == len(expected["messages"])
        assert without_cache_control(request.body["system"]) == [
            {"type": "text", "text": expected["system"]}
        ]
        # D1: one slot on the system block, two rolling on the history tail; never over four
        assert markers(request.body) <= 4
        assert request.body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert request.body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert request.body["tools"] == TOOLS
    # round N+1 reads round N's prefix from the cache
    assert all(r.usage["cache_read_input_tokens"] > 0 for r in accepted[1:])
    assert calls[-1].cache_read > calls[-1].uncached_input + calls[-1].cache_write_5m
    # the log holds every message the agent had, the replies included (system at seq 0)
    log = LogMessage.objects.filter(session__external_id="swap").order_by("seq")
    assert [m.role for m in log] == ["system"] + [m["role"] for m in agent.history[:-1]]


def test_a_session_opened_in_another_format_is_logged_as_anthropic(console, provider):
    """The wrapper, not the session's constructor, says what it logs (as the OpenAI one does):
    a session opened with format="openai" still appends the system prompt and the replies."""
    client = wrap(sdk(provider), console.session("other-format", format="openai"))
    agent = Agent(client)
    for _ in range(2):
        agent.step()
    assert console.flush(10)
    log = LogMessage.objects.filter(session__external_id="other-format").order_by("seq")
    assert [m.role for m in log] == ["system"] + [m["role"] for m in agent.history[:-1]]


def test_without_use_surface_the_callers_request_is_untouched(console, provider):
    client = wrap(sdk(provider), console.session("passthrough"))
    agent = Agent(client)
    for _ in range(3):
        agent.step()
    sent = provider.accepted()[-1].body
    assert sent["system"] == SYSTEM and markers(sent) == 0
    assert len(sent["messages"]) == 5
    assert console.flush(10)
    assert LLMCall.objects.filter(session__external_id="passthrough").count() == 3
    assert LogMessage.objects.filter(session__external_id="passthrough").count() == 7


def test_overflow_is_recovered_once_and_a_second_overflow_surfaces_the_error(console, provider):
    client = wrap(sdk(provider), console.session("overflow"), use_surface=True)
    agent = Agent(client, result_chars=6000)
    for _ in range(6):
        agent.step()
    before = len(provider.requests)
    provider.inject_overflow(1)
    agent.step()  # 400 -> /overflow -> one retry on the new surface -> success
    assert len(provider.requests) == before + 2
    rejected, retried = provider.requests[-2:]
    assert rejected.status == 400 and retried.status == 200
    assert client.context.overflows_recovered == 1
    event = OverflowEvent.objects.get(session__external_id="overflow")
    assert event.recovered and event.run is not None and event.run.mode == "overflow"
    assert "prompt is too long" in event.detail
    assert client.context.last_surface_version > event.surface_version

    provider.inject_overflow(2)
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        agent.step()
    assert client.context.overflows_failed == 1
    assert OverflowEvent.objects.filter(session__external_id="overflow").count() == 3
    # the agent goes on afterwards
    agent.step()
    assert console.flush(10)


def test_an_overflow_without_use_surface_retries_on_the_consoles_surface(console, provider):
    client = wrap(sdk(provider), console.session("overflow-passthrough"))
    agent = Agent(client)
    agent.step()
    provider.inject_overflow(1)
    agent.step()
    retried = provider.requests[-1]
    assert retried.status == 200 and markers(retried.body) > 0  # the surface, with breakpoints
    assert client.context.overflows_recovered == 1


def test_streaming_is_passed_through_then_logged_and_reported(console, provider):
    client = wrap(sdk(provider), console.session("stream"), use_surface=True)
    agent = Agent(client)
    agent.step()
    events = agent.step(stream=True)
    assert {e.type for e in events} >= {"message_start", "content_block_delta", "message_delta"}
    assert console.flush(10)
    streamed = LLMCall.objects.get(session__external_id="stream", call=1)
    usage = provider.accepted()[-1].usage
    assert streamed.raw_usage["output_tokens"] == usage["output_tokens"]
    assert streamed.cache_read == usage["cache_read_input_tokens"] > 0
    assert streamed.request_id == "req_000002"
    last = LogMessage.objects.filter(session__external_id="stream").order_by("-seq").first()
    assert last.role == "assistant" and "tool_use" in last.raw


def test_round_signals_are_exposed_and_only_enforced_when_asked(console, provider):
    profile = AgentProfile.objects.get(name="default")
    update_policy(profile=profile, values={"round_soft_limit": 2, "round_hard_cap": 3})
    client = wrap(sdk(provider), console.session("rounds"))
    agent = Agent(client)
    states = []
    for _ in range(4):
        agent.step()
        states.append(client.context.signal.state)
    assert states == ["none", "nudge", "stop", "stop"]  # exposed, control flow unchanged
    assert client.context.signal.nudge_text == console.policy()["nudge_text"]

    nudged = wrap(
        sdk(provider), console.session("rounds-nudged"), inject_nudge=True, enforce_stop=True
    )
    agent = Agent(nudged)
    agent.step()
    agent.step()
    assert "re-read your instructions" not in str(provider.accepted()[-1].body["messages"])
    agent.step()  # the soft limit reached: the nudge rides the last user message
    assert str(provider.accepted()[-1].body["messages"][-1]["content"][-1]["text"]).startswith(
        "You have taken"
    )
    with pytest.raises(RoundLimitReached):
        agent.step()
    # a new user input opens a new turn: the count starts again (the refused call sent nothing)
    agent.history[-1]["content"].append({"type": "text", "text": "Now something else."})
    agent.step()
    assert nudged.context.signal.turn == 1


def test_the_async_client_does_the_same(live_server, agent_key, provider):
    async def scenario() -> tuple[int, int]:
        async with AsyncConsole(
            live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01)
        ) as console:
            client = wrap(
                anthropic.AsyncAnthropic(base_url=provider.url, api_key="t", max_retries=0),
                console.session("async-adapter"),
                use_surface=True,
            )
            history: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]
            for round_number in range(3):
                if round_number == 2:
                    provider.inject_overflow(1)
                reply = await client.messages.create(
                    model=MODEL, max_tokens=100, system=SYSTEM, tools=TOOLS, messages=history
                )
                history.append({"role": "assistant", "content": reply.content})
                history.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": b.id, "content": "ok " * 500}
                            for b in reply.content
                            if b.type == "tool_use"
                        ],
                    }
                )
            stream = await client.messages.create(
                model=MODEL,
                max_tokens=100,
                system=SYSTEM,
                tools=TOOLS,
                messages=history,
                stream=True,
            )
            async for _ in stream:
                pass
            assert await console.aflush(10)
            return client.context.overflows_recovered, console.dropped

    recovered, dropped = asyncio.run(scenario())
    assert recovered == 1 and dropped == 0
    assert LLMCall.objects.filter(session__external_id="async-adapter").count() == 4
    assert LogMessage.objects.filter(session__external_id="async-adapter").count() == 9


def test_a_console_that_is_down_costs_the_agent_no_error(refused_console_url, provider):
    console = Console(
        refused_console_url,
        "clc_nobody",
        timeout=0.5,
        reporting=ReportingOptions(max_retries=1, backoff_seconds=0.01),
    )
    client = wrap(sdk(provider), console.session("down"), use_surface=True)
    agent = Agent(client)
    start = time.monotonic()
    for _ in range(4):
        agent.step()
    elapsed = time.monotonic() - start
    assert elapsed < 4 * 0.5  # at most one console timeout, then the breaker skips it
    sent = provider.accepted()[-1].body
    assert markers(sent) == 0 and sent["system"] == SYSTEM
    assert len(sent["messages"]) == 7  # the caller's own history
    assert console.flush(10)
    assert console.dropped == 0 and console.spooled == 4  # kept for the console's return
    console.close()


@pytest.mark.celery_worker
def test_sixty_rounds_with_use_surface_never_exceed_the_window(
    live_server, agent_key, make_provider, settings, celery_worker
):
    """The issue's "Done when": a 60-round loop through the adapter against the fake provider
    never sends more than the window; the console prunes/summarizes (a real worker runs the
    automatic relief), the adapter recovers from one injected overflow, and the log still holds
    every original message."""
    settings.COMPACTION_AUTO_ENQUEUE = True
    window = 40_000
    provider = make_provider(window_tokens=window)
    console = Console(live_server.url, agent_key, reporting=ReportingOptions(synchronous=True))
    client = wrap(sdk(provider), console.session("sixty"), use_surface=True, window_tokens=window)
    agent = Agent(client, result_chars=6000)
    for round_number in range(60):
        if round_number == 45:
            provider.inject_overflow(1)
        agent.step()
        # the worker relieves in the background, as it would for a slower agent: wait for the
        # job this round asked for (if any) instead of a fixed pause a slow machine outruns
        wait_for_relief("sixty")
    assert len(provider.accepted()) == 60
    # the one overflow was the injected one: no request the adapter sent was over the window
    assert [r.injected for r in provider.requests if r.status != 200] == [True]
    assert max(r.prompt_tokens for r in provider.requests) <= window
    full_history = tokens_of(len(json.dumps(jsonable(agent.history[:-1]))))
    assert full_history > 2 * window  # without the console the loop would have hit the wall
    assert provider.accepted()[-1].prompt_tokens < window
    assert client.context.overflows_recovered == 1
    assert OverflowEvent.objects.filter(session__external_id="sixty").count() == 1
    runs = CompactionRun.objects.filter(session__external_id="sixty", status="applied")
    assert runs.filter(mode="auto").exists()
    assert client.context.signal.state == "nudge"  # D8: 60 rounds passed round_soft_limit (40)
    # every original message is in the log, byte for byte as the agent's SDK dumped it
    log = list(LogMessage.objects.filter(session__external_id="sixty").order_by("seq"))
    assert len(log) == 1 + len(agent.history) - 1  # system + everything but the unsent last result
    assert [m.role for m in log[1:]] == [m["role"] for m in agent.history[:-1]]
    for logged, original in zip(log[1:], agent.history[:-1], strict=True):
        raw = json.loads(logged.raw)
        raw.pop("seq")
        assert raw == jsonable(original)  # the full tool results, never the stubs
    console.close()


@pytest.fixture
def refused_console_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_reply_text_of_the_fake_provider_is_scriptable(make_provider):
    provider = make_provider(responder=lambda api, body, n: Reply(text=f"hi {n}"))
    reply = sdk(provider).messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    assert reply.content[0].text == "hi 1"


def test_prefix_fingerprints_let_the_console_name_a_volatile_system_prompt(console, provider):
    """D1/D2: the adapter reports what it sent, segment by segment; a system prompt that carries
    a clock breaks the cache, and the console names the segment and the D2 violation."""
    client = wrap(sdk(provider), console.session("volatile"))
    history: list[dict[str, Any]] = [{"role": "user", "content": "Summarise the incident. " * 300}]
    for minute in range(3):
        system = [
            {
                "type": "text",
                "text": f"Current time: 12:0{minute}. " + "Follow the runbook carefully. " * 300,
                "cache_control": {"type": "ephemeral"},
            }
        ]
        reply = client.messages.create(model=MODEL, max_tokens=100, system=system, messages=history)
        history += [
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": "And then? " * 200},
        ]
    assert console.flush(10)
    call = LLMCall.objects.filter(session__external_id="volatile").order_by("turn", "call").last()
    assert [s["name"] for s in call.prefix][:2] == ["system", "message 0"]
    assert call.prefix[0]["text"].startswith("Current time: 12:02.")
    misses = console.request("GET", "/api/v1/sessions/volatile/cache/misses").json()
    causes = {(m["cause"], m["detail"].get("segment")) for m in misses["misses"]}
    assert ("prefix_break", "system") in causes
    assert any("12:0" in " ".join(m["detail"].get("diff", [])) for m in misses["misses"])


def test_the_sdk_stream_helper_is_logged_reported_and_recovers_from_overflow(console, provider):
    client = wrap(sdk(provider), console.session("stream-helper"), use_surface=True)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Tell me."}]
    with client.messages.stream(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=history
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "Answer 1."
    history += [{"role": "assistant", "content": text}, {"role": "user", "content": "More."}]
    provider.inject_overflow(1)
    with client.messages.stream(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=history
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Answer 3."
    assert client.context.overflows_recovered == 1
    assert console.flush(10)
    calls = LLMCall.objects.filter(session__external_id="stream-helper").order_by("turn")
    assert [c.request_id for c in calls] == ["req_000001", "req_000003"]
    log = [
        json.loads(m.raw)
        for m in LogMessage.objects.filter(session__external_id="stream-helper").order_by("seq")
    ]
    assert [m["role"] for m in log] == ["system", "user", "assistant", "user", "assistant"]
    assert log[-1]["content"] == [{"type": "text", "text": "Answer 3."}]
