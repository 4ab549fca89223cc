"""OpenAI adapter: `client = wrap(openai.OpenAI(), session)`.

`client.chat.completions.create(...)` and `client.responses.create(...)` append the new
messages and the reply to the console's log (OpenAI Chat format; Responses items are converted),
report the usage verbatim (OpenAI counts cached tokens inside the input and reasoning inside the
output; the console splits them), and with `use_surface=True` send the console's surface instead
of the caller's history. A context-length error goes to `/overflow` and the call is retried once
on the new surface (D4). `client.context.signal` is D8's round signal. A streamed chat call gets
`stream_options.include_usage` so its usage can be reported.

What is OpenAI's own lives here (the rest is `context_console.adapter`): two endpoints, each a
`Wire`. Chat keeps the system prompt among the messages, gets no cache breakpoints (OpenAI
caches prefixes by itself) and is streamed as chunks to rebuild (`_ChatAccumulator`); Responses
items are converted to and from Chat messages for the log, `previous_response_id` means the
input holds only what is new, and its stream ends with the whole response.
"""

from __future__ import annotations

import json
from typing import Any, overload

import openai

from context_console.adapter import (
    AdapterOptions,
    AsyncEndpoint,
    AsyncLink,
    Endpoint,
    Link,
    LinkBase,
    Wire,
    WrappedClient,
    checked_session,
)
from context_console.client import AsyncSession, Session, Surface
from context_console.conversation import Conversation
from context_console.records import jsonable

__all__ = [
    "AsyncContextOpenAI",
    "ContextOpenAI",
    "chat_from_responses_input",
    "responses_input_from_chat",
    "wrap",
]


