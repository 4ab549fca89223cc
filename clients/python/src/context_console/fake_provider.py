"""A local fake LLM provider speaking the Anthropic Messages and OpenAI Chat/Responses wire
formats, for offline examples and tests (standard library only).

It is a real HTTP server on 127.0.0.1: point `anthropic.Anthropic(base_url=provider.url)` or
`openai.OpenAI(base_url=provider.url + "/v1")` at it. It counts a request's tokens as chars/4 of
its JSON, simulates prompt caching (Anthropic: prefixes up to `cache_control` breakpoints, with
5m/1h writes; OpenAI: automatic, inclusive `cached_tokens`), answers 400 "prompt is too long"
above `window_tokens` (or when an overflow was injected), streams over SSE, and records every
request it saw for assertions.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """What the fake model answers: text, and tool calls as (name, input) pairs."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    reasoning_tokens: int = 0


Responder = Callable[[str, dict[str, Any], int], Reply]


def default_responder(api: str, body: dict[str, Any], number: int) -> Reply:
    """Calls the first tool offered, with {"round": number}; plain text when no tools are offered
    or the latest user text says "[final]"."""
    tools = body.get("tools") or []
    last = json.dumps((body.get("messages") or body.get("input") or [""])[-1:])
    if tools and "[final]" not in last:
        tool = tools[0]
        name = tool.get("name") or (tool.get("function") or {}).get("name") or "tool"
        return Reply(text=f"Step {number}.", tool_calls=((name, {"round": number}),))
    return Reply(text=f"Answer {number}.")


def tokens_of(chars: int) -> int:
    return (chars + 3) // 4


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


@dataclass
class Recorded:
    """One request as the fake provider saw it."""

    api: str
    body: dict[str, Any]
    prompt_tokens: int
    status: int
    usage: dict[str, Any] | None = None
    stream: bool = False
    injected: bool = False  # an overflow answered because `inject_overflow` asked for it


@dataclass(frozen=True)
class _Answer:
    """One accepted request as the wire-format builders need it: the request body, its number,
    the fake model's reply, the cache accounting of its prompt and the output tokens."""

    body: dict[str, Any]
    number: int
    reply: Reply
    cache: dict[str, int]
    output_tokens: int


# What a builder returns: the response document, its usage, and its stream as (event, data).
_Built = tuple[dict[str, Any], dict[str, Any], list[tuple[str | None, Any]]]


class Overflow(Exception):
    def __init__(self, tokens: int, window: int) -> None:
        super().__init__(f"{tokens} > {window}")
        self.tokens = tokens
        self.window = window


