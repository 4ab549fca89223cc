"""The OpenAI adapter, with the real `openai` SDK against the fake provider and the live console:
chat.completions and responses, streaming, surface swap, overflow recovery."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from compaction.models import LogMessage, OverflowEvent
from context_console import AsyncConsole, ReportingOptions
from context_console.openai import chat_from_responses_input, responses_input_from_chat, wrap
from telemetry.models import LLMCall

TOOLS = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]
RESPONSE_TOOLS = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
]


def sdk(provider: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=provider.url + "/v1", api_key="test", max_retries=0)


def chat_step(client: Any, history: list[dict[str, Any]], **extra: Any) -> Any:
    completion = client.chat.completions.create(
        model="gpt-5", messages=history, tools=TOOLS, **extra
    )
    if extra.get("stream"):
        chunks = list(completion)
        assert chunks[-1].usage is not None  # the adapter asked for the usage chunk
        return chunks
    message = completion.choices[0].message
    history.append(message.model_dump(mode="json", exclude_none=True))
    for call in message.tool_calls or []:
        history.append({"role": "tool", "tool_call_id": call.id, "content": "line\n" * 800})
    return completion


def test_chat_completions_report_log_and_swap_the_surface(console, provider):
    client = wrap(sdk(provider), console.session("chat", format="openai"), use_surface=True)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Fix it."},
    ]
    for _ in range(4):
        chat_step(client, history)
    chat_step(client, history, stream=True)
    assert console.flush(10)
    calls = list(LLMCall.objects.filter(session__external_id="chat").order_by("call"))
    assert [c.call for c in calls] == [0, 1, 2, 3, 4]
    assert {c.provider for c in calls} == {"openai_chat"}
    accepted = provider.accepted()
    for call, request in zip(calls, accepted, strict=True):
        cached = request.usage["prompt_tokens_details"]["cached_tokens"]
        assert call.cache_read == cached
        assert call.uncached_input == request.usage["prompt_tokens"] - cached
        surface = (
            console.session("chat")
            .console.request(
                "GET", "/api/v1/sessions/chat/surface", params={"version": call.surface_version}
            )
            .json()
        )
        assert request.body["messages"] == surface["messages"]  # exactly the console's surface
    assert accepted[-1].body["stream_options"] == {"include_usage": True}
    assert sum(c.cache_read for c in calls[1:]) > 0  # the stable prefix is cached
    log = list(LogMessage.objects.filter(session__external_id="chat").order_by("seq"))
    assert [m.role for m in log] == [m["role"] for m in history] + ["assistant"]


def test_chat_overflow_is_recovered_once_then_surfaces(console, provider):
    client = wrap(
        sdk(provider), console.session("chat-overflow", format="openai"), use_surface=True
    )
    history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for _ in range(5):
        chat_step(client, history)
    provider.inject_overflow(1)
    chat_step(client, history)
    assert client.context.overflows_recovered == 1
    assert OverflowEvent.objects.get(session__external_id="chat-overflow").recovered
    provider.inject_overflow(2)
    with pytest.raises(openai.BadRequestError) as caught:
        chat_step(client, history)
    assert caught.value.code == "context_length_exceeded"


def responses_step(client: Any, items: list[Any], **extra: Any) -> Any:
    response = client.responses.create(model="gpt-5", input=items, tools=RESPONSE_TOOLS, **extra)
    if extra.get("stream"):
        events = list(response)
        assert events[-1].type == "response.completed"
        return events
    items += [item.model_dump(mode="json", exclude_none=True) for item in response.output]
    for item in response.output:
        if item.type == "function_call":
            items.append(
                {"type": "function_call_output", "call_id": item.call_id, "output": "row\n" * 500}
            )
    return response


def test_responses_report_log_and_swap_the_surface(console, provider):
    client = wrap(sdk(provider), console.session("responses", format="openai"), use_surface=True)
    items: list[Any] = [{"role": "user", "content": "Look around."}]
    for _ in range(3):
        responses_step(client, items)
    responses_step(client, items, stream=True)
    assert console.flush(10)
    calls = list(LLMCall.objects.filter(session__external_id="responses").order_by("call"))
    assert [c.provider for c in calls] == ["openai_responses"] * 4
    assert calls[-1].request_id == "req_000004"
    for call, request in zip(calls, provider.accepted(), strict=True):
        assert call.raw_usage == request.usage
        surface = console.request(
            "GET", "/api/v1/sessions/responses/surface", params={"version": call.surface_version}
        ).json()
        assert request.body["input"] == responses_input_from_chat(surface["messages"])
    log = [
        json.loads(m.raw)
        for m in LogMessage.objects.filter(session__external_id="responses").order_by("seq")
    ]
    assert [m["role"] for m in log] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert log[1]["tool_calls"][0]["function"]["name"] == "read_file"


def test_responses_items_and_chat_messages_convert_both_ways():
    items = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    chat = chat_from_responses_input(items)
    assert chat == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    assert chat_from_responses_input(responses_input_from_chat(chat)) == chat
    assert chat_from_responses_input("just text") == [{"role": "user", "content": "just text"}]


def test_the_async_openai_client(live_server, agent_key, provider):
    async def scenario() -> int:
        async with AsyncConsole(
            live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01)
        ) as console:
            client = wrap(
                openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="t", max_retries=0),
                console.session("async-openai", format="openai"),
                use_surface=True,
            )
            history: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
            completion = await client.chat.completions.create(model="gpt-5", messages=history)
            history.append({"role": "assistant", "content": completion.choices[0].message.content})
            history.append({"role": "user", "content": "More."})
            provider.inject_overflow(1)
            stream = await client.chat.completions.create(
                model="gpt-5", messages=history, stream=True
            )
            async for _ in stream:
                pass
            response = await client.responses.create(
                model="gpt-5",
                input=[
                    *history,
                    {"role": "assistant", "content": "x"},
                    {"role": "user", "content": "And?"},
                ],
            )
            assert response.output_text
            assert await console.aflush(10)
            return client.context.overflows_recovered

    assert asyncio.run(scenario()) == 1
    assert LLMCall.objects.filter(session__external_id="async-openai").count() == 3


def test_an_async_stream_closes_like_the_sdks_and_reports_once(live_server, agent_key, provider):
    """`await stream.close()` is the SDK's AsyncStream API; the wrapped stream keeps it (closing
    the SDK's stream too), and a call is reported once whether read out, closed or exited."""

    async def scenario() -> None:
        async with AsyncConsole(
            live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01)
        ) as console:
            client = wrap(
                openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="t", max_retries=0),
                console.session("async-close", format="openai"),
            )
            history: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
            stream = await client.chat.completions.create(
                model="gpt-5", messages=history, stream=True
            )
            async for _ in stream:
                pass
            await stream.close()
            history += [
                {"role": "assistant", "content": "Answer 1."},
                {"role": "user", "content": "And?"},
            ]
            async with await client.responses.create(
                model="gpt-5", input=history, stream=True
            ) as second:
                async for _ in second:
                    pass
            assert await console.aflush(10)

    asyncio.run(scenario())
    calls = LLMCall.objects.filter(session__external_id="async-close").order_by("turn", "call")
    assert [c.provider for c in calls] == ["openai_chat", "openai_responses"]
