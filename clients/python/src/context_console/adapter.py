"""The provider-independent half of an adapter: append before a call, fetch the surface, count
rounds, report after, recover once from an overflow. Sync (`Link`) and async (`AsyncLink`)
flavours share `LinkBase`; the provider modules supply the wire details.

Nothing here raises into the agent for the console's sake: a console error opens a breaker and
the call goes on with the caller's own messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from context_console.client import (
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
    prefix_segments,
    round_signal,
)

logger = logging.getLogger("context_console")


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
    """What `before` decided for one call."""

    plan: AppendPlan | None
    history_length: int
    surface: Surface | None
    logged: bool


class LinkBase:
    """State shared by the sync and async links; exposed to callers as `client.context`."""

    def __init__(self, options: AdapterOptions, conversation: Conversation) -> None:
        self.options = options
        self.conversation = conversation
        self.breaker = Breaker(cooldown=options.console_cooldown_seconds)
        self.signal = RoundSignal(0, 0, "none")
        self.overflows_recovered = 0
        self.overflows_failed = 0
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
            "surface_version": surface.version if surface is not None else None,
            "window_tokens": self.options.window_tokens,
            # D1/D2: what was sent, segment by segment, so the console can name a cache break
            "prefix": (
                prefix_segments(self.last_request)
                if self.options.fingerprints and self.last_request is not None
                else None
            ),
        }


class Link(LinkBase):
    """The synchronous link between one wrapped client and one console session."""

    def __init__(self, session: Session, options: AdapterOptions, conversation: Conversation):
        super().__init__(options, conversation)
        self.session = session

    def _load_policy(self) -> None:
        if not self.breaker.allows():
            return
        try:
            self._policy = self.session.policy()
        except ConsoleError as exc:
            self.breaker.failed(exc)

    def before(self, history: list[Any], system: Any = None) -> Prepared:
        conv = self.conversation
        self.last_request = None
        plan = conv.plan(history, system)
        conv.begin_call(plan)
        self._load_policy()
        self._check_stop()
        logged = False
        if plan is not None and self.breaker.allows():
            try:
                if plan.messages or plan.system is not None:
                    result = self.session.append(plan.messages, system=plan.system, seq=plan.seq)
                    conv.appended(plan, result.surface_version)
                logged = conv.started and conv.logged == len(history)
                self.breaker.succeeded()
            except ConsoleError as exc:
                self.breaker.failed(exc)
        surface = None
        if self.options.use_surface and logged and self.breaker.allows():
            try:
                surface = self.session.surface()
            except ConsoleError as exc:
                self.breaker.failed(exc)
        return Prepared(plan, len(history), surface, logged)

    def after(
        self, prepared: Prepared, response: Any, reply: dict[str, Any] | None, **report: Any
    ) -> None:
        conv = self.conversation
        conv.end_call()
        try:
            self.session.report(response, **self._report_args(prepared.surface), **report)
        except ValueError as exc:
            logger.warning("context console: cannot report this response: %s", exc)
        if (
            reply is not None
            and prepared.logged
            and conv.logged == prepared.history_length
            and self.breaker.allows()
        ):
            try:
                result = self.session.append([reply], seq=conv.reply_seq(prepared.history_length))
                conv.reply_appended(result.surface_version)
            except ConsoleError as exc:
                self.breaker.failed(exc)
        self._signal_now()

    def overflow(self, error: BaseException, surface: Surface | None) -> Surface | None:
        """D4: report the overflow; the surface to retry with, or None (then the caller's error
        stands)."""
        version = surface.version if surface is not None else self.conversation.surface_version
        try:
            for _ in range(self.options.busy_retries):
                try:
                    result = self.session.overflow(error_text(error), surface_version=version)
                    break
                except CompactionBusy:
                    time.sleep(self.options.busy_wait_seconds)
            else:
                result = self.session.overflow(error_text(error), surface_version=version)
        except OverflowUnrecoverable as exc:
            logger.warning("context console: overflow not recoverable: %s", exc)
            return None
        except ConsoleError as exc:
            self.breaker.failed(exc)
            return None
        return result.surface

    def overflow_again(self, error: BaseException, surface: Surface | None) -> None:
        """The retry overflowed too: tell the console (it counts it), then the error stands."""
        self.overflows_failed += 1
        try:
            version = surface.version if surface is not None else None
            self.session.overflow(error_text(error), surface_version=version)
        except ConsoleError as exc:
            logger.warning("context console: second overflow: %s", exc)


class AsyncLink(LinkBase):
    """The asyncio flavour of `Link`."""

    def __init__(self, session: AsyncSession, options: AdapterOptions, conversation: Conversation):
        super().__init__(options, conversation)
        self.session = session

    async def _load_policy(self) -> None:
        if not self.breaker.allows():
            return
        try:
            self._policy = await self.session.policy()
        except ConsoleError as exc:
            self.breaker.failed(exc)

    async def before(self, history: list[Any], system: Any = None) -> Prepared:
        conv = self.conversation
        self.last_request = None
        plan = conv.plan(history, system)
        conv.begin_call(plan)
        await self._load_policy()
        self._check_stop()
        logged = False
        if plan is not None and self.breaker.allows():
            try:
                if plan.messages or plan.system is not None:
                    result = await self.session.append(
                        plan.messages, system=plan.system, seq=plan.seq
                    )
                    conv.appended(plan, result.surface_version)
                logged = conv.started and conv.logged == len(history)
                self.breaker.succeeded()
            except ConsoleError as exc:
                self.breaker.failed(exc)
        surface = None
        if self.options.use_surface and logged and self.breaker.allows():
            try:
                surface = await self.session.surface()
            except ConsoleError as exc:
                self.breaker.failed(exc)
        return Prepared(plan, len(history), surface, logged)

    async def after(
        self, prepared: Prepared, response: Any, reply: dict[str, Any] | None, **report: Any
    ) -> None:
        conv = self.conversation
        conv.end_call()
        try:
            self.session.report(response, **self._report_args(prepared.surface), **report)
        except ValueError as exc:
            logger.warning("context console: cannot report this response: %s", exc)
        if (
            reply is not None
            and prepared.logged
            and conv.logged == prepared.history_length
            and self.breaker.allows()
        ):
            try:
                result = await self.session.append(
                    [reply], seq=conv.reply_seq(prepared.history_length)
                )
                conv.reply_appended(result.surface_version)
            except ConsoleError as exc:
                self.breaker.failed(exc)
        self._signal_now()

    async def overflow(self, error: BaseException, surface: Surface | None) -> Surface | None:
        version = surface.version if surface is not None else self.conversation.surface_version
        try:
            for _ in range(self.options.busy_retries):
                try:
                    result = await self.session.overflow(error_text(error), surface_version=version)
                    break
                except CompactionBusy:
                    await asyncio.sleep(self.options.busy_wait_seconds)
            else:
                result = await self.session.overflow(error_text(error), surface_version=version)
        except OverflowUnrecoverable as exc:
            logger.warning("context console: overflow not recoverable: %s", exc)
            return None
        except ConsoleError as exc:
            self.breaker.failed(exc)
            return None
        return result.surface

    async def overflow_again(self, error: BaseException, surface: Surface | None) -> None:
        self.overflows_failed += 1
        try:
            version = surface.version if surface is not None else None
            await self.session.overflow(error_text(error), surface_version=version)
        except ConsoleError as exc:
            logger.warning("context console: second overflow: %s", exc)