@overload
def wrap(
    client: openai.AsyncOpenAI,
    session: AsyncSession | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> AsyncContextOpenAI: ...


@overload
def wrap(
    client: openai.OpenAI,
    session: Session | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> ContextOpenAI: ...


def wrap(
    client: openai.OpenAI | openai.AsyncOpenAI,
    session: Session | AsyncSession | None = None,
    *,
    session_id: str | None = None,
    use_surface: bool = False,
    inject_nudge: bool = False,
    enforce_stop: bool = False,
    window_tokens: int | None = None,
) -> ContextOpenAI | AsyncContextOpenAI:
    """Wrap an OpenAI client (sync or async) for one console session (format `openai`)."""
    options = AdapterOptions(
        use_surface=use_surface,
        cache_breakpoints=False,  # OpenAI caches prefixes automatically
        inject_nudge=inject_nudge,
        enforce_stop=enforce_stop,
        window_tokens=window_tokens,
    )
    if isinstance(client, openai.AsyncOpenAI):
        refusal = "an AsyncOpenAI client needs an AsyncConsole session"
        async_session = checked_session(session, session_id, AsyncSession, refusal)
        async_session.state.format = "openai"
        link = AsyncLink(async_session, options, Conversation("openai"))
        return AsyncContextOpenAI(client, link)
    refusal = "an OpenAI client needs a (synchronous) Console session"
    sync_session = checked_session(session, session_id, Session, refusal)
    sync_session.state.format = "openai"
    return ContextOpenAI(client, Link(sync_session, options, Conversation("openai")))


# --- Responses items <-> Chat messages -------------------------------------------------------


def _text_of(content: Any) -> Any:
    """Responses content parts as Chat content: a string when all parts are text."""
    if isinstance(content, str) or content is None:
        return content or ""
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url", "")}})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def chat_from_responses_input(items: Any) -> list[dict[str, Any]]:
    """Responses input/output items as Chat messages: messages keep role and text, function
    calls join the assistant message before them, outputs become `tool` messages. Reasoning
    items are provider state, not conversation, and are left out. Deterministic, so a history
    and its extension convert to a common prefix."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for raw in jsonable(list(items or [])):
        kind = raw.get("type", "message")
        if kind == "message":
            role = raw.get("role", "user")
            out.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _text_of(raw.get("content")),
                }
            )
        elif kind == "function_call":
            call = {
                "id": raw.get("call_id") or raw.get("id"),
                "type": "function",
                "function": {"name": raw.get("name"), "arguments": raw.get("arguments") or "{}"},
            }
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
                if out[-1].get("content") == "":
                    out[-1]["content"] = None
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = raw.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": raw.get("call_id"),
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
    return out


def responses_input_from_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The surface (Chat messages) as Responses input items: the inverse of
    `chat_from_responses_input` for everything it keeps."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": content if isinstance(content, str) else json.dumps(content),
                }
            )
            continue
        if content:
            if isinstance(content, list):
                text = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            else:
                text = str(content)
            items.append({"role": role, "content": text})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments") or "{}",
                }
            )
    return items


# --- the two endpoints' wire details (see `Wire`) ----------------------------------------


def _chat_request(
    params: dict[str, Any], link: LinkBase, surface: Surface | None
) -> dict[str, Any]:
    sent = dict(params)
    if surface is not None:
        sent["messages"] = list(surface.messages)
    nudge = link.nudge()
    if nudge:
        sent["messages"] = [*jsonable(list(sent["messages"])), {"role": "user", "content": nudge}]
    if sent.get("stream"):
        sent["stream_options"] = {**(sent.get("stream_options") or {}), "include_usage": True}
    link.last_request = sent
    return sent


def _responses_request(
    params: dict[str, Any], link: LinkBase, surface: Surface | None
) -> dict[str, Any]:
    sent = dict(params)
    if surface is not None and not params.get("previous_response_id"):
        sent["input"] = responses_input_from_chat(list(surface.messages))
    nudge = link.nudge()
    if nudge:
        current = sent.get("input")
        items = (
            [{"role": "user", "content": current}]
            if isinstance(current, str)
            else list(current or [])
        )
        sent["input"] = [*items, {"role": "user", "content": nudge}]
    link.last_request = sent
    return sent


def _chat_reply(completion: Any) -> dict[str, Any] | None:
    choices = jsonable(getattr(completion, "choices", None) or completion.get("choices") or [])
    if not choices:
        return None
    message = dict(choices[0].get("message") or {})
    message.setdefault("role", "assistant")
    message.pop("refusal", None)
    message.pop("annotations", None)
    if "content" not in message:
        message["content"] = None
    return message


def _responses_reply(response: Any) -> dict[str, Any] | None:
    output = getattr(response, "output", None)
    if output is None and isinstance(response, dict):
        output = response.get("output")
    messages = chat_from_responses_input(output or [])
    return messages[0] if len(messages) == 1 else None


class _ChatAccumulator:
    """A streamed chat completion rebuilt from its chunks (content, tool calls, usage)."""

    def __init__(self) -> None:
        self.document: dict[str, Any] | None = None
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None

    def add(self, chunk: Any) -> None:
        data = jsonable(chunk)
        if self.document is None:
            self.document = {k: data.get(k) for k in ("id", "model", "created")}
            self.document["object"] = "chat.completion"
        if data.get("usage"):
            self.document["usage"] = data["usage"]
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(
                    call.get("index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            self.finish = choice.get("finish_reason") or self.finish

    def final(self) -> dict[str, Any] | None:
        """The chat completion the stream amounts to (None before its first chunk)."""
        if self.document is None:
            return None
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return {
            **self.document,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
        }


class _ResponsesAccumulator:
    """A streamed Responses call ends with `response.completed`, which carries the whole
    response (usage included): nothing to rebuild."""

    def __init__(self) -> None:
        self.response: Any = None

    def add(self, event: Any) -> None:
        if getattr(event, "type", None) == "response.completed":
            self.response = event.response

    def final(self) -> Any:
        return self.response


def _chat_history(params: dict[str, Any], link: LinkBase) -> tuple[list[Any], Any]:
    return list(params.get("messages") or []), None


def _responses_history(params: dict[str, Any], link: LinkBase) -> tuple[list[Any], Any]:
    converted = chat_from_responses_input(params.get("input"))
    if params.get("previous_response_id"):
        # Server-side state: the input holds only what is new since the logged history.
        return [{}] * link.conversation.logged + converted, None
    return converted, None


_CHAT = Wire(
    history=_chat_history,
    request=_chat_request,
    reply=_chat_reply,
    accumulator=_ChatAccumulator,
    request_id_header="x-request-id",
    errors=openai.APIStatusError,
)
_RESPONSES = Wire(
    history=_responses_history,
    request=_responses_request,
    reply=_responses_reply,
    accumulator=_ResponsesAccumulator,
    request_id_header="x-request-id",
    errors=openai.APIStatusError,
)


class _Namespace:
    """Stands in for `client.chat`: only `completions` is wrapped."""

    def __init__(self, inner: Any, **wrapped: Any) -> None:
        self._inner = inner
        self.__dict__.update(wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ContextOpenAI(WrappedClient):
    """An `openai.OpenAI` whose chat.completions.create and responses.create go through the
    console. `context` holds the link (`context.signal`, counters)."""

    context: Link

    def __init__(self, client: openai.OpenAI, link: Link) -> None:
        super().__init__(client, link)
        self.chat = _Namespace(
            client.chat, completions=Endpoint(client.chat.completions, link, _CHAT)
        )
        self.responses = Endpoint(client.responses, link, _RESPONSES)


class AsyncContextOpenAI(WrappedClient):
    """The `openai.AsyncOpenAI` flavour of `ContextOpenAI`."""

    context: AsyncLink

    def __init__(self, client: openai.AsyncOpenAI, link: AsyncLink) -> None:
        super().__init__(client, link)
        self.chat = _Namespace(
            client.chat, completions=AsyncEndpoint(client.chat.completions, link, _CHAT)
        )
        self.responses = AsyncEndpoint(client.responses, link, _RESPONSES)