@dataclass
class FakeProvider:
    """Start with `provider.start()` (or as a context manager); `provider.url` is its base URL."""

    window_tokens: int = 200_000
    responder: Responder = default_responder
    min_cache_tokens: int = 0
    requests: list[Recorded] = field(default_factory=list)
    _overflows_to_inject: int = 0
    _cache: dict[str, str] = field(default_factory=dict)  # prefix hash -> ttl
    _openai_prefixes: set[str] = field(default_factory=set)
    _counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # --- control ------------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                provider._handle(self, self.path.split("?")[0], body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the provider first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def inject_overflow(self, count: int = 1) -> None:
        """The next `count` requests answer 400 "prompt is too long", whatever their size."""
        with self._lock:
            self._overflows_to_inject += count

    def accepted(self, api: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if r.status == 200 and (api is None or r.api == api)]

    # --- HTTP ---------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        api = {
            "/v1/messages": "anthropic",
            "/v1/chat/completions": "openai_chat",
            "/v1/responses": "openai_responses",
        }.get(path)
        if api is None:
            self._send_json(handler, 404, {"error": {"message": f"no route {path}"}})
            return
        with self._lock:
            number = next(self._counter)
            prompt_tokens = tokens_of(len(_dump(_without_cache_control(self._prompt(api, body)))))
            injected = self._overflows_to_inject > 0
            if injected:
                self._overflows_to_inject -= 1
            stream = bool(body.get("stream"))
            if injected or prompt_tokens > self.window_tokens:
                self.requests.append(
                    Recorded(api, body, prompt_tokens, 400, stream=stream, injected=injected)
                )
                self._send_overflow(handler, api, max(prompt_tokens, self.window_tokens + 1))
                return
            usage_in = self._cache_usage(api, body, prompt_tokens)
        reply = self.responder(api, body, number)
        output_tokens = tokens_of(len(reply.text) + len(_dump(list(reply.tool_calls))))
        output_tokens += reply.reasoning_tokens
        builder = {
            "anthropic": self._anthropic,
            "openai_chat": self._openai_chat,
            "openai_responses": self._openai_responses,
        }[api]
        document, usage, events = builder(_Answer(body, number, reply, usage_in, output_tokens))
        with self._lock:
            self.requests.append(Recorded(api, body, prompt_tokens, 200, usage, stream))
        headers = {"request-id": f"req_{number:06d}", "x-request-id": f"req_{number:06d}"}
        if stream:
            self._send_sse(handler, events, headers)
        else:
            self._send_json(handler, 200, document, headers)

    def _send_json(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        document: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._send(handler, status, "application/json", json.dumps(document).encode(), headers)

    def _send_sse(
        self,
        handler: BaseHTTPRequestHandler,
        events: list[tuple[str | None, Any]],
        headers: dict[str, str],
    ) -> None:
        chunks = []
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            chunks.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
        self._send(handler, 200, "text/event-stream", "".join(chunks).encode(), headers)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        content_type: str,
        payload: bytes,
        headers: dict[str, str] | None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)

    def _send_overflow(self, handler: BaseHTTPRequestHandler, api: str, tokens: int) -> None:
        if api == "anthropic":
            message = f"prompt is too long: {tokens} tokens > {self.window_tokens} maximum"
            document: dict[str, Any] = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": message},
            }
        else:
            document = {
                "error": {
                    "message": f"This model's maximum context length is {self.window_tokens} "
                    f"tokens. However, your messages resulted in {tokens} tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        self._send_json(handler, 400, document, {"request-id": "req_overflow"})

    # --- token and cache accounting -----------------------------------------------------------

    @staticmethod
    def _prompt(api: str, body: dict[str, Any]) -> dict[str, Any]:
        keys = {
            "anthropic": ("tools", "system", "messages"),
            "openai_chat": ("tools", "messages"),
            "openai_responses": ("tools", "instructions", "input"),
        }[api]
        return {k: body[k] for k in keys if k in body}

    def _cache_usage(self, api: str, body: dict[str, Any], total: int) -> dict[str, int]:
        if api == "anthropic":
            return self._anthropic_cache(body, total)
        return self._openai_cache(api, body, total)

    def _anthropic_cache(self, body: dict[str, Any], total: int) -> dict[str, int]:
        # The prefix is tools -> system -> messages, block by block (D1's order).
        blocks: list[Any] = list(body.get("tools") or [])
        system = body.get("system")
        blocks += [system] if isinstance(system, str) else list(system or [])
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):  # the API reads a string as one text block
                blocks.append({"role": message.get("role"), "type": "text", "text": content})
            else:
                blocks += [{"role": message.get("role"), **b} for b in content or []]
        hashes, cumulative, chars = [], [], 0
        digest = hashlib.sha256(str(body.get("model")).encode())
        breakpoints: list[tuple[int, str]] = []
        for index, block in enumerate(blocks):
            text = _dump(_without_cache_control(block))
            chars += len(text)
            digest.update(text.encode())
            hashes.append(digest.hexdigest())
            cumulative.append(tokens_of(chars))
            marker = block.get("cache_control") if isinstance(block, dict) else None
            if isinstance(marker, dict):
                breakpoints.append((index, str(marker.get("ttl") or "5m")))
        read = 0
        for index, _ in breakpoints:
            for back in range(index, max(-1, index - 20), -1):
                if hashes[back] in self._cache:
                    read = max(read, cumulative[back])
                    break
        write = {"5m": 0, "1h": 0}
        covered = read
        for index, ttl in breakpoints:
            if cumulative[index] >= self.min_cache_tokens and cumulative[index] > covered:
                write[ttl if ttl in write else "5m"] += cumulative[index] - covered
                covered = cumulative[index]
            self._cache.setdefault(hashes[index], ttl)
        uncached = max(0, total - read - write["5m"] - write["1h"])
        return {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write["5m"] + write["1h"],
            "ephemeral_5m_input_tokens": write["5m"],
            "ephemeral_1h_input_tokens": write["1h"],
        }

    def _openai_cache(self, api: str, body: dict[str, Any], total: int) -> dict[str, int]:
        head: list[Any] = list(body.get("tools") or [])
        if body.get("instructions"):
            head.append(body["instructions"])
        items = body.get("messages") if api == "openai_chat" else body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        digest = hashlib.sha256(str(body.get("model")).encode())
        cached, chars, prefixes = 0, 0, []
        for item in [*head, *(items or [])]:
            text = _dump(item)
            chars += len(text)
            digest.update(text.encode())
            prefixes.append(digest.hexdigest())
            if prefixes[-1] in self._openai_prefixes:
                cached = tokens_of(chars)
        self._openai_prefixes.update(prefixes)
        if cached < self.min_cache_tokens:
            cached = 0
        return {"input_tokens": total, "cached_tokens": min(cached, total)}

    # --- response documents -------------------------------------------------------------------

    def _anthropic(self, answer: _Answer) -> _Built:
        content: list[dict[str, Any]] = []
        if answer.reply.text:
            content.append({"type": "text", "text": answer.reply.text})
        for position, (name, arguments) in enumerate(answer.reply.tool_calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{answer.number:06d}_{position}",
                    "name": name,
                    "input": arguments,
                }
            )
        usage = {
            "input_tokens": answer.cache["input_tokens"],
            "cache_creation_input_tokens": answer.cache["cache_creation_input_tokens"],
            "cache_read_input_tokens": answer.cache["cache_read_input_tokens"],
            "cache_creation": {
                "ephemeral_5m_input_tokens": answer.cache["ephemeral_5m_input_tokens"],
                "ephemeral_1h_input_tokens": answer.cache["ephemeral_1h_input_tokens"],
            },
            "output_tokens": answer.output_tokens,
        }
        stop = "tool_use" if answer.reply.tool_calls else "end_turn"
        document = {
            "id": f"msg_{answer.number:06d}",
            "type": "message",
            "role": "assistant",
            "model": answer.body.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        start = {
            **document,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        for index, block in enumerate(content):
            first: dict[str, Any]
            if block["type"] == "text":
                first = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                first = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": first},
                ),
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": answer.output_tokens},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return document, usage, events

    def _openai_chat(self, answer: _Answer) -> _Built:
        calls = [
            {
                "id": f"call_{answer.number:06d}_{position}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for position, (name, arguments) in enumerate(answer.reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": answer.reply.text or None}
        if calls:
            message["tool_calls"] = calls
        usage = {
            "prompt_tokens": answer.cache["input_tokens"],
            "completion_tokens": answer.output_tokens,
            "total_tokens": answer.cache["input_tokens"] + answer.output_tokens,
            "prompt_tokens_details": {"cached_tokens": answer.cache["cached_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": answer.reply.reasoning_tokens},
        }
        finish = "tool_calls" if calls else "stop"
        base: dict[str, Any] = {
            "id": f"chatcmpl-{answer.number:06d}",
            "created": 1_700_000_000 + answer.number,
            "model": answer.body.get("model"),
        }
        document = {
            **base,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        chunk: dict[str, Any] = {**base, "object": "chat.completion.chunk"}
        delta: dict[str, Any] = {"role": "assistant", "content": answer.reply.text or None}
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        events: list[tuple[str | None, Any]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        ]
        if (answer.body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**chunk, "choices": [], "usage": usage}))
        events.append((None, "[DONE]"))
        return document, usage, events

    def _openai_responses(self, answer: _Answer) -> _Built:
        output: list[dict[str, Any]] = []
        if answer.reply.reasoning_tokens:
            output.append({"type": "reasoning", "id": f"rs_{answer.number:06d}", "summary": []})
        if answer.reply.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{answer.number:06d}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": answer.reply.text, "annotations": []}
                    ],
                }
            )
        for position, (name, arguments) in enumerate(answer.reply.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{answer.number:06d}_{position}",
                    "call_id": f"call_{answer.number:06d}_{position}",
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
            )
        usage = {
            "input_tokens": answer.cache["input_tokens"],
            "input_tokens_details": {"cached_tokens": answer.cache["cached_tokens"]},
            "output_tokens": answer.output_tokens,
            "output_tokens_details": {"reasoning_tokens": answer.reply.reasoning_tokens},
            "total_tokens": answer.cache["input_tokens"] + answer.output_tokens,
        }
        document = {
            "id": f"resp_{answer.number:06d}",
            "object": "response",
            "created_at": 1_700_000_000 + answer.number,
            "status": "completed",
            "model": answer.body.get("model"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": answer.body.get("tools") or [],
            "usage": usage,
        }
        created = {**document, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str | None, Any]] = [
            (
                "response.created",
                {"type": "response.created", "response": created, "sequence_number": 0},
            )
        ]
        for index, item in enumerate(output):
            events.append(
                (
                    "response.output_item.done",
                    {
                        "type": "response.output_item.done",
                        "output_index": index,
                        "item": item,
                        "sequence_number": index + 1,
                    },
                )
            )
        events.append(
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": document,
                    "sequence_number": len(output) + 1,
                },
            )
        )
        return document, usage, events
