"""The provider-independent half of an adapter: append before a call, fetch the surface, count
rounds, report after, recover once from an overflow (D4). Sync (`Link`) and async
(`AsyncLink`) flavours share `LinkBase`, which holds every step that does no I/O; they differ
only in the console calls, awaited or not.

The provider modules describe each SDK endpoint as a `Wire` (how its arguments carry the
history, what is sent, the reply, the stream) and get the rest from here: `Endpoint` /
`AsyncEndpoint` for `create`, `Stream` / `AsyncStream` to pass a stream through,
`WrappedClient` for the client itself, `checked_session` for `wrap`'s session argument.

Nothing here raises into the agent for the console's sake: a console error opens a breaker and
the call goes on without the console. A surface reaches the model only when it follows the
agent's whole history (its log position, checked by `Conversation.follows`); when the console's
does not, or the console is away, the link composes one from the last good surface and the
messages since (`context_console.local`), relieved locally past the provider's window.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from context_console.client import (
    AppendResult,
    AsyncConsole,
    AsyncSession,
    CompactionBusy,
    Console,
    ConsoleError,
    OverflowUnrecoverable,
    Session,
    Surface,
)
from context_console.conversation import (
    AppendPlan,
    Breaker,
    Conversation,
    RoundLimitReached,
    RoundSignal,
    error_text,
    is_overflow,
    prefix_segments,
    round_signal,
)
from context_console.local import LocalSurfaces, request_tokens

logger = logging.getLogger("context_console")
_T = TypeVar("_T")


@dataclass(frozen=True)
class AdapterOptions:
    """`use_surface`: send the console's surface instead of the caller's history (the log keeps
    everything). `cache_breakpoints`: place D1's cache_control breakpoints on the surface sent
    (Anthropic). `inject_nudge` / `enforce_stop`: act on D8's round signals (off by default:
    the signals are only exposed). `window_tokens`: the window the calls run in, reported."""

    use_surface: bool = False
    cache_breakpoints: bool = True
    inject_nudge: bool = False
    enforce_stop: bool = False
    window_tokens: int | None = None
    fingerprints: bool = True
    console_cooldown_seconds: float = 30.0
    # An overflow while another compaction runs (409 compaction_busy): ask again, bounded.
    busy_retries: int = 20
    busy_wait_seconds: float = 0.25


def session_from_env(session_id: str | None, *, asynchronous: bool) -> Session | AsyncSession:
    """`CONTEXT_CONSOLE_URL`, `CONTEXT_CONSOLE_KEY` and (optionally) `CONTEXT_CONSOLE_SESSION`."""
    name = session_id or os.environ.get("CONTEXT_CONSOLE_SESSION") or f"agent-{uuid.uuid4().hex}"
    if asynchronous:
        return AsyncConsole.from_env().session(name)
    return Console.from_env().session(name)


@dataclass
class Prepared:
    """What `before` decided for one call: the history (and system prompt) it carries, and the
    surface to send instead (None: the caller's own messages)."""

    plan: AppendPlan | None
    history_length: int
    surface: Surface | None
    logged: bool
    history: list[Any] = field(default_factory=list)
    system: Any = None


class LinkBase:
    """State shared by the sync and async links; exposed to callers as `client.context`.

    Everything here does no I/O of its own (`session.report` is a queue put in both flavours):
    planning the append, D8's round signal, the report's arguments, when the reply is due, what
    an overflow's failure means. `Link` and `AsyncLink` add only the console calls, guarded by
    the breaker, in the order these helpers give."""

    session: Session | AsyncSession

    def __init__(self, options: AdapterOptions, conversation: Conversation) -> None:
        self.options = options
        self.conversation = conversation
        self.breaker = Breaker(cooldown=options.console_cooldown_seconds)
        self.signal = RoundSignal(0, 0, "none")
        self.local = LocalSurfaces(conversation.format)
        # Overflows retried successfully on a surface that follows the whole history (the
        # console's, or composed here: `local_recoveries` of them); retries that failed.
        self.overflows_recovered = 0
        self.local_recoveries = 0
        self.overflows_failed = 0
        # Console surfaces not used because they did not follow the history; calls sent on a
        # surface composed here.
        self.stale_surfaces = 0
        self.local_surfaces = 0
        self.last_request: dict[str, Any] | None = None
        self.last_surface_version: int | None = None
        self._policy: dict[str, Any] | None = None

    @property
    def policy(self) -> dict[str, Any] | None:
        return self._policy

    def _signal_now(self) -> RoundSignal:
        conv = self.conversation
        self.signal = round_signal(max(conv.turn, 0), conv.rounds, self._policy)
        return self.signal

    def _check_stop(self) -> None:
        signal = self._signal_now()
        if self.options.enforce_stop and signal.stop:
            raise RoundLimitReached(signal)

    def nudge(self) -> str | None:
        """The nudge to inject into this call, when asked to and D8 says so."""
        if self.options.inject_nudge and self.signal.state in ("nudge", "stop"):
            return self.signal.nudge_text
        return None

    def _report_args(self, surface: Surface | None) -> dict[str, Any]:
        conv = self.conversation
        return {
            "turn": max(conv.turn, 0),
            "call": conv.rounds - 1,
            "surface_version": (
                surface.version if surface is not None and not surface.local else None
            ),
            "window_tokens": self.options.window_tokens,
            # D1/D2: what was sent, segment by segment, so the console can name a cache break
            "prefix": (
                prefix_segments(self.last_request)
                if self.options.fingerprints and self.last_request is not None
                else None
            ),
        }

    # --- the steps of `before`, `after` and `overflow` that both flavours take ---------------

    def _begin(self, history: list[Any], system: Any) -> AppendPlan | None:
        """A call starts: what to append, and the turn it opens (D8)."""
        self.last_request = None
        plan = self.conversation.plan(history, system)
        self.conversation.begin_call(plan)
        return plan

    def _keep_policy(self, policy: dict[str, Any] | None) -> None:
        """A fetched policy replaces the last one; a failed fetch (None) keeps it."""
        if policy is not None:
            self._policy = policy

    def _logged(self, plan: AppendPlan, result: AppendResult | None) -> bool:
        """After the append (None: there was nothing new to append): does the log now hold the
        whole history, so the surface may stand in for it?"""
        conv = self.conversation
        if result is not None:
            conv.appended(plan, result.surface_version)
        self.breaker.succeeded()
        return conv.started and conv.logged == plan.history_length

    def _report_call(self, prepared: Prepared, response: Any, report: dict[str, Any]) -> None:
        """The call ended: count its round and queue its usage (a response without usage is
        logged, never raised: the agent's call succeeded)."""
        self.conversation.end_call()
        try:
            self.session.report(response, **self._report_args(prepared.surface), **report)
        except ValueError as exc:
            logger.warning("context console: cannot report this response: %s", exc)

    def _reply_seq(self, prepared: Prepared) -> int | None:
        """The seq of the reply when it is to be appended: only right after the history it
        answers was logged, and never while the breaker is open."""
        conv = self.conversation
        if prepared.logged and conv.logged == prepared.history_length and self.breaker.allows():
            return conv.reply_seq(prepared.history_length)
        return None

    def _overflow_version(self, surface: Surface | None, plan: AppendPlan) -> int | None:
        """The surface version the overflow happened on: the console's one sent, else (or when
        the log just grew by what it was missing) the log's latest."""
        grew = bool(plan.messages) or plan.system is not None
        if surface is not None and not surface.local and not grew:
            return surface.version
        return self.conversation.surface_version

    def _overflow_refused(self, exc: ConsoleError) -> None:
        """The console could not relieve the overflow: the caller's error will stand."""
        if isinstance(exc, OverflowUnrecoverable):
            logger.warning("context console: overflow not recoverable: %s", exc)
        else:
            self.breaker.failed(exc)

    def _recovered(self, prepared: Prepared, surface: Surface | None) -> Prepared:
        """What was actually sent, after an overflow's retry or not (its surface is reported)."""
        self.last_surface_version = (
            surface.version if surface is not None and not surface.local else None
        )
        if surface is not None and surface.local:
            self.local_surfaces += 1
        return replace(prepared, surface=surface)

    def _last_seq(self, prepared: Prepared) -> int:
        return self.conversation.first_seq(prepared.system) + prepared.history_length - 1

    def _follows(self, surface: Surface | None, prepared: Prepared) -> bool:
        """Whether the console's `surface` follows the whole history (then it is the base of
        any later local composition); a console surface that does not is counted."""
        if surface is None:
            return False
        if self.conversation.follows(surface, self._last_seq(prepared)):
            self.local.adopt(surface)
            return True
        self.stale_surfaces += 1
        logger.info(
            "context console: surface v%s follows log seq %s, the history ends at %s: not used",
            surface.version,
            surface.log_seq,
            self._last_seq(prepared),
        )
        return False

    def _behind(self, surface: Surface | None, prepared: Prepared) -> bool:
        """The console's log holds a part of the history, not all of it: what is missing can
        be appended (idempotent by seq) and the surface asked again."""
        return (
            surface is not None
            and surface.log_seq is not None
            and surface.log_seq < self._last_seq(prepared)
            and self.conversation.follows_part(surface, self._last_seq(prepared))
        )

    def _rewind_to(self, surface: Surface, prepared: Prepared) -> AppendPlan | None:
        """The plan that appends what the log is missing after `surface`'s position."""
        conv = self.conversation
        assert surface.log_seq is not None
        conv.rewind(surface.log_seq + 1 - conv.first_seq(prepared.system))
        return conv.plan(prepared.history, prepared.system)

    def _composed(self, prepared: Prepared, *, force: bool = False) -> Surface | None:
        """The surface composed here: the last good console surface plus the messages since
        (the whole history when there is none or it no longer follows), relieved past the
        window. None (the caller's own messages) when there is nothing to add to them."""
        conv, local = self.conversation, self.local
        base = local.base
        if base is not None and not conv.follows_part(base, self._last_seq(prepared)):
            base = None
        window = local.window(self.options.window_tokens)
        if base is None and window is None and not force:
            return None
        return local.compose(
            prepared.history,
            prepared.system,
            conv.first_seq(prepared.system),
            base=base,
            policy=self._policy,
            window=window,
            force=force,
        )

    def _usable(self, surface: Surface | None, prepared: Prepared) -> Surface | None:
        """`surface` (the console's) if it follows the whole history, else one composed here."""
        if self._follows(surface, prepared):
            return surface
        return self._composed(prepared)

    def _learn(self, error: BaseException, sent: Surface | None, prepared: Prepared) -> None:
        """An overflow: learn the window it states, against our estimate of what was sent."""
        if sent is not None:
            tokens = request_tokens(sent.messages, sent.system)
        else:
            tokens = request_tokens(prepared.history, prepared.system)
        self.local.learn(error_text(error), tokens)

    def _counted(self, surface: Surface) -> None:
        """A retry after an overflow succeeded on `surface` (it follows the whole history)."""
        self.overflows_recovered += 1
        if surface.local:
            self.local_recoveries += 1


class Link(LinkBase):
    """The synchronous link between one wrapped client and one console session."""

    session: Session

    def __init__(self, session: Session, options: AdapterOptions, conversation: Conversation):
        super().__init__(options, conversation)
        self.session = session

    def _guarded(self, call: Callable[[], _T]) -> _T | None:
        """`call()` unless the breaker is open; a console error opens it and gives None."""
        if not self.breaker.allows():
            return None
        try:
            return call()
        except ConsoleError as exc:
            self.breaker.failed(exc)
            return None

    def _log(self, plan: AppendPlan) -> bool:
        result = None
        if plan.messages or plan.system is not None:
            result = self.session.append(plan.messages, system=plan.system, seq=plan.seq)
        return self._logged(plan, result)

    def before(self, history: list[Any], system: Any = None) -> Prepared:
        plan = self._begin(history, system)
        self._keep_policy(self._guarded(self.session.policy))
        self._check_stop()
        logged = plan is not None and bool(self._guarded(lambda: self._log(plan)))
        prepared = Prepared(plan, len(history), None, logged, history, system)
        if not self.options.use_surface:
            return prepared
        surface = self._guarded(self.session.surface) if logged else None
        if surface is not None and self._behind(surface, prepared):
            # The log lacks messages the agent has: append them (idempotent by seq), ask again.
            catch_up = self._rewind_to(surface, prepared)
            if catch_up is not None and self._guarded(lambda: self._log(catch_up)):
                surface = self._guarded(self.session.surface)
        return replace(prepared, surface=self._usable(surface, prepared))

    def call(
        self,
        prepared: Prepared,
        attempt: Callable[[Surface | None], _T],
        errors: type[BaseException] = Exception,
    ) -> tuple[_T, Prepared]:
        """`attempt(surface)`; on a context-length error (one of `errors`) report it (D4) and
        attempt once more on a surface that follows the whole history: the console's relieved
        one, else one relieved here. Returns the result and what was sent."""
        surface = prepared.surface
        try:
            result = attempt(surface)
        except errors as exc:
            if not is_overflow(exc):
                raise
            surface = self.overflow(exc, prepared, surface)
            if surface is None:
                raise
            try:
                result = attempt(surface)
            except errors as again:
                if is_overflow(again):
                    self.overflow_again(again, surface)
                raise
            self._counted(surface)
        return result, self._recovered(prepared, surface)

    def after(
        self, prepared: Prepared, response: Any, reply: dict[str, Any] | None, **report: Any
    ) -> None:
        self._report_call(prepared, response, report)
        seq = self._reply_seq(prepared)
        if reply is not None and seq is not None:
            result = self._guarded(lambda: self.session.append([reply], seq=seq))
            if result is not None:
                self.conversation.reply_appended(reply, result.surface_version)
        self._signal_now()

    def overflow(
        self, error: BaseException, prepared: Prepared, sent: Surface | None
    ) -> Surface | None:
        """D4: the surface to retry with after the provider refused `sent`, or None (then the
        caller's error stands). The console's forced relief when it is reachable and its log
        holds the whole history (appended first when it does not); else, or when its surface
        does not follow the history, a surface relieved here. While another compaction runs
        (409) it asks again, `busy_retries` times."""
        self._learn(error, sent, prepared)
        conv = self.conversation
        plan = conv.plan(prepared.history, prepared.system)
        if plan is not None and self._guarded(lambda: self._log(plan)):
            relieved = self._console_overflow(error, self._overflow_version(sent, plan))
            if self._follows(relieved, prepared):
                return relieved
        return self._composed(prepared, force=True)

    def _console_overflow(self, error: BaseException, version: int | None) -> Surface | None:
        text = error_text(error)
        try:
            for _ in range(self.options.busy_retries):
                try:
                    return self.session.overflow(text, surface_version=version).surface
                except CompactionBusy:
                    time.sleep(self.options.busy_wait_seconds)
            return self.session.overflow(text, surface_version=version).surface
        except ConsoleError as exc:
            self._overflow_refused(exc)
            return None

    def overflow_again(self, error: BaseException, surface: Surface | None) -> None:
        """The retry overflowed too: tell the console (it counts it), then the error stands."""
        self.overflows_failed += 1
        if surface is None or surface.local or not self.breaker.allows():
            return
        try:
            self.session.overflow(error_text(error), surface_version=surface.version)
        except ConsoleError as exc:
            logger.warning("context console: second overflow: %s", exc)


class AsyncLink(LinkBase):
    """The asyncio flavour of `Link`: the same steps, the console calls awaited."""

    session: AsyncSession

    def __init__(self, session: AsyncSession, options: AdapterOptions, conversation: Conversation):
        super().__init__(options, conversation)
        self.session = session

    async def _guarded(self, call: Callable[[], Awaitable[_T]]) -> _T | None:
        if not self.breaker.allows():
            return None
        try:
            return await call()
        except ConsoleError as exc:
            self.breaker.failed(exc)
            return None

    async def _log(self, plan: AppendPlan) -> bool:
        result = None
        if plan.messages or plan.system is not None:
            result = await self.session.append(plan.messages, system=plan.system, seq=plan.seq)
        return self._logged(plan, result)

    async def before(self, history: list[Any], system: Any = None) -> Prepared:
        plan = self._begin(history, system)
        self._keep_policy(await self._guarded(self.session.policy))
        self._check_stop()
        logged = plan is not None and bool(await self._guarded(lambda: self._log(plan)))
        prepared = Prepared(plan, len(history), None, logged, history, system)
        if not self.options.use_surface:
            return prepared
        surface = await self._guarded(self.session.surface) if logged else None
        if surface is not None and self._behind(surface, prepared):
            catch_up = self._rewind_to(surface, prepared)
            if catch_up is not None and await self._guarded(lambda: self._log(catch_up)):
                surface = await self._guarded(self.session.surface)
        return replace(prepared, surface=self._usable(surface, prepared))

    async def call(
        self,
        prepared: Prepared,
        attempt: Callable[[Surface | None], Awaitable[_T]],
        errors: type[BaseException] = Exception,
    ) -> tuple[_T, Prepared]:
        return await recover_async(
            self, prepared, attempt, errors, self.overflow, self.overflow_again
        )

    async def after(
        self, prepared: Prepared, response: Any, reply: dict[str, Any] | None, **report: Any
    ) -> None:
        self._report_call(prepared, response, report)
        seq = self._reply_seq(prepared)
        if reply is not None and seq is not None:
            result = await self._guarded(lambda: self.session.append([reply], seq=seq))
            if result is not None:
                self.conversation.reply_appended(reply, result.surface_version)
        self._signal_now()

    async def overflow(
        self, error: BaseException, prepared: Prepared, sent: Surface | None
    ) -> Surface | None:
        self._learn(error, sent, prepared)
        plan = self.conversation.plan(prepared.history, prepared.system)
        if plan is not None and await self._guarded(lambda: self._log(plan)):
            relieved = await self._console_overflow(error, self._overflow_version(sent, plan))
            if self._follows(relieved, prepared):
                return relieved
        return self._composed(prepared, force=True)

    async def _console_overflow(self, error: BaseException, version: int | None) -> Surface | None:
        text = error_text(error)
        try:
            for _ in range(self.options.busy_retries):
                try:
                    return (await self.session.overflow(text, surface_version=version)).surface
                except CompactionBusy:
                    await asyncio.sleep(self.options.busy_wait_seconds)
            return (await self.session.overflow(text, surface_version=version)).surface
        except ConsoleError as exc:
            self._overflow_refused(exc)
            return None

    async def overflow_again(self, error: BaseException, surface: Surface | None) -> None:
        self.overflows_failed += 1
        if surface is None or surface.local or not self.breaker.allows():
            return
        try:
            await self.session.overflow(error_text(error), surface_version=surface.version)
        except ConsoleError as exc:
            logger.warning("context console: second overflow: %s", exc)


async def recover_async(
    link: LinkBase,
    prepared: Prepared,
    attempt: Callable[[Surface | None], Awaitable[_T]],
    errors: type[BaseException],
    overflow: Callable[[BaseException, Prepared, Surface | None], Awaitable[Surface | None]],
    overflow_again: Callable[[BaseException, Surface | None], Awaitable[None]],
) -> tuple[_T, Prepared]:
    """`Link.call` for an awaited `attempt`. The console calls are passed in, so an async
    agent on a sync `Link` (LangChain) can run them in a worker thread."""
    surface = prepared.surface
    try:
        result = await attempt(surface)
    except errors as exc:
        if not is_overflow(exc):
            raise
        surface = await overflow(exc, prepared, surface)
        if surface is None:
            raise
        try:
            result = await attempt(surface)
        except errors as again:
            if is_overflow(again):
                await overflow_again(again, surface)
            raise
        link._counted(surface)
    return result, link._recovered(prepared, surface)


# --- what the provider adapters share: the session check, streams, endpoints, the client ------

_S = TypeVar("_S", Session, AsyncSession)


def checked_session(
    session: Session | AsyncSession | None, session_id: str | None, kind: type[_S], refusal: str
) -> _S:
    """`session`, else one from the environment (`session_from_env`); a TypeError saying
    `refusal` when it is not of the client's flavour (`kind`)."""
    if session is None:
        session = session_from_env(session_id, asynchronous=kind is AsyncSession)
    if not isinstance(session, kind):
        raise TypeError(refusal)
    return session


class Accumulator(Protocol):
    """Rebuilds a streamed call's final response from the stream's items (provider-specific)."""

    def add(self, item: Any) -> None: ...

    def final(self) -> Any:
        """The final response as the SDK would have returned it; None until the stream said
        enough (a stream cut short is never reported)."""


class _PassThrough:
    def __init__(self, stream: Any, accumulator: Accumulator, finish: Callable[[Any], Any]):
        self._stream = stream
        self._acc = accumulator
        self._finish = finish
        self._finished = False

    def _take_final(self) -> Any:
        """The final response the first time it is known, else None: `finish` runs once."""
        final = self._acc.final()
        if self._finished or final is None:
            return None
        self._finished = True
        return final

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Stream(_PassThrough):
    """The SDK's stream, passed through item by item; at its end (or `close`) the reply is
    logged and the usage reported, through `finish(final)`."""

    def __iter__(self) -> Iterator[Any]:
        for item in self._stream:
            self._acc.add(item)
            yield item
        self._complete()

    def _complete(self) -> None:
        final = self._take_final()
        if final is not None:
            self._finish(final)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._complete()
        self._stream.close()


class AsyncStream(_PassThrough):
    """The async SDK stream's flavour of `Stream` (`finish` is awaited)."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._items()

    async def _items(self) -> AsyncIterator[Any]:
        async for item in self._stream:
            self._acc.add(item)
            yield item
        await self._complete()

    async def _complete(self) -> None:
        final = self._take_final()
        if final is not None:
            await self._finish(final)

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._complete()
        await self._stream.close()


def stream_request_id(stream: Any, header: str) -> str | None:
    """The request id of a streamed call, from the SDK stream's HTTP response headers."""
    headers = getattr(getattr(stream, "response", None), "headers", None)
    value = headers.get(header) if headers is not None else None
    return str(value) if value else None


@dataclass(frozen=True)
class Wire:
    """How one SDK endpoint speaks: the provider-specific half of an adapter. `history` gives
    the (history, system) to log from the call's keyword arguments; `request` the arguments
    actually sent (the surface, the nudge; it sets `link.last_request`); `reply` the assistant
    message to log from a response; `accumulator` rebuilds a streamed response; `errors` are
    the SDK's status errors (only those can be an overflow)."""

    history: Callable[[dict[str, Any], LinkBase], tuple[list[Any], Any]]
    request: Callable[[dict[str, Any], LinkBase, Surface | None], dict[str, Any]]
    reply: Callable[[Any], dict[str, Any] | None]
    accumulator: Callable[[], Accumulator]
    request_id_header: str
    errors: type[BaseException]


class _EndpointBase:
    def __init__(self, resource: Any, wire: Wire) -> None:
        self._resource = resource
        self._wire = wire

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)


