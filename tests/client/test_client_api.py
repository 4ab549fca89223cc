"""`Console` / `AsyncConsole` against the live console: every usage shape lands exactly once,
appends keep their seq, the surface is cached by ETag, compact/overflow/policy answer."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import openai
import pytest

from compaction.models import LogMessage, OverflowEvent
from context_console import AsyncConsole, Console, OverflowUnrecoverable, ReportingOptions
from telemetry.models import LLMCall

MODEL = "claude-sonnet-4-6"


class Recording(httpx.HTTPTransport):
    """A real transport that remembers each (method, path, status)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.seen.append((request.method, request.url.path, response.status_code))
        return response


def test_every_usage_shape_lands_exactly_once(console, provider):
    claude = anthropic.Anthropic(base_url=provider.url, api_key="k", max_retries=0)
    gpt = openai.OpenAI(base_url=provider.url + "/v1", api_key="k", max_retries=0)
    system = [{"type": "text", "text": "stable " * 300, "cache_control": {"type": "ephemeral"}}]
    ask = [{"role": "user", "content": "hello"}]
    claude.messages.create(model=MODEL, max_tokens=50, system=system, messages=ask)
    message = claude.messages.create(model=MODEL, max_tokens=50, system=system, messages=ask)
    chat = gpt.chat.completions.create(model="gpt-5", messages=ask)
    response = gpt.responses.create(model="gpt-5", input="hello")
    usage_dict = {"input_tokens": 7, "cache_read_input_tokens": 93, "output_tokens": 4}

    session = console.session("shapes")
    for _ in range(2):  # the second round is a replay: duplicates, not new calls
        for turn, item in enumerate([message, chat, response]):
            session.report(item, turn=turn, call=0)
        session.report(usage_dict, model=MODEL, turn=3, call=0)
    assert console.flush(20)
    assert console.dropped == 0 and console.stats.rejected == 0
    assert console.stats.sent == 8 and console.stats.duplicates == 4

    calls = {c.turn: c for c in LLMCall.objects.filter(session__external_id="shapes")}
    assert sorted(calls) == [0, 1, 2, 3]
    anthropic_call = calls[0]
    assert anthropic_call.provider == "anthropic"
    assert anthropic_call.request_id == message._request_id
    assert anthropic_call.cache_read == message.usage.cache_read_input_tokens > 0
    assert anthropic_call.uncached_input == message.usage.input_tokens
    chat_call = calls[1]
    assert chat_call.provider == "openai_chat"
    cached = chat.usage.prompt_tokens_details.cached_tokens
    assert chat_call.uncached_input == chat.usage.prompt_tokens - cached  # inclusive -> disjoint
    assert chat_call.cache_read == cached
    responses_call = calls[2]
    assert responses_call.provider == "openai_responses"
    assert responses_call.raw_usage == response.usage.model_dump(mode="json", exclude_none=True)
    assert responses_call.output == response.usage.output_tokens  # reasoning inside output
    assert calls[3].raw_usage == usage_dict


def test_append_keeps_seq_and_the_surface_is_cached_by_etag(live_server, agent_key):
    transport = Recording()
    console = Console(live_server.url, agent_key, transport=transport)
    session = console.session("etag")
    first = session.append(
        [{"role": "user", "content": "Why does the build fail?"}], system="Be careful."
    )
    assert first.appended == [0, 1] and first.log_messages == 2
    second = session.append(
        [
            {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]},
            {"role": "user", "content": "Thanks."},
        ]
    )
    assert second.appended == [2, 3]
    surface = session.surface()
    again = session.surface()
    assert again is surface  # the console answered 304 Not Modified
    surface_gets = [s for m, p, s in transport.seen if p.endswith("/surface")]
    # the first append asked for the log's length (404: a new session), then 200, then 304
    assert surface_gets == [404, 200, 304]
    assert surface.system == "Be careful."
    assert [m["role"] for m in surface.messages] == ["user", "assistant", "user"]
    assert surface.version == second.surface_version

    # A new process resumes the session: the log's length is the next seq.
    resumed = Console(live_server.url, agent_key).session("etag")
    result = resumed.append([{"role": "assistant", "content": "Done."}])
    assert result.appended == [4]
    assert list(
        LogMessage.objects.filter(session__external_id="etag").values_list("seq", flat=True)
    ) == [0, 1, 2, 3, 4]
    # A replay of the same message at its seq is a duplicate, not a second copy.
    replay = resumed.append([{"role": "assistant", "content": "Done."}], seq=4)
    assert replay.appended == [] and replay.duplicates == [4]
    console.close()
    resumed.console.close()


def test_policy_compact_and_overflow(console):
    policy = console.policy()
    assert policy["profile"] == "default" and policy["cache_ttl"] in ("5m", "1h")
    session = console.session("relief")
    messages = [{"role": "user", "content": "start"}]
    for round_number in range(8):
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{round_number}", "name": "read", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"t{round_number}",
                        "content": "x" * 6000,
                    }
                ],
            },
        ]
    session.append(messages)
    before = session.surface()
    run = session.compact()
    assert run["status"] in ("applied", "noop") and run["archived"] in (True, False)
    result = session.overflow("prompt is too long: 250000 tokens > 200000 maximum")
    assert result.surface is not None and result.run["mode"] == "overflow"
    assert result.surface.version >= before.version
    assert OverflowEvent.objects.filter(session__external_id="relief", recovered=True).count() == 1
    with pytest.raises(OverflowUnrecoverable):
        session.overflow("prompt is too long again", surface_version=result.surface.version)


def test_async_console_does_the_same(live_server, agent_key):
    async def scenario() -> tuple[list[int], int, str, int]:
        async with AsyncConsole(
            live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01)
        ) as console:
            session = console.session("async", format="openai")
            appended = await session.append(
                [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
            )
            surface = await session.surface()
            again = await session.surface()
            assert again is surface
            session.report(
                {
                    "prompt_tokens": 20,
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
                model="gpt-5",
            )
            assert await console.aflush(10)
            policy = await session.policy()
            return appended.appended, len(surface.messages), policy["profile"], console.dropped

    appended, surface_length, profile, dropped = asyncio.run(scenario())
    assert appended == [0, 1] and surface_length == 2 and profile == "default" and dropped == 0
    call = LLMCall.objects.get(session__external_id="async")
    assert call.provider == "openai_chat" and call.turn == 0 and call.call == 0


def test_errors_name_the_field(console):
    from context_console import ConsoleError

    session = console.session("bad")
    with pytest.raises(ConsoleError) as caught:
        session.append([{"role": "user", "content": "x"}], seq=5)
    assert caught.value.status == 422 and caught.value.field == "messages.0.seq"
    assert json.dumps(caught.value.body)


def test_a_session_handles_metadata_goes_with_its_first_report(console):
    from telemetry.models import AgentSession

    meta = {"title": "Nightly report", "user": "ana", "repository": "acme/reports"}
    session = console.session("named-by-client", metadata=meta)
    usage = {"input_tokens": 7, "output_tokens": 4}
    first = session.report(usage, model=MODEL)
    second = session.report(usage, model=MODEL, metadata={"branch": "main"})
    third = session.report(usage, model=MODEL)
    assert first is not None and first["metadata"] == meta
    assert second is not None and second["metadata"] == {"branch": "main"}
    assert third is not None and "metadata" not in third
    assert console.flush(20) and console.stats.rejected == 0

    stored = AgentSession.objects.get(external_id="named-by-client")
    assert (stored.title, stored.meta_user, stored.git_branch) == ("Nightly report", "ana", "main")
