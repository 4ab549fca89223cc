"""`Console` and `AsyncConsole`: the console's agent API, typed.

Reporting (`session.report`) goes through the background `Reporter` and never raises or blocks.
Every other call (append, surface, compact, overflow, policy) is a plain request that raises
`ConsoleError` (or its `ConsoleUnavailable` subclass when the console is down, slow or
overloaded); the adapters catch those and carry on without the console.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx

from context_console.records import build_record, jsonable
from context_console.reporting import Reporter, ReportingOptions, ReportingStats

Format = Literal["anthropic", "openai"]
API_PREFIX = "/api/v1"
LOG_MESSAGES_HEADER = "X-Log-Messages"
_T = TypeVar("_T")


class ConsoleError(Exception):
    """The console answered with an error (or not at all: see ConsoleUnavailable)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.body = body


class ConsoleUnavailable(ConsoleError):
    """Refused connection, timeout, 429 or 5xx: the console cannot help right now."""


class OverflowUnrecoverable(ConsoleError):
    """D4: the console already compacted after an overflow on this surface; it will not again."""


class CompactionBusy(ConsoleError):
    """Another compaction of the session is running; asking again shortly will succeed."""


@dataclass(frozen=True)
class Surface:
    """What the model should see next (D1): byte-stable until `version` changes.

    `log_seq` / `log_hash`: the log it follows (its last message's seq and the hash of the log
    up to it, `context_core.log_position`); None from a console that does not say. `local`: the
    client composed it itself (the console away or behind); `version` is then its base's."""

    version: int
    format: str
    messages: list[dict[str, Any]]
    system: Any = None
    etag: str | None = None
    log_seq: int | None = None
    log_hash: str | None = None
    local: bool = False


@dataclass(frozen=True)
class AppendResult:
    appended: list[int]
    duplicates: list[int]
    surface_version: int
    surface_tokens_estimate: int
    log_messages: int


@dataclass(frozen=True)
class OverflowResult:
    """The forced compaction's run (`action`, `tokens_before/after`) and the new surface."""

    run: dict[str, Any]
    surface: Surface | None


def surface_from_document(document: Mapping[str, Any], etag: str | None = None) -> Surface:
    log_seq, log_hash = document.get("log_seq"), document.get("log_hash")
    return Surface(
        version=int(document.get("surface_version") or 0),
        format=str(document.get("format") or "anthropic"),
        messages=list(document.get("messages") or []),
        system=document.get("system"),
        etag=etag,
        log_seq=log_seq if isinstance(log_seq, int) and not isinstance(log_seq, bool) else None,
        log_hash=log_hash if isinstance(log_hash, str) else None,
    )


def _error_from(response: httpx.Response) -> ConsoleError:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:500]
    detail = body.get("detail") if isinstance(body, dict) else None
    field_name = body.get("field") if isinstance(body, dict) else None
    message = f"HTTP {response.status_code}: {detail or body}"
    kind = (
        ConsoleUnavailable
        if response.status_code in (429,) or response.status_code >= 500
        else ConsoleError
    )
    if isinstance(body, dict) and body.get("error") == "overflow_unrecoverable":
        kind = OverflowUnrecoverable
    elif isinstance(body, dict) and body.get("error") == "compaction_busy":
        kind = CompactionBusy
    return kind(
        message,
        status=response.status_code,
        field=field_name if isinstance(field_name, str) else None,
        body=body,
    )


def _unavailable(exc: httpx.HTTPError) -> ConsoleUnavailable:
    return ConsoleUnavailable(f"console unreachable: {type(exc).__name__}: {exc}")


def _checked(response: httpx.Response) -> httpx.Response:
    """The response itself, or its status as a raised `ConsoleError`."""
    if response.status_code >= 400:
        raise _error_from(response)
    return response


