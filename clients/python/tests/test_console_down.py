"""A console that is down (refused, 500, too slow) costs the agent's calls no error and at most
the configured delay, and loses no report: each waits in the spool. The real SDKs talk to the
fake provider; the console is a refused port or a scripted server."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import openai
import pytest

from context_console import Console, ReportingOptions
from context_console.anthropic import wrap as wrap_anthropic
from context_console.fake_provider import FakeProvider
from context_console.openai import wrap as wrap_openai

TIMEOUT = 0.3
CALLS = 5


def anthropic_loop(client: Any, calls: int) -> list[float]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    durations = []
    for _ in range(calls):
        start = time.monotonic()
        reply = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=50, system="S", tools=tools, messages=history
        )
        durations.append(time.monotonic() - start)
        history.append({"role": "assistant", "content": reply.content})
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                    for b in reply.content
                    if b.type == "tool_use"
                ],
            }
        )
    return durations


@pytest.fixture
def provider():
    with FakeProvider() as fake:
        yield fake


def console_for(url: str) -> Console:
    return Console(
        url,
        "clc_test",
        timeout=TIMEOUT,
        reporting=ReportingOptions(max_retries=1, backoff_seconds=0.01, timeout_seconds=TIMEOUT),
    )


@pytest.mark.parametrize("failure", ["refused", "500", "slow"])
def test_the_anthropic_adapter_carries_on_without_the_console(
    failure, provider, scripted, refused_url
):
    if failure == "refused":
        url = refused_url
    elif failure == "500":
        url = scripted(lambda n, body: (500, {}, {"detail": "down"})).url
    else:
        url = scripted(delay=2 * TIMEOUT).url
    console = console_for(url)
    client = wrap_anthropic(
        anthropic.Anthropic(base_url=provider.url, api_key="k", max_retries=0),
        console.session("down"),
        use_surface=True,
    )
    durations = anthropic_loop(client, CALLS)
    baseline = anthropic_loop(
        anthropic.Anthropic(base_url=provider.url, api_key="k", max_retries=0), 1
    )[0]
    # one console timeout at most (then the breaker leaves it alone), never an error
    # Without the breaker every call would wait for policy, append and surface: >= 3 x 5 x 0.3 s.
    assert sum(durations) - CALLS * baseline < TIMEOUT + 1.2
    assert not client.context.breaker.allows()  # left alone after the first failure
    assert client.context.breaker.failures >= 1
    assert len(provider.accepted()) == CALLS + 1
    assert provider.accepted()[-2].body["system"] == "S"  # the caller's own request went out
    assert console.flush(20)
    assert console.dropped == 0 and console.spooled == CALLS
    console.close()


def test_the_openai_adapter_carries_on_without_the_console(provider, refused_url):
    console = console_for(refused_url)
    client = wrap_openai(
        openai.OpenAI(base_url=provider.url + "/v1", api_key="k", max_retries=0),
        console.session("down", format="openai"),
        use_surface=True,
    )
    history: list[Any] = [{"role": "user", "content": "Hi"}]
    client.chat.completions.create(model="gpt-5", messages=history)
    client.responses.create(model="gpt-5", input="Hi")
    stream = client.chat.completions.create(model="gpt-5", messages=history, stream=True)
    assert list(stream)
    assert console.flush(20)
    assert console.dropped == 0 and console.spooled == 3
    console.close()