class Endpoint(_EndpointBase):
    """An SDK resource (`messages`, `chat.completions`, `responses`) whose `create` goes
    through the link: logged before, surfaced, recovered once from an overflow, reported after
    (a stream at its end). Everything else on the resource is the SDK's own."""

    def __init__(self, resource: Any, link: Link, wire: Wire) -> None:
        super().__init__(resource, wire)
        self._link = link

    def create(self, **params: Any) -> Any:
        link, wire = self._link, self._wire
        prepared = link.before(*wire.history(params, link))
        response, used = link.call(
            prepared,
            lambda surface: self._resource.create(**wire.request(params, link, surface)),
            wire.errors,
        )
        if not params.get("stream"):
            link.after(used, response, wire.reply(response))
            return response
        request_id = stream_request_id(response, wire.request_id_header)

        def finish(final: Any) -> None:
            link.after(used, final, wire.reply(final), request_id=request_id)

        return Stream(response, wire.accumulator(), finish)


class AsyncEndpoint(_EndpointBase):
    """The async SDK resource's flavour of `Endpoint`."""

    def __init__(self, resource: Any, link: AsyncLink, wire: Wire) -> None:
        super().__init__(resource, wire)
        self._link = link

    async def create(self, **params: Any) -> Any:
        link, wire = self._link, self._wire
        prepared = await link.before(*wire.history(params, link))

        async def attempt(surface: Surface | None) -> Any:
            return await self._resource.create(**wire.request(params, link, surface))

        response, used = await link.call(prepared, attempt, wire.errors)
        if not params.get("stream"):
            await link.after(used, response, wire.reply(response))
            return response
        request_id = stream_request_id(response, wire.request_id_header)

        async def finish(final: Any) -> None:
            await link.after(used, final, wire.reply(final), request_id=request_id)

        return AsyncStream(response, wire.accumulator(), finish)


class WrappedClient:
    """An SDK client whose conversational endpoints go through a link (`context`: D8's
    `context.signal`, `context.session`, the counters); every other attribute is the SDK's."""

    def __init__(self, client: Any, link: LinkBase) -> None:
        self._client = client
        self.context = link

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
