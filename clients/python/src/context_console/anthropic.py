"""Anthropic adapter: `client = wrap(anthropic.Anthropic(), session)`.

`client.messages.create(...)` then appends the caller's new messages and the reply to the
console's log, reports the usage with the request id, and, with `use_surface=True`, sends the
console's surface (with D1's cache breakpoints) instead of the caller's history. A 400 "prompt
is too long" is reported to `/overflow` and the call retried once on the new surface (D4); a
second overflow raises the provider's error. `client.context.signal` is D8's round signal.
Everything else on the client is the SDK's own.

What is Anthropic's own lives here (the rest is `context_console.adapter`): the system prompt
travels beside the messages (seq 0 in the log), the surface gets D1's cache breakpoints and the
nudge joins the last user message (`_request`); a stream is a sequence of typed events that
rebuild the message block by block (`_Accumulator`); and the SDK's `messages.stream(...)`
helper is a context manager that makes the request on entry (`_StreamManager`).
"""

from __future__ import annotations

import json
from typing import Any, overload

import anthropic

from context_console.adapter import (
    AdapterOptions,
    AsyncEndpoint,
    AsyncLink,
    Endpoint,
    Link,
    LinkBase,
    Prepared,
    Wire,
    WrappedClient,
    checked_session,
)
from context_console.client import AsyncSession, Session, Surface
from context_console.conversation import Conversation, add_nudge_anthropic, place_breakpoints
from context_console.records import field_of, jsonable

__all__ = ["AsyncContextAnthropic", "ContextAnthropic", "wrap"]


