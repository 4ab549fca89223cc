"""LangChain v1 middleware: `create_agent(..., middleware=[ContextConsoleMiddleware(console)])`.

Each model call appends the conversation (system prompt and messages, converted to the OpenAI
Chat format) to the console's log and reports the call's usage (the provider's raw usage from
`response_metadata` when the chat model keeps it, else `AIMessage.usage_metadata`). With
`use_surface=True`, `wrap_model_call` swaps the model-visible messages for the console's
surface through `ModelRequest.override(messages=...)`: the agent's state (and its checkpointer)
keeps the full history untouched, only what the model sees shrinks — the log/surface split.
A context-length error goes to `/overflow` and the call is retried once on the new surface.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langchain_core.messages.utils import convert_to_openai_messages

from context_console.adapter import (
    AdapterOptions,
    AsyncLink,
    Link,
    LinkBase,
    Prepared,
    recover_async,
)
from context_console.client import AsyncConsole, Console, Surface
from context_console.conversation import Conversation
from context_console.records import ANTHROPIC, OPENAI_CHAT, OTEL

__all__ = ["ContextConsoleMiddleware", "usage_of"]

_R = TypeVar("_R")


def usage_of(message: AIMessage) -> tuple[dict[str, Any], str, str | None] | None:
    """(usage, provider format, model) of a model's reply: the provider's raw usage when the
    integration kept it in `response_metadata`, else `usage_metadata` as OTel GenAI keys
    (LangChain's input count includes cache reads and writes, as OTel's does)."""
    meta = message.response_metadata or {}
    model = meta.get("model_name") or meta.get("model")
    raw = meta.get("usage")
    if isinstance(raw, dict) and "input_tokens" in raw and "output_tokens" in raw:
        return dict(raw), ANTHROPIC, model
    raw = meta.get("token_usage")
    if isinstance(raw, dict) and "prompt_tokens" in raw:
        return dict(raw), OPENAI_CHAT, model
    usage = message.usage_metadata
    if not usage:
        return None
    details = usage.get("input_token_details") or {}
    output_details = usage.get("output_token_details") or {}
    otel: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage["input_tokens"],
        "gen_ai.usage.output_tokens": usage["output_tokens"],
    }
    if "cache_read" in details:
        otel["gen_ai.usage.cache_read.input_tokens"] = details["cache_read"]
    if "cache_creation" in details:
        otel["gen_ai.usage.cache_creation.input_tokens"] = details["cache_creation"]
    if "reasoning" in output_details:
        otel["gen_ai.usage.reasoning.output_tokens"] = output_details["reasoning"]
    return otel, OTEL, model


def _history(request: ModelRequest[Any]) -> list[dict[str, Any]]:
    messages: list[BaseMessage] = list(request.messages)
    if request.system_message is not None:
        messages = [request.system_message, *messages]
    converted = convert_to_openai_messages(messages)
    return converted if isinstance(converted, list) else [converted]


def _surface_messages(surface: Surface) -> list[Any]:
    """The surface as LangChain messages, without the system prompt (the request keeps its own
    `system_message`)."""
    body = [m for m in surface.messages if m.get("role") not in ("system", "developer")]
    return list(convert_to_messages(body))


def _reply(response: ModelResponse[Any]) -> tuple[AIMessage | None, dict[str, Any] | None]:
    for message in response.result:
        if isinstance(message, AIMessage):
            converted = convert_to_openai_messages([message])
            reply = converted[0] if isinstance(converted, list) and converted else None
            return message, reply if isinstance(reply, dict) else None
    return None, None


def _session_id(default: str | None) -> str:
    if default:
        return default
    try:
        from langgraph.config import get_config

        thread = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # outside a graph run
        thread = None
    return str(thread) if thread else "default"


class ContextConsoleMiddleware(AgentMiddleware):
    """Reports, logs and (optionally) surfaces every model call of a LangChain agent.

    `console`: a `Console` (sync agents; async runs use it from a worker thread) or an
    `AsyncConsole` (async agents only). `session_id`: the console session; by default the
    run's `thread_id`, so each checkpointed thread is its own session.
    """

    def __init__(
        self,
        console: Console | AsyncConsole,
        *,
        session_id: str | None = None,
        use_surface: bool = False,
        window_tokens: int | None = None,
        inject_nudge: bool = False,
        enforce_stop: bool = False,
    ) -> None:
        super().__init__()
        self.console = console
        self.session_id = session_id
        self.options = AdapterOptions(
            use_surface=use_surface,
            cache_breakpoints=False,
            inject_nudge=inject_nudge,
            enforce_stop=enforce_stop,
            window_tokens=window_tokens,
        )
        self.links: dict[str, LinkBase] = {}

    # --- links ------------------------------------------------------------------------------

    def link(self, session_id: str | None = None) -> LinkBase:
        """The link of a session (by default the current run's): `link().signal` is D8's."""
        name = _session_id(session_id or self.session_id)
        found = self.links.get(name)
        if found is None:
            if isinstance(self.console, AsyncConsole):
                found = AsyncLink(
                    self.console.session(name, format="openai"),
                    self.options,
                    Conversation("openai"),
                )
            else:
                found = Link(
                    self.console.session(name, format="openai"),
                    self.options,
                    Conversation("openai"),
                )
            self.links[name] = found
        return found

    def _request(
        self, request: ModelRequest[Any], link: LinkBase, surface: Surface | None
    ) -> ModelRequest[Any]:
        messages: list[Any] | None = None
        if surface is not None:
            messages = _surface_messages(surface)
        nudge = link.nudge()
        if nudge:
            from langchain_core.messages import HumanMessage

            messages = [
                *(messages if messages is not None else request.messages),
                HumanMessage(nudge),
            ]
        system = request.system_message.text if request.system_message is not None else None
        link.last_request = {
            "system": system,
            "messages": convert_to_openai_messages(
                messages if messages is not None else request.messages
            ),
        }
        if messages is None:
            return request
        return request.override(messages=messages)

    @staticmethod
    def _outcome(response: ModelResponse[Any]) -> tuple[Any, dict[str, Any] | None, dict[str, Any]]:
        """(usage, reply, report keywords) of a model call; usage None when there is none to
        report (the call still counts as a round)."""
        message, reply = _reply(response)
        found = usage_of(message) if message is not None else None
        if message is None or found is None:
            return None, reply, {}
        usage, provider, model = found
        return usage, reply, {"provider": provider, "model": model, "request_id": message.id}

    def _after(self, link: Link, used: Prepared, response: ModelResponse[Any]) -> None:
        usage, reply, report = self._outcome(response)
        if usage is None:
            link.conversation.end_call()
        else:
            link.after(used, usage, reply, **report)

    # --- sync -------------------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        link = self.link()
        if not isinstance(link, Link):
            raise TypeError("an AsyncConsole serves async agents only (ainvoke/astream)")
        prepared = link.before(_history(request))
        response, used = link.call(
            prepared, lambda surface: handler(self._request(request, link, surface))
        )
        self._after(link, used, response)
        return response

    # --- async ------------------------------------------------------------------------------

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        link = self.link()
        run = link if isinstance(link, AsyncLink) else _InThread(link)
        prepared = await run.before(_history(request))

        async def attempt(surface: Surface | None) -> ModelResponse[Any]:
            return await handler(self._request(request, link, surface))

        response, used = await run.call(prepared, attempt)
        usage, reply, report = self._outcome(response)
        if usage is None:
            link.conversation.end_call()
        else:
            await run.after(used, usage, reply, **report)
        return response


class _InThread:
    """A sync `Link` seen from an async agent: each console call runs in a worker thread, off
    the event loop (a `Console` serves sync and async runs alike)."""

    def __init__(self, link: LinkBase) -> None:
        assert isinstance(link, Link)
        self.link = link

    async def before(self, history: list[Any]) -> Prepared:
        return await asyncio.to_thread(self.link.before, history)

    async def call(
        self, prepared: Prepared, attempt: Callable[[Surface | None], Awaitable[_R]]
    ) -> tuple[_R, Prepared]:
        link = self.link

        async def overflow(
            error: BaseException, prepared: Prepared, sent: Surface | None
        ) -> Surface | None:
            return await asyncio.to_thread(link.overflow, error, prepared, sent)

        async def overflow_again(error: BaseException, surface: Surface | None) -> None:
            await asyncio.to_thread(link.overflow_again, error, surface)

        return await recover_async(link, prepared, attempt, Exception, overflow, overflow_again)

    async def after(
        self, prepared: Prepared, response: Any, reply: dict[str, Any] | None, **report: Any
    ) -> None:
        await asyncio.to_thread(self.link.after, prepared, response, reply, **report)