@dataclass
class SessionState:
    """What a session handle remembers between calls (shared by the sync and async flavours)."""

    session_id: str
    format: Format
    window_tokens: int | None = None
    next_seq: int | None = None
    turn: int = 0
    calls: dict[int, int] = field(default_factory=dict)
    surface: Surface | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # What the session is (title, user, repository, branch...): sent with its first report.
    metadata: dict[str, str | int | float] | None = None

    def metadata_once(
        self, given: Mapping[str, str | int | float] | None
    ) -> Mapping[str, str | int | float] | None:
        """The metadata for the next record: `given`, else the handle's on its first report."""
        with self.lock:
            pending, self.metadata = self.metadata, None
        if given is None:
            return pending
        return {**(pending or {}), **given}

    @property
    def path(self) -> str:
        return f"{API_PREFIX}/sessions/{quote(self.session_id, safe='')}"

    def record_ids(self, turn: int | None, call: int | None) -> tuple[int, int]:
        """(turn, call) for the next record: the current turn and its next call unless given."""
        with self.lock:
            turn = self.turn if turn is None else turn
            call = self.calls.get(turn, 0) if call is None else call
            self.calls[turn] = max(self.calls.get(turn, 0), call + 1)
            return turn, call

    def append_body(
        self, messages: Sequence[Any], system: Any, seq: int | None
    ) -> tuple[dict[str, Any], int]:
        """The `/messages` body, each message with its `seq` (from `seq`, else the next one)."""
        start = self.next_seq if seq is None else seq
        start = start or 0
        body: dict[str, Any] = {"format": self.format}
        if system is not None:
            if self.format != "anthropic":
                raise ValueError("system: OpenAI system prompts are messages; append them as such")
            body["system"] = jsonable(system)
            start = max(start, 1)
        items = []
        for offset, message in enumerate(messages):
            item = jsonable(message)
            if not isinstance(item, dict):
                raise ValueError(f"messages.{offset}: must be a message object")
            items.append({**item, "seq": start + offset})
        body["messages"] = items
        return body, start

    def appended(self, answer: Mapping[str, Any]) -> AppendResult:
        result = AppendResult(
            appended=list(answer.get("appended") or []),
            duplicates=list(answer.get("duplicates") or []),
            surface_version=int(answer.get("surface_version") or 0),
            surface_tokens_estimate=int(answer.get("surface_tokens_estimate") or 0),
            log_messages=int(answer.get("log_messages") or 0),
        )
        self.next_seq = result.log_messages
        return result

    def surfaced(self, response: httpx.Response) -> Surface:
        header = response.headers.get(LOG_MESSAGES_HEADER)
        if header and header.isdigit():
            self.next_seq = int(header)
        if response.status_code == 304 and self.surface is not None:
            return self.surface
        surface = surface_from_document(response.json(), response.headers.get("ETag"))
        self.surface = surface
        return surface

    def compacted(self, response: httpx.Response) -> dict[str, Any]:
        self.surface = None
        answer: dict[str, Any] = response.json()
        return answer

    def overflowed(self, answer: Mapping[str, Any]) -> OverflowResult:
        document = answer.get("surface")
        surface = surface_from_document(document) if isinstance(document, Mapping) else None
        if surface is not None:
            self.surface = surface
        run = {k: v for k, v in answer.items() if k != "surface"}
        return OverflowResult(run=run, surface=surface)


def _from_env() -> tuple[str, str]:
    url = os.environ.get("CONTEXT_CONSOLE_URL")
    key = os.environ.get("CONTEXT_CONSOLE_KEY")
    if not url or not key:
        raise ValueError("set CONTEXT_CONSOLE_URL and CONTEXT_CONSOLE_KEY")
    return url, key


@dataclass(frozen=True)
class _Request:
    """One request to the console as data, built once for both flavours: `via(console.request)`
    sends it (and, on an `AsyncConsole`, gives the coroutine to await)."""

    method: str
    path: str
    options: dict[str, Any]

    def via(self, send: Callable[..., _T]) -> _T:
        return send(self.method, self.path, **self.options)


