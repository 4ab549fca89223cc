"""The sync and async flavours share one implementation of everything but their I/O: these tests
hold them to the same requests, the same stream behaviour and the same session rule."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_console import AsyncConsole, AsyncSession, Console, ReportingOptions, Session
from context_console.adapter import AsyncStream, Stream, checked_session

SURFACE = {"surface_version": 3, "format": "anthropic", "messages": [], "system": "Be careful."}


def answer(request: httpx.Request) -> httpx.Response:
    """A console that answers every agent call well (a new session's surface is a 404)."""
    path = request.url.path
    if path.endswith("/surface"):
        if request.headers.get("If-None-Match") == '"s3"':
            return httpx.Response(304, headers={"X-Log-Messages": "2"})
        return httpx.Response(200, json=SURFACE, headers={"ETag": '"s3"', "X-Log-Messages": "2"})
    if path.endswith("/messages"):
        count = len(json.loads(request.content)["messages"])
        return httpx.Response(
            201,
            json={"appended": list(range(count)), "surface_version": 3, "log_messages": 2},
        )
    if path.endswith("/overflow"):
        return httpx.Response(200, json={"action": "compacted", "surface": SURFACE})
    return httpx.Response(200, json={"action": "compacted", "path": path})


def seen(requests: list[httpx.Request]) -> list[tuple[str, str, Any, str | None]]:
    return [
        (
            r.method,
            str(r.url),
            json.loads(r.content) if r.content else None,
            r.headers.get("If-None-Match"),
        )
        for r in requests
    ]


def test_session_and_async_session_send_the_same_requests_and_read_the_same_answers():
    sync_requests: list[httpx.Request] = []
    async_requests: list[httpx.Request] = []

    def sync_answer(request: httpx.Request) -> httpx.Response:
        sync_requests.append(request)
        return answer(request)

    async def async_answer(request: httpx.Request) -> httpx.Response:
        async_requests.append(request)
        return answer(request)

    options = ReportingOptions(synchronous=True)
    with Console(
        "http://console.test", "k", transport=httpx.MockTransport(sync_answer), reporting=options
    ) as console:
        session = console.session("s/1")
        sync_results = [
            session.append([{"role": "user", "content": "Hi"}], system="Be careful."),
            session.surface(),
            session.surface(),  # the ETag: a 304 gives the cached surface
            session.compact(expected_surface_version=3),
            session.overflow("prompt is too long\x00", surface_version=3),
        ]

    async def run() -> list[Any]:
        async with AsyncConsole(
            "http://console.test",
            "k",
            transport=httpx.MockTransport(async_answer),
            reporting=options,
        ) as console:
            session = console.session("s/1")
            return [
                await session.append([{"role": "user", "content": "Hi"}], system="Be careful."),
                await session.surface(),
                await session.surface(),
                await session.compact(expected_surface_version=3),
                await session.overflow("prompt is too long\x00", surface_version=3),
            ]

    assert asyncio.run(run()) == sync_results
    assert seen(async_requests) == seen(sync_requests)
    assert [r.method for r in sync_requests] == ["GET", "POST", "GET", "GET", "POST", "POST"]
    assert seen(sync_requests)[3][3] == '"s3"'  # the second surface asked with the ETag


class Summing:
    """A stand-in accumulator: the final response is the sum, known once the 0 item came."""

    def __init__(self) -> None:
        self.items: list[int] = []

    def add(self, item: int) -> None:
        self.items.append(item)

    def final(self) -> int | None:
        return sum(self.items) if 0 in self.items else None


class SdkStream:
    """The SDK's side: items, and a close() that is counted."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.closed = 0

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)

    def close(self) -> None:
        self.closed += 1


class AsyncSdkStream:
    """The async SDK's side: its close() is a coroutine."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.closed = 0

    async def __aiter__(self) -> AsyncIterator[int]:
        for item in self.items:
            yield item

    async def close(self) -> None:
        self.closed += 1


@given(st.lists(st.integers(min_value=-5, max_value=5), max_size=8), st.integers(0, 2))
def test_a_stream_passes_everything_through_and_finishes_once(items, closes):
    finished: list[Any] = []
    inner = SdkStream(items)
    stream = Stream(inner, Summing(), finished.append)
    assert list(stream) == items
    for _ in range(closes):
        stream.close()
    assert finished == ([sum(items)] if 0 in items else [])
    assert inner.closed == closes

    async_finished: list[Any] = []

    async def finish(final: Any) -> None:
        async_finished.append(final)

    async def run() -> list[int]:
        async_inner = AsyncSdkStream(items)
        async with AsyncStream(async_inner, Summing(), finish) as wrapped:
            passed = [item async for item in wrapped]
            for _ in range(closes):
                await wrapped.close()
        assert async_inner.closed == closes + 1
        return passed

    assert asyncio.run(run()) == items
    assert async_finished == finished


def test_a_wrapped_client_takes_only_a_session_of_its_own_flavour():
    with Console("http://console.test", "k") as console:
        session = console.session("s")
        assert checked_session(session, None, Session, "unused") is session
        with pytest.raises(TypeError, match="^an async client needs an AsyncConsole session$"):
            checked_session(
                session, None, AsyncSession, "an async client needs an AsyncConsole session"
            )
