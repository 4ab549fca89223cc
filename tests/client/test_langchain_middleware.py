"""The LangChain v1 middleware in a real `create_agent` graph (langchain-anthropic's ChatAnthropic
against the fake provider, an in-memory checkpointer) and the live console."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from compaction.models import LogMessage, OverflowEvent
from context_console import AsyncConsole, ReportingOptions
from context_console.fake_provider import FakeProvider, Reply
from context_console.langchain import ContextConsoleMiddleware, usage_of
from telemetry.models import LLMCall

SYSTEM = "You are a careful engineer."


def three_lookups(api: str, body: dict[str, Any], number: int) -> Reply:
    """Calls `lookup` until three results are in, then answers."""
    results = sum(
        1
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    )
    if results >= 3:
        return Reply(text=f"Done after {results} lookups.")
    return Reply(tool_calls=(("lookup", {"query": f"q{results}"}),))


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"result for {query}: " + "data " * 400


def run_agent(
    provider: FakeProvider, middleware: list[Any], thread: str, question: str = "Find it."
) -> tuple[Any, InMemorySaver]:
    model = ChatAnthropic(
        model="claude-sonnet-4-6", base_url=provider.url, api_key="test", max_retries=0
    )
    saver = InMemorySaver()
    agent = create_agent(
        model, tools=[lookup], system_prompt=SYSTEM, middleware=middleware, checkpointer=saver
    )
    config = {"configurable": {"thread_id": thread}}
    agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
    return agent.get_state(config).values, saver


def comparable(messages: list[Any]) -> list[dict[str, Any]]:
    """A checkpointed message without the ids that are random per run (human/tool uuids)."""
    out = []
    for message in messages:
        data = message.model_dump()
        data.pop("id", None)
        if isinstance(message, AIMessage):
            data["response_metadata"].pop("id", None)
        out.append(data)
    return out


def test_the_checkpointed_state_is_identical_with_and_without_the_middleware(
    console, make_provider
):
    plain_state, _ = run_agent(make_provider(responder=three_lookups), [], "plain")
    middleware = ContextConsoleMiddleware(console, use_surface=True)
    provider = make_provider(responder=three_lookups)
    state, saver = run_agent(provider, [middleware], "with-console")
    assert comparable(state["messages"]) == comparable(plain_state["messages"])
    assert len(state["messages"]) == 8  # human, 3 x (ai, tool), final ai
    assert set(state) == set(plain_state)

    # every model call reported once, from the provider's raw usage
    assert console.flush(10)
    calls = list(LLMCall.objects.filter(session__external_id="with-console").order_by("call"))
    assert [c.call for c in calls] == [0, 1, 2, 3]
    assert {c.provider for c in calls} == {"anthropic"}
    assert [c.raw_usage["output_tokens"] for c in calls] == [
        r.usage["output_tokens"] for r in provider.accepted()
    ]
    # the conversation is in the log, the system prompt first and the final answer last
    log = [
        json.loads(m.raw)
        for m in LogMessage.objects.filter(session__external_id="with-console").order_by("seq")
    ]
    assert [m["role"] for m in log] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert log[0]["content"] == SYSTEM and log[-1]["content"] == "Done after 3 lookups."


def test_the_model_sees_the_surface_while_the_state_keeps_everything(console, make_provider):
    """The deferred log/surface split: after a compaction, the next model call sees the pruned
    surface (tool results as head + marker + tail stubs) through ModelRequest.override, while
    the checkpointed state still holds every tool result whole."""

    def eight_lookups(api: str, body: dict[str, Any], number: int) -> Reply:
        results = str(body["messages"]).count("'tool_result'")
        if results >= 8:
            return Reply(text="Done.")
        return Reply(tool_calls=(("lookup", {"query": f"q{results}"}),))

    provider = make_provider(responder=eight_lookups)
    middleware = ContextConsoleMiddleware(console, use_surface=True)
    model = ChatAnthropic(
        model="claude-sonnet-4-6", base_url=provider.url, api_key="t", max_retries=0
    )
    saver = InMemorySaver()
    agent = create_agent(
        model, tools=[lookup], system_prompt=SYSTEM, middleware=[middleware], checkpointer=saver
    )
    config = {"configurable": {"thread_id": "lc-split"}}
    agent.invoke({"messages": [{"role": "user", "content": "Find it."}]}, config)
    run = console.session("lc-split", format="openai").compact()
    assert run["status"] == "applied" and run["tokens_after"] < run["tokens_before"]

    agent.invoke({"messages": [{"role": "user", "content": "Summarise."}]}, config)
    seen = provider.accepted()[-1].body["messages"]
    sent_results = [
        b
        for m in seen
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert "[Summary of" in json.dumps(seen)  # the model saw the compacted surface
    state = agent.get_state(config).values["messages"]
    kept = [m.content for m in state if m.type == "tool"]
    assert len(sent_results) < len(kept)
    whole = len(lookup.invoke({"query": "q0"}))
    assert all(k.startswith("result for q") and len(k) == whole for k in kept)  # nothing lost
    assert [m.type for m in state][:2] == ["human", "ai"] and state[0].content == "Find it."
    assert middleware.link("lc-split").last_surface_version > run["surface_version"]


def test_an_overflow_inside_the_agent_is_recovered_once(console, make_provider):
    provider = make_provider(responder=three_lookups)
    middleware = ContextConsoleMiddleware(console, use_surface=True, session_id="lc-overflow")
    model = ChatAnthropic(
        model="claude-sonnet-4-6", base_url=provider.url, api_key="t", max_retries=0
    )
    agent = create_agent(model, tools=[lookup], system_prompt=SYSTEM, middleware=[middleware])
    provider.inject_overflow(1)
    out = agent.invoke({"messages": [{"role": "user", "content": "Go."}]})
    assert out["messages"][-1].content == "Done after 3 lookups."
    assert middleware.link("lc-overflow").overflows_recovered == 1
    assert (
        OverflowEvent.objects.filter(session__external_id="lc-overflow", recovered=True).count()
        == 1
    )
    provider.inject_overflow(2)
    with pytest.raises(Exception, match="prompt is too long"):
        agent.invoke({"messages": [{"role": "user", "content": "Again."}]})


def test_the_async_agent_with_an_async_console(live_server, agent_key, make_provider):
    provider = make_provider(responder=three_lookups)

    async def scenario() -> list[Any]:
        async with AsyncConsole(
            live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01)
        ) as console:
            middleware = ContextConsoleMiddleware(console, use_surface=True)
            model = ChatAnthropic(
                model="claude-sonnet-4-6", base_url=provider.url, api_key="t", max_retries=0
            )
            agent = create_agent(
                model,
                tools=[lookup],
                system_prompt=SYSTEM,
                middleware=[middleware],
                checkpointer=InMemorySaver(),
            )
            out = await agent.ainvoke(
                {"messages": [{"role": "user", "content": "Async."}]},
                {"configurable": {"thread_id": "lc-async"}},
            )
            assert await console.aflush(10)
            return out["messages"]

    messages = asyncio.run(scenario())
    assert len(messages) == 8
    assert LLMCall.objects.filter(session__external_id="lc-async").count() == 4
    assert LogMessage.objects.filter(session__external_id="lc-async").count() == 9


def test_usage_of_falls_back_to_usage_metadata_as_otel_keys():
    message = AIMessage(
        content="x",
        usage_metadata={
            "input_tokens": 100,
            "output_tokens": 10,
            "total_tokens": 110,
            "input_token_details": {"cache_read": 80, "cache_creation": 5},
            "output_token_details": {"reasoning": 4},
        },
        response_metadata={"model_name": "some-model"},
    )
    assert usage_of(message) == (
        {
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10,
            "gen_ai.usage.cache_read.input_tokens": 80,
            "gen_ai.usage.cache_creation.input_tokens": 5,
            "gen_ai.usage.reasoning.output_tokens": 4,
        },
        "otel",
        "some-model",
    )