class _ConsoleBase:
    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float,
        reporting: ReportingOptions | None,
        report_transport: httpx.BaseTransport | None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {key}", "User-Agent": "context-console-client"}
        self._policy: dict[str, Any] | None = None
        self._policy_at = 0.0
        self.policy_ttl_seconds = 60.0
        self.reporter = Reporter(
            self.url + API_PREFIX,
            self._headers,
            reporting or ReportingOptions(),
            transport=report_transport,
            spool_key=key,
        )

    @property
    def dropped(self) -> int:
        """Telemetry records the console never received (queue full, refused, past the spool's
        limits; without a spool, retries exhausted)."""
        return self.reporter.stats.dropped

    @property
    def spooled(self) -> int:
        """Telemetry records waiting in the on-disk spool for the console to answer again."""
        return self.reporter.spooled

    @property
    def stats(self) -> ReportingStats:
        return self.reporter.stats

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record was sent, spooled or dropped; False if `timeout` ran
        out."""
        return self.reporter.flush(timeout)

    def _cached_policy(self, refresh: bool) -> dict[str, Any] | None:
        """The policy fetched less than `policy_ttl_seconds` ago, unless asked to refresh."""
        if (
            not refresh
            and self._policy is not None
            and time.monotonic() - self._policy_at < self.policy_ttl_seconds
        ):
            return self._policy
        return None

    def _keep_policy(self, policy: dict[str, Any]) -> dict[str, Any]:
        self._policy, self._policy_at = policy, time.monotonic()
        return policy


class Console(_ConsoleBase):
    """The console's agent API (synchronous). `Console(url, key)`; `console.session(id)`."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 5.0,
        reporting: ReportingOptions | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, key, timeout=timeout, reporting=reporting, report_transport=transport)
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **options: Any) -> Console:
        """A console from `CONTEXT_CONSOLE_URL` and `CONTEXT_CONSOLE_KEY`."""
        url, key = _from_env()
        return cls(url, key, **options)

    def session(
        self,
        session_id: str,
        *,
        format: Format = "anthropic",
        window_tokens: int | None = None,
        metadata: Mapping[str, str | int | float] | None = None,
    ) -> Session:
        """A handle on one agent session (created on the console by its first append/report).
        `metadata` (title, user, repository, branch, agent...) goes with its first report."""
        state = SessionState(session_id, format, window_tokens)
        state.metadata = dict(metadata) if metadata else None
        return Session(self, state)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unavailable(exc) from exc
        return _checked(response)

    def policy(self, *, refresh: bool = False) -> dict[str, Any]:
        """The effective policy of the key's profile (cached for `policy_ttl_seconds`)."""
        cached = self._cached_policy(refresh)
        if cached is not None:
            return cached
        return self._keep_policy(self.request("GET", f"{API_PREFIX}/policy").json())

    def close(self) -> None:
        """Flush reports (bounded), then close the connections."""
        self.reporter.close()
        self._http.close()

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SessionBase:
    """What `Session` and `AsyncSession` share: everything that does no I/O of its own (the id,
    turn counting, `report`, which is a queue put in both flavours) and, for every request, what
    is sent (`_Request`) and what the answer means (`SessionState`). The flavours only send."""

    console: _ConsoleBase
    state: SessionState

    @property
    def id(self) -> str:
        return self.state.session_id

    def new_turn(self) -> int:
        """Start the next turn (a new user input); returns its number."""
        with self.state.lock:
            if self.state.calls.get(self.state.turn):
                self.state.turn += 1
            return self.state.turn

    def report(
        self,
        response_or_usage: Any,
        *,
        model: str | None = None,
        turn: int | None = None,
        call: int | None = None,
        provider: str | None = None,
        request_id: str | None = None,
        surface_version: int | None = None,
        window_tokens: int | None = None,
        appended_chars: int | None = None,
        prefix: list[dict[str, Any]] | None = None,
        metadata: Mapping[str, str | int | float] | None = None,
    ) -> dict[str, Any] | None:
        """Queue one call's usage: a raw SDK response or a usage dict (verbatim). Never raises
        for the console's sake; a response without usage or model is a caller's ValueError.
        Not a coroutine in `AsyncSession` either: a queue put never waits."""
        turn, call = self.state.record_ids(turn, call)
        # The keywords are spelled out (not **kwargs) so callers and type checkers see them;
        # they pass through to `build_record` unchanged, the window defaulting to the session's.
        record = build_record(
            response_or_usage,
            session_id=self.id,
            turn=turn,
            call=call,
            model=model,
            provider=provider,
            request_id=request_id,
            surface_version=surface_version,
            window_tokens=window_tokens or self.state.window_tokens,
            appended_chars=appended_chars,
            prefix=prefix,
            metadata=self.state.metadata_once(metadata),
        )
        self.console.reporter.put(record)
        return record

    def _must_sync(self, seq: int | None) -> bool:
        """An append without `seq` needs the log's length first (once per handle)."""
        return self.state.next_seq is None and seq is None

    def _append_request(self, messages: Sequence[Any], system: Any, seq: int | None) -> _Request:
        body, _ = self.state.append_body(messages, system, seq)
        return _Request("POST", f"{self.state.path}/messages", {"json": body})

    def _surface_request(self, format: Format | None) -> _Request:
        headers = {}
        cached = self.state.surface
        if cached is not None and cached.etag and format in (None, cached.format):
            headers["If-None-Match"] = cached.etag
        params = {"format": format} if format else None
        return _Request("GET", f"{self.state.path}/surface", {"headers": headers, "params": params})

    def _compact_request(self, expected_surface_version: int | None) -> _Request:
        body = (
            {}
            if expected_surface_version is None
            else {"expected_surface_version": expected_surface_version}
        )
        return _Request("POST", f"{self.state.path}/compact", {"json": body})

    def _overflow_request(self, error_text: str, surface_version: int | None) -> _Request:
        body: dict[str, Any] = {"detail": error_text.replace("\x00", "")[:10_000]}
        if surface_version is not None:
            body["surface_version"] = surface_version
        return _Request("POST", f"{self.state.path}/overflow", {"json": body})


