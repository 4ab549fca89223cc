"""Anthropic adapter: `client = wrap(anthropic.Anthropic(), session)`.

`client.messages.create(...)` then appends the caller's new messages and the reply to the
console's log, reports the usage with the request id, and, with `use_surface=True`, sends the
console's surface (with D1's cache breakpoints) instead of the caller's history. A 400 "prompt
is too long" is reported to `/overflow` and the call retried once on the new surface (D4); a
second overflow raises the provider's error. `client.context.signal` is D8's round signal.
Everything else on the client is the SDK's own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, overload

import anthropic

from context_console.adapter import (
    AdapterOptions,
    AsyncLink,
    Link,
    LinkBase,
    Prepared,
    session_from_env,
)
from context_console.client import AsyncSession, Session, Surface
from context_console.conversation import (
    Conversation,
    add_nudge_anthropic,
    is_overflow,
    place_breakpoints,
)
from context_console.records import jsonable

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
    """Wrap an Anthropic client (sync or async) for one console session. Without `session`, the
    console comes from CONTEXT_CONSOLE_URL / CONTEXT_CONSOLE_KEY."""
    options = AdapterOptions(
        use_surface=use_surface,
        cache_breakpoints=cache_breakpoints,
        inject_nudge=inject_nudge,
        enforce_stop=enforce_stop,
        window_tokens=window_tokens,
    )
    if isinstance(client, anthropic.AsyncAnthropic):
        if session is None:
            session = session_from_env(session_id, asynchronous=True)
        if not isinstance(session, AsyncSession):
            raise TypeError("an AsyncAnthropic client needs an AsyncConsole session")
        return AsyncContextAnthropic(client, AsyncLink(session, options, Conversation("anthropic")))
    if session is None:
        session = session_from_env(session_id, asynchronous=False)
    if not isinstance(session, Session):
        raise TypeError("an Anthropic client needs a (synchronous) Console session")
    return ContextAnthropic(client, Link(session, options, Conversation("anthropic")))


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
    return {"role": "assistant", "content": jsonable(_field(message, "content")) or []}


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


class _Accumulator:
    """Rebuilds the final message (content and usage) from the stream's events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.partial: dict[int, str] = {}
        self.done = False

    def add(self, event: Any) -> None:
        kind = _field(event, "type")
        if kind == "message_start":
            self.message = jsonable(_field(event, "message"))
            if self.message is not None:
                self.message.setdefault("content", [])
            return
        message = self.message
        if message is None:
            return
        index = _field(event, "index")
        if kind == "content_block_start":
            message["content"].append(jsonable(_field(event, "content_block")))
        elif kind == "content_block_delta" and isinstance(index, int):
            delta = jsonable(_field(event, "delta"))
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
            delta = jsonable(_field(event, "delta")) or {}
            message.update(
                {k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")}
            )
            usage = jsonable(_field(event, "usage")) or {}
            message.setdefault("usage", {}).update(usage)
        elif kind == "message_stop":
            self.done = True


def _stream_request_id(stream: Any) -> str | None:
    response = getattr(stream, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("request-id")
    return str(value) if value else None


class _Stream:
    """The SDK's stream, passed through event by event; at its end the reply is logged and the
    usage reported."""

    def __init__(self, stream: Any, finish: Any) -> None:
        self._stream = stream
        self._finish = finish
        self._acc = _Accumulator()
        self._finished = False

    def __iter__(self) -> Iterator[Any]:
        for event in self._stream:
            self._acc.add(event)
            yield event
        self._complete()

    def _complete(self) -> None:
        if not self._finished and self._acc.message is not None:
            self._finished = True
            self._finish(self._acc.message, _stream_request_id(self._stream))

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._complete()
        self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _AsyncStream:
    def __init__(self, stream: Any, finish: Any) -> None:
        self._stream = stream
        self._finish = finish
        self._acc = _Accumulator()
        self._finished = False

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self._stream:
            self._acc.add(event)
            yield event
        await self._complete()

    async def _complete(self) -> None:
        if not self._finished and self._acc.message is not None:
            self._finished = True
            await self._finish(self._acc.message, _stream_request_id(self._stream))

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._complete()
        await self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _send(
    link: Link,
    params: dict[str, Any],
    surface: Surface | None,
    send: Callable[[dict[str, Any]], Any],
) -> tuple[Any, Surface | None]:
    """Send; on a context-length error report it (D4) and retry once on the new surface."""
    try:
        return send(_request(params, link, surface)), surface
    except anthropic.APIStatusError as exc:
        if not is_overflow(exc):
            raise
        surface = link.overflow(exc, surface)
        if surface is None:
            raise
        try:
            result = send(_request(params, link, surface))
        except anthropic.APIStatusError as again:
            if is_overflow(again):
                link.overflow_again(again, surface)
            raise
        link.overflows_recovered += 1
        return result, surface


async def _asend(
    link: AsyncLink,
    params: dict[str, Any],
    surface: Surface | None,
    send: Callable[[dict[str, Any]], Awaitable[Any]],
) -> tuple[Any, Surface | None]:
    try:
        return await send(_request(params, link, surface)), surface
    except anthropic.APIStatusError as exc:
        if not is_overflow(exc):
            raise
        surface = await link.overflow(exc, surface)
        if surface is None:
            raise
        try:
            result = await send(_request(params, link, surface))
        except anthropic.APIStatusError as again:
            if is_overflow(again):
                await link.overflow_again(again, surface)
            raise
        link.overflows_recovered += 1
        return result, surface


def _used(link: LinkBase, prepared: Prepared, surface: Surface | None) -> Prepared:
    link.last_surface_version = surface.version if surface is not None else None
    return Prepared(prepared.plan, prepared.history_length, surface, prepared.logged)


class _Messages:
    def __init__(self, messages: Any, link: Link) -> None:
        self._messages = messages
        self._link = link

    def create(self, **params: Any) -> Any:
        link = self._link
        prepared = link.before(list(params.get("messages") or []), params.get("system"))
        response, surface = _send(
            link, params, prepared.surface, lambda sent: self._messages.create(**sent)
        )
        used = _used(link, prepared, surface)
        if params.get("stream"):

            def finish(message: dict[str, Any], request_id: str | None) -> None:
                link.after(used, message, _reply(message), request_id=request_id)

            return _Stream(response, finish)
        link.after(used, response, _reply(response))
        return response

    def stream(self, **params: Any) -> _StreamManager:
        """`with client.messages.stream(...) as stream:` — the SDK's helper stream, logged and
        reported when the block ends."""
        return _StreamManager(self._messages, self._link, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._messages, name)


class _StreamManager:
    def __init__(self, messages: Any, link: Link, params: dict[str, Any]) -> None:
        self._messages = messages
        self._link = link
        self._params = params
        self._manager: Any = None
        self._stream: Any = None
        self._used: Prepared | None = None

    def __enter__(self) -> Any:
        link, params = self._link, self._params
        prepared = link.before(list(params.get("messages") or []), params.get("system"))

        def send(sent: dict[str, Any]) -> Any:
            manager = self._messages.stream(**sent)
            stream = manager.__enter__()  # the request is made here
            self._manager = manager
            return stream

        self._stream, surface = _send(link, params, prepared.surface, send)
        self._used = _used(link, prepared, surface)
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None and self._stream is not None and self._used is not None:
                message = self._stream.get_final_message()
                self._link.after(
                    self._used, message, _reply(message), request_id=self._stream.request_id
                )
        finally:
            if self._manager is not None:
                self._manager.__exit__(*exc)


class _AsyncMessages:
    def __init__(self, messages: Any, link: AsyncLink) -> None:
        self._messages = messages
        self._link = link

    async def create(self, **params: Any) -> Any:
        link = self._link
        prepared = await link.before(list(params.get("messages") or []), params.get("system"))

        async def send(sent: dict[str, Any]) -> Any:
            return await self._messages.create(**sent)

        response, surface = await _asend(link, params, prepared.surface, send)
        used = _used(link, prepared, surface)
        if params.get("stream"):

            async def finish(message: dict[str, Any], request_id: str | None) -> None:
                await link.after(used, message, _reply(message), request_id=request_id)

            return _AsyncStream(response, finish)
        await link.after(used, response, _reply(response))
        return response

    def stream(self, **params: Any) -> _AsyncStreamManager:
        """`async with client.messages.stream(...) as stream:`, logged and reported at its end."""
        return _AsyncStreamManager(self._messages, self._link, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._messages, name)


class _AsyncStreamManager:
    def __init__(self, messages: Any, link: AsyncLink, params: dict[str, Any]) -> None:
        self._messages = messages
        self._link = link
        self._params = params
        self._manager: Any = None
        self._stream: Any = None
        self._used: Prepared | None = None

    async def __aenter__(self) -> Any:
        link, params = self._link, self._params
        prepared = await link.before(list(params.get("messages") or []), params.get("system"))

        async def send(sent: dict[str, Any]) -> Any:
            manager = self._messages.stream(**sent)
            stream = await manager.__aenter__()
            self._manager = manager
            return stream

        self._stream, surface = await _asend(link, params, prepared.surface, send)
        self._used = _used(link, prepared, surface)
        return self._stream

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None and self._stream is not None and self._used is not None:
                message = await self._stream.get_final_message()
                await self._link.after(
                    self._used, message, _reply(message), request_id=self._stream.request_id
                )
        finally:
            if self._manager is not None:
                await self._manager.__aexit__(*exc)


class ContextAnthropic:
    """An `anthropic.Anthropic` whose `messages.create` goes through the console.
    `context` holds the link: `context.signal` (D8), `context.session`, counters."""

    def __init__(self, client: anthropic.Anthropic, link: Link) -> None:
        self._client = client
        self.context = link
        self.messages = _Messages(client.messages, link)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class AsyncContextAnthropic:
    """The `anthropic.AsyncAnthropic` flavour of `ContextAnthropic`."""

    def __init__(self, client: anthropic.AsyncAnthropic, link: AsyncLink) -> None:
        self._client = client
        self.context = link
        self.messages = _AsyncMessages(client.messages, link)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
