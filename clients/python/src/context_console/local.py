"""Surfaces the client composes itself, when the console is away or its log is behind.

The base is the last console surface that followed the agent's history (checked by its log
position); the messages the agent added since follow it verbatim, so the request is still the
agent's whole history, relieved only where the console relieved it. Every rule is the pure
core's (`context_core`), never a copy: results are bounded at the policy's cap (D3) by
`derive_surface`, and past the provider's window (`window_tokens`, or learned from an overflow
error) the composition is relieved by `plan_relief` in forced mode, as the console relieves an
overflow: prune first, then summarize (D4). The operations are kept for the next calls on the
same base, so the prefix stays byte-stable (D1) until the window is passed again; a new base
(the console is back) starts over.

Pure state; no I/O.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from context_console.client import Surface
from context_console.records import jsonable
from context_core import (
    BoundSpec,
    ConversionError,
    ExtractiveSummarizer,
    Message,
    Operation,
    ReliefPolicy,
    TranscriptError,
    derive_surface,
    estimate_tokens,
    parse_anthropic,
    parse_openai,
    parse_overflow_limit,
    plan_relief,
    to_anthropic,
    to_openai,
)
from context_core import Surface as CoreSurface

logger = logging.getLogger("context_console")

_RELIEF_FIELDS = frozenset(f.name for f in fields(ReliefPolicy)) - {"window_tokens"}
_DEFAULTS = ReliefPolicy()


def request_tokens(messages: Sequence[Any], system: Any) -> int:
    """The estimate of a request's size that the window is compared with: the core's chars to
    tokens of its JSON (markup counts: a provider tokenizes it too)."""
    return estimate_tokens(len(json.dumps([jsonable(system), jsonable(list(messages))])))


def relief_policy(policy: Mapping[str, Any] | None, window: int) -> ReliefPolicy:
    """The console's policy (`GET /policy`) as the core's `ReliefPolicy` for `window`; the
    core's defaults for what the console did not say."""
    values = {k: v for k, v in (policy or {}).items() if k in _RELIEF_FIELDS}
    if "prune_exclude_tools" in values:
        values["prune_exclude_tools"] = frozenset(values["prune_exclude_tools"])
    reserved = int(values.get("reserved_output_tokens", _DEFAULTS.reserved_output_tokens))
    values["reserved_output_tokens"] = min(reserved, window // 4)
    try:
        return ReliefPolicy(**values, window_tokens=window)
    except (TypeError, ValueError) as exc:
        logger.warning("context console: policy unusable for local relief (%s); defaults", exc)
        return ReliefPolicy(window_tokens=window, reserved_output_tokens=window // 4)


@dataclass
class LocalSurfaces:
    """The base, the local relief on it, and what is known of the provider's window."""

    format: Literal["anthropic", "openai"]
    base: Surface | None = None
    operations: list[Operation] = field(default_factory=list)
    learned_window: int | None = None
    # provider tokens per estimated token, from overflow errors that state the size sent
    scale: float = 1.0

    def adopt(self, surface: Surface) -> None:
        """A console surface that follows the history: the next base (local relief restarts)."""
        if self.base is None or (surface.version, surface.log_hash) != (
            self.base.version,
            self.base.log_hash,
        ):
            self.base, self.operations = surface, []

    def learn(self, error_text: str, sent_tokens: int) -> None:
        """An overflow error: the window it states, and how far our estimate of the request
        it refused fell short of the provider's count."""
        try:
            limit = parse_overflow_limit(error_text)
        except ValueError:  # a number of absurd length: no window stated
            return
        if limit is None:
            return
        self.learned_window = limit.limit
        if limit.requested and sent_tokens > 0:
            self.scale = max(self.scale, limit.requested / sent_tokens)

    def window(self, configured: int | None) -> int | None:
        """The window in force: the one the provider stated, else the configured one."""
        return self.learned_window or configured

    def over(self, messages: Sequence[Any], system: Any, budget: int) -> bool:
        return request_tokens(messages, system) * self.scale > budget

    def compose(
        self,
        history: Sequence[Any],
        system: Any,
        first_seq: int,
        *,
        base: Surface | None,
        policy: Mapping[str, Any] | None,
        window: int | None,
        force: bool = False,
    ) -> Surface:
        """`base` plus the history after the log position it follows (the whole history
        without a base), bounded at the policy's cap; relieved (forced) when over the budget of
        `window` or when `force` (the provider refused it). Falls back to the plain composition
        when the core cannot parse it."""
        if base is not None and base is not self.base:
            self.adopt(base)
        if base is not None and base.log_seq is not None:
            messages = [*base.messages, *history[base.log_seq + 1 - first_seq :]]
            system = base.system if base.system is not None else system
            version = base.version
        else:
            messages, version = list(history), 0
            if self.base is not None:
                self.base, self.operations = None, []
        plain = Surface(version, self.format, jsonable(messages), jsonable(system), local=True)
        log = self._parse(messages, system, policy)
        if log is None:
            return plain
        surface = derive_surface(log, self.operations)
        if window is not None:
            rules = relief_policy(policy, window)
            rendered = self._render(surface, version)
            if force or self.over(rendered.messages, rendered.system, rules.budget_tokens):
                plan = plan_relief(
                    surface, policy=rules, mode="forced", summarizer=ExtractiveSummarizer()
                )
                self.operations += plan.operations
                surface = derive_surface(log, self.operations)
        try:
            return self._render(surface, version)
        except ConversionError:
            return plain

    def _parse(
        self, messages: Sequence[Any], system: Any, policy: Mapping[str, Any] | None
    ) -> list[Message] | None:
        cap = (policy or {}).get("max_result_chars") or _DEFAULTS.max_result_chars
        bound = BoundSpec(int(cap))
        try:
            if self.format == "anthropic":
                return parse_anthropic(jsonable(list(messages)), system=system, bound=bound)
            system_first = [] if system is None else [{"role": "system", "content": system}]
            return parse_openai(jsonable([*system_first, *messages]), bound=bound)
        except (TranscriptError, ValueError, TypeError) as exc:
            logger.warning("context console: cannot relieve this history locally: %s", exc)
            return None

    def _render(self, surface: CoreSurface, version: int) -> Surface:
        if self.format == "anthropic":
            system, messages = to_anthropic(surface.messages)
            return Surface(version, self.format, messages, system, local=True)
        return Surface(version, self.format, to_openai(surface.messages), local=True)