class Session(_SessionBase):
    """One agent session: report usage, append the transcript, read the surface, compact."""

    console: Console

    def __init__(self, console: Console, state: SessionState) -> None:
        self.console = console
        self.state = state

    def append(
        self, messages: Sequence[Any], *, system: Any = None, seq: int | None = None
    ) -> AppendResult:
        """Append to the log; each message gets the next `seq` (or `seq` onwards). The
        Anthropic `system` prompt is seq 0, on the first append only. Idempotent on seq."""
        if self._must_sync(seq):
            self.sync()
        response = self._append_request(messages, system, seq).via(self.console.request)
        return self.state.appended(response.json())

    def sync(self) -> int:
        """Learn how many messages the log holds (the next seq); 0 for a new session."""
        try:
            self.surface()
        except ConsoleError as exc:
            if exc.status != 404:
                raise
            self.state.next_seq = 0
        return self.state.next_seq or 0

    def surface(self, *, format: Format | None = None) -> Surface:
        """The model-visible messages now; an unchanged surface costs a 304 (ETag)."""
        return self.state.surfaced(self._surface_request(format).via(self.console.request))

    def compact(self, *, expected_surface_version: int | None = None) -> dict[str, Any]:
        """Manual, never-lossy compaction (the key needs the `compact` scope)."""
        return self.state.compacted(
            self._compact_request(expected_surface_version).via(self.console.request)
        )

    def overflow(self, error_text: str, *, surface_version: int | None = None) -> OverflowResult:
        """D4: the provider said the prompt is too long. Forced compaction; the new surface.
        Raises OverflowUnrecoverable when that surface was already relieved once."""
        response = self._overflow_request(error_text, surface_version).via(self.console.request)
        return self.state.overflowed(response.json())

    def policy(self) -> dict[str, Any]:
        return self.console.policy()


class AsyncConsole(_ConsoleBase):
    """The console's agent API for asyncio. Reports still go through the background thread
    (a queue put, never awaited); every other call is awaited on `httpx.AsyncClient`."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 5.0,
        reporting: ReportingOptions | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        report_transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            url, key, timeout=timeout, reporting=reporting, report_transport=report_transport
        )
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
        )

    @classmethod
    def from_env(cls, **options: Any) -> AsyncConsole:
        """A console from `CONTEXT_CONSOLE_URL` and `CONTEXT_CONSOLE_KEY`."""
        url, key = _from_env()
        return cls(url, key, **options)

    def session(
        self,
        session_id: str,
        *,
        format: Format = "anthropic",
        window_tokens: int | None = None,
        metadata: Mapping[str, str | int | float] | None = None,
    ) -> AsyncSession:
        state = SessionState(session_id, format, window_tokens)
        state.metadata = dict(metadata) if metadata else None
        return AsyncSession(self, state)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unavailable(exc) from exc
        return _checked(response)

    async def policy(self, *, refresh: bool = False) -> dict[str, Any]:
        cached = self._cached_policy(refresh)
        if cached is not None:
            return cached
        return self._keep_policy((await self.request("GET", f"{API_PREFIX}/policy")).json())

    async def aflush(self, timeout: float | None = None) -> bool:
        """`flush` without blocking the event loop."""
        import asyncio

        return await asyncio.to_thread(self.reporter.flush, timeout)

    async def aclose(self) -> None:
        import asyncio

        await asyncio.to_thread(self.reporter.close)
        await self._http.aclose()

    async def __aenter__(self) -> AsyncConsole:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession(_SessionBase):
    """The asyncio flavour of `Session` (same arguments, awaited)."""

    console: AsyncConsole

    def __init__(self, console: AsyncConsole, state: SessionState) -> None:
        self.console = console
        self.state = state

    async def append(
        self, messages: Sequence[Any], *, system: Any = None, seq: int | None = None
    ) -> AppendResult:
        if self._must_sync(seq):
            await self.sync()
        response = await self._append_request(messages, system, seq).via(self.console.request)
        return self.state.appended(response.json())

    async def sync(self) -> int:
        try:
            await self.surface()
        except ConsoleError as exc:
            if exc.status != 404:
                raise
            self.state.next_seq = 0
        return self.state.next_seq or 0

    async def surface(self, *, format: Format | None = None) -> Surface:
        return self.state.surfaced(await self._surface_request(format).via(self.console.request))

    async def compact(self, *, expected_surface_version: int | None = None) -> dict[str, Any]:
        return self.state.compacted(
            await self._compact_request(expected_surface_version).via(self.console.request)
        )

    async def overflow(
        self, error_text: str, *, surface_version: int | None = None
    ) -> OverflowResult:
        response = await self._overflow_request(error_text, surface_version).via(
            self.console.request
        )
        return self.state.overflowed(response.json())

    async def policy(self) -> dict[str, Any]:
        return await self.console.policy()