@overload
def wrap(
    client: anthropic.AsyncAnthropic,
    session: AsyncSession | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    cache_breakpoints: bool = True,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> AsyncContextAnthropic: ...


@overload
def wrap(
    client: anthropic.Anthropic,
    session: Session | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    cache_breakpoints: bool = True,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> ContextAnthropic: ...


def wrap(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic,
    session: Session | AsyncSession | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    cache_breakpoints: bool = True,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> ContextAnthropic | AsyncContextAnthropic:
    """Wrap an Anthropic client (sync or async) for one console session (format `anthropic`,
    as the OpenAI wrapper sets `openai`). Without `session`, the console comes from
    CONTEXT_CONSOLE_URL / CONTEXT_CONSOLE_KEY."""
    options = AdapterOptions(
        use_surface=use_surface,
        cache_breakpoints=cache_breakpoints,
        inject_nudge=inject_nudge,
        enforce_stop=enforce_stop,
        window_tokens=window_tokens,
    )
    if isinstance(client, anthropic.AsyncAnthropic):
        refusal = "an AsyncAnthropic client needs an AsyncConsole session"
        async_session = checked_session(session, session_id, AsyncSession, refusal)
        async_session.state.format = "anthropic"
        link = AsyncLink(async_session, options, Conversation("anthropic"))
        return AsyncContextAnthropic(client, link)
    refusal = "an Anthropic client needs a (synchronous) Console session"
    sync_session = checked_session(session, session_id, Session, refusal)
    sync_session.state.format = "anthropic"  # what this wrapper logs, whatever the session said
    return ContextAnthropic(client, Link(sync_session, options, Conversation("anthropic")))


def _history(params: dict[str, Any], link: LinkBase) -> tuple[list[Any], Any]:
    return list(params.get("messages") or []), params.get("system")


def _request(params: dict[str, Any], link: LinkBase, surface: Surface | None) -> dict[str, Any]:
    """The keyword arguments actually sent: the caller's, or the surface with breakpoints."""
    sent = dict(params)
    if surface is not None:
        system = surface.system if surface.system is not None else params.get("system")
        messages: list[dict[str, Any]] = list(surface.messages)
        if link.options.cache_breakpoints:
            ttl = (link.policy or {}).get("cache_ttl")
            system, messages = place_breakpoints(system, messages, ttl, tools=params.get("tools"))
        sent["messages"] = messages
        if system is not None:
            sent["system"] = system
    nudge = link.nudge()
    if nudge:
        sent["messages"] = add_nudge_anthropic([dict(jsonable(m)) for m in sent["messages"]], nudge)
    link.last_request = sent
    return sent


def _reply(message: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": jsonable(field_of(message, "content")) or []}


class _Accumulator:
    """Rebuilds the final message (content and usage) from the stream's events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.partial: dict[int, str] = {}
        self.done = False

    def add(self, event: Any) -> None:
        kind = field_of(event, "type")
        if kind == "message_start":
            self.message = jsonable(field_of(event, "message"))
            if self.message is not None:
                self.message.setdefault("content", [])
            return
        message = self.message
        if message is None:
            return
        index = field_of(event, "index")
        if kind == "content_block_start":
            message["content"].append(jsonable(field_of(event, "content_block")))
        elif kind == "content_block_delta" and isinstance(index, int):
            delta = jsonable(field_of(event, "delta"))
            block = message["content"][index]
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                self.partial[index] = self.partial.get(index, "") + delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif delta.get("type") == "signature_delta":
                block["signature"] = delta.get("signature", "")
        elif kind == "content_block_stop" and isinstance(index, int) and index in self.partial:
            text = self.partial.pop(index)
            message["content"][index]["input"] = json.loads(text) if text else {}
        elif kind == "message_delta":
            delta = jsonable(field_of(event, "delta")) or {}
            message.update(
                {k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")}
            )
            usage = jsonable(field_of(event, "usage")) or {}
            message.setdefault("usage", {}).update(usage)
        elif kind == "message_stop":
            self.done = True

    def final(self) -> dict[str, Any] | None:
        return self.message


_MESSAGES = Wire(
    history=_history,
    request=_request,
    reply=_reply,
    accumulator=_Accumulator,
    request_id_header="request-id",
    errors=anthropic.APIStatusError,
)


class _Messages(Endpoint):
    def __init__(self, messages: Any, link: Link) -> None:
        super().__init__(messages, link, _MESSAGES)

    def stream(self, **params: Any) -> _StreamManager:
        """`with client.messages.stream(...) as stream:` — the SDK's helper stream, logged and
        reported when the block ends."""
        return _StreamManager(self._resource, self._link, params)


class _AsyncMessages(AsyncEndpoint):
    def __init__(self, messages: Any, link: AsyncLink) -> None:
        super().__init__(messages, link, _MESSAGES)

    def stream(self, **params: Any) -> _AsyncStreamManager:
        """`async with client.messages.stream(...) as stream:`, logged and reported at its end."""
        return _AsyncStreamManager(self._resource, self._link, params)


class _StreamManagerBase:
    """The SDK's `messages.stream(...)` context manager, entered (the request is made then)
    through the link; when the block ends without an error, its final message is logged and
    reported."""

    def __init__(self, messages: Any, params: dict[str, Any]) -> None:
        self._messages = messages
        self._params = params
        self._manager: Any = None
        self._stream: Any = None
        self._used: Prepared | None = None

    def _entered(self, manager: Any, stream: Any) -> Any:
        self._manager = manager
        return stream

    def _finished(self, exc_type: Any) -> Prepared | None:
        """What was sent, when the block ended well and its final message is to be reported."""
        if exc_type is None and self._stream is not None:
            return self._used
        return None


class _StreamManager(_StreamManagerBase):
    def __init__(self, messages: Any, link: Link, params: dict[str, Any]) -> None:
        super().__init__(messages, params)
        self._link = link

    def __enter__(self) -> Any:
        link, params = self._link, self._params
        prepared = link.before(*_history(params, link))

        def attempt(surface: Surface | None) -> Any:
            manager = self._messages.stream(**_request(params, link, surface))
            return self._entered(manager, manager.__enter__())  # the request is made here

        self._stream, self._used = link.call(prepared, attempt, anthropic.APIStatusError)
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        try:
            used = self._finished(exc[0])
            if used is not None:
                message = self._stream.get_final_message()
                self._link.after(used, message, _reply(message), request_id=self._stream.request_id)
        finally:
            if self._manager is not None:
                self._manager.__exit__(*exc)


class _AsyncStreamManager(_StreamManagerBase):
    def __init__(self, messages: Any, link: AsyncLink, params: dict[str, Any]) -> None:
        super().__init__(messages, params)
        self._link = link

    async def __aenter__(self) -> Any:
        link, params = self._link, self._params
        prepared = await link.before(*_history(params, link))

        async def attempt(surface: Surface | None) -> Any:
            manager = self._messages.stream(**_request(params, link, surface))
            return self._entered(manager, await manager.__aenter__())

        self._stream, self._used = await link.call(prepared, attempt, anthropic.APIStatusError)
        return self._stream

    async def __aexit__(self, *exc: Any) -> None:
        try:
            used = self._finished(exc[0])
            if used is not None:
                message = await self._stream.get_final_message()
                await self._link.after(
                    used, message, _reply(message), request_id=self._stream.request_id
                )
        finally:
            if self._manager is not None:
                await self._manager.__aexit__(*exc)


class ContextAnthropic(WrappedClient):
    """An `anthropic.Anthropic` whose `messages.create` goes through the console.
    `context` holds the link: `context.signal` (D8), `context.session`, counters."""

    context: Link

    def __init__(self, client: anthropic.Anthropic, link: Link) -> None:
        super().__init__(client, link)
        self.messages = _Messages(client.messages, link)


class AsyncContextAnthropic(WrappedClient):
    """The `anthropic.AsyncAnthropic` flavour of `ContextAnthropic`."""

    context: AsyncLink

    def __init__(self, client: anthropic.AsyncAnthropic, link: AsyncLink) -> None:
        super().__init__(client, link)
        self.messages = _AsyncMessages(client.messages, link)
