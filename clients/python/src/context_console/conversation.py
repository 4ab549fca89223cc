"""What the adapters share: mapping a caller's history onto the log's seqs, turn and round
counting (D8), the Anthropic cache breakpoints (D1), and recognising a context-length error (D4).

Pure state and functions; the adapters do the I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from context_console.client import ConsoleError, ConsoleUnavailable, Surface
from context_console.records import jsonable
from context_core import LOG_HASH_START, content_digest, extend_log_hash

logger = logging.getLogger("context_console")

# Anthropic: "prompt is too long: 215000 tokens > 200000 maximum"; OpenAI: code
# "context_length_exceeded", "This model's maximum context length is ..."; others say "context
# window" or "too many tokens".
_OVERFLOW = re.compile(
    r"prompt is too long|context_length_exceeded|maximum context length|context window|"
    r"too many (input )?tokens|input is too long",
    re.IGNORECASE,
)


def is_overflow(error: BaseException) -> bool:
    """Whether a provider error says the request exceeded the model's context window."""
    status = getattr(error, "status_code", None)
    if status not in (None, 400, 413):
        return False
    code = getattr(error, "code", None)
    if code == "context_length_exceeded":
        return True
    text = " ".join(
        str(part) for part in (getattr(error, "message", None), getattr(error, "body", None), error)
    )
    return bool(_OVERFLOW.search(text))


def error_text(error: BaseException) -> str:
    message = getattr(error, "message", None)
    return str(message or error)


@dataclass(frozen=True)
class RoundSignal:
    """D8, for the next call of the current turn: `rounds` calls done; `state` is "none",
    "nudge" (from `round_soft_limit`: inject `nudge_text` to re-ground) or "stop" (at
    `round_hard_cap`). The adapters change nothing unless asked (`inject_nudge`,
    `enforce_stop`)."""

    turn: int
    rounds: int
    state: Literal["none", "nudge", "stop"]
    nudge_text: str | None = None

    @property
    def stop(self) -> bool:
        return self.state == "stop"


class RoundLimitReached(RuntimeError):
    """Raised before a call only with `enforce_stop=True`, once the turn hit `round_hard_cap`."""

    def __init__(self, signal: RoundSignal) -> None:
        super().__init__(f"turn {signal.turn} reached the round cap after {signal.rounds} rounds")
        self.signal = signal


def round_signal(turn: int, rounds: int, policy: Mapping[str, Any] | None) -> RoundSignal:
    """The console's D8 rule (cap wins over nudge; a limit of 0 or absent is off)."""
    if not policy:
        return RoundSignal(turn, rounds, "none")
    cap = policy.get("round_hard_cap") or 0
    soft = policy.get("round_soft_limit") or 0
    if cap > 0 and rounds >= cap:
        return RoundSignal(turn, rounds, "stop", policy.get("nudge_text"))
    if soft > 0 and rounds >= soft:
        return RoundSignal(turn, rounds, "nudge", policy.get("nudge_text"))
    return RoundSignal(turn, rounds, "none")


@dataclass(frozen=True)
class AppendPlan:
    """The messages of one call that the log does not hold yet, from `seq` on."""

    messages: list[Any]
    system: Any
    seq: int
    history_length: int
    new_turn: bool


def _is_user_input(message: Any) -> bool:
    """A new user input (not a tool result) opens a turn."""
    message = jsonable(message)
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, list):
        return any(
            not (isinstance(b, dict) and b.get("type") in ("tool_result", "function_call_output"))
            for b in content
        )
    return True


def message_digest(message: Any) -> str:
    """The digest the console's log keeps of `message` as this client sends it (its JSON
    round trip: what the console parses), for the log hash (`context_core.log_position`)."""
    return content_digest(json.loads(json.dumps(jsonable(message))))


@dataclass
class Conversation:
    """Maps a caller's growing history onto the log: caller position i is seq `offset + i`
    (offset 1 when an Anthropic system prompt holds seq 0). The adapter appends the reply
    itself, so the caller's echo of it in the next history is already logged.

    It also knows what the log holds, or will once appended, at each seq (`digests`, and the
    hash chain over them), so a surface is used only when it follows the whole history: the
    console's log position (`Surface.log_seq`, `Surface.log_hash`) must be the history's last
    seq and the hash of what this client appended up to it."""

    format: Literal["anthropic", "openai"]
    logged: int = 0
    started: bool = False
    offset: int = 0
    diverged: bool = False
    turn: int = -1
    rounds: int = 0
    surface_version: int | None = None
    digests: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)

    def first_seq(self, system: Any) -> int:
        """The seq of the history's first message (1 when an Anthropic system prompt is 0)."""
        if self.started:
            return self.offset
        return 1 if self.format == "anthropic" and system is not None else 0

    def plan(self, history: Sequence[Any], system: Any = None) -> AppendPlan | None:
        """What to append before a call with `history`; None when nothing can be appended
        (the caller's history shrank or was rewritten: the log keeps what it had)."""
        if self.diverged:
            return None
        if len(history) < self.logged:
            logger.warning(
                "context console: the history shrank (%d < %d messages logged); no more appends",
                len(history),
                self.logged,
            )
            self.diverged = True
            return None
        fresh = list(history[self.logged :])
        send_system = None
        offset = self.offset
        if not self.started and self.format == "anthropic" and system is not None:
            send_system, offset = system, 1
            self._hold(0, [{"role": "system", "content": system}])
        self._hold(offset + self.logged, fresh)
        new_turn = not self.started or any(_is_user_input(m) for m in fresh)
        return AppendPlan(fresh, send_system, offset + self.logged, len(history), new_turn)

    def _hold(self, seq: int, messages: Sequence[Any]) -> None:
        """What the log will hold from `seq` on (a seq not yet confirmed may be re-planned: a
        reply whose append failed is appended next time as the caller's echo of it)."""
        if not messages:
            return
        del self.digests[seq:]
        del self.chain[seq:]
        if len(self.digests) < seq:  # a gap: nothing is known from here on
            return
        self.digests += [message_digest(m) for m in messages]

    def log_hash(self, seq: int) -> str | None:
        """The hash of the log up to `seq` as this client appended it; None when unknown."""
        if not 0 <= seq < len(self.digests):
            return None
        while len(self.chain) <= seq:
            previous = self.chain[-1] if self.chain else LOG_HASH_START
            self.chain.append(extend_log_hash(previous, self.digests[len(self.chain)]))
        return self.chain[seq]

    def follows(self, surface: Surface, last_seq: int) -> bool:
        """Whether `surface` follows the log up to `last_seq` (the history's last message) and
        that log is what this client appended: no round missing, nothing else in it."""
        return (
            not self.diverged
            and surface.log_seq == last_seq
            and surface.log_hash is not None
            and surface.log_hash == self.log_hash(last_seq)
        )

    def follows_part(self, surface: Surface, last_seq: int) -> bool:
        """Whether `surface` follows a part of the history (up to its `log_seq` <= `last_seq`):
        a base the messages after it can be added to."""
        seq = surface.log_seq
        return seq is not None and seq <= last_seq and self.follows(surface, seq)

    def begin_call(self, plan: AppendPlan | None) -> None:
        """Open a turn on new user input (D8 counts rounds per turn), append or not."""
        if self.turn < 0 or (plan is not None and plan.new_turn):
            self.turn += 1
            self.rounds = 0

    def end_call(self) -> None:
        self.rounds += 1

    def appended(self, plan: AppendPlan, surface_version: int) -> None:
        if not self.started and plan.system is not None:
            self.offset = 1
        self.started = True
        self.logged = plan.history_length
        self.surface_version = surface_version

    def reply_appended(self, reply: Any, surface_version: int) -> None:
        self._hold(self.reply_seq(self.logged), [reply])
        self.logged += 1
        self.surface_version = surface_version

    def rewind(self, logged: int) -> None:
        """The console's log holds only the history's first `logged` messages (it said so):
        the next plan appends from there (idempotent by seq)."""
        self.logged = min(self.logged, max(logged, 0))

    def reply_seq(self, history_length: int) -> int:
        return self.offset + history_length


@dataclass
class Breaker:
    """After the console failed to answer, leave it alone for `cooldown` seconds, so a console
    that is down costs the agent at most one timeout per cooldown, not one per call."""

    cooldown: float = 30.0
    open_until: float = 0.0
    failures: int = 0
    last_error: str | None = None
    clock: Callable[[], float] = field(default=time.monotonic)

    def allows(self) -> bool:
        return self.clock() >= self.open_until

    def failed(self, error: ConsoleError) -> None:
        self.failures += 1
        self.last_error = str(error)
        if isinstance(error, ConsoleUnavailable):
            self.open_until = self.clock() + self.cooldown
        logger.warning("context console: %s (carrying on without it)", error)

    def succeeded(self) -> None:
        self.open_until = 0.0


CacheTTL = Literal["5m", "1h"]


def cache_control(ttl: str | None) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def _marked_blocks(value: Any) -> int:
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(_marked_blocks(v) for v in value.values())
    if isinstance(value, list):
        return sum(_marked_blocks(v) for v in value)
    return 0


def _with_marker(message: dict[str, Any], marker: dict[str, str]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list) and content:
        blocks = list(content)
    else:
        return message
    last = blocks[-1]
    if not isinstance(last, dict) or last.get("type") in ("thinking", "redacted_thinking"):
        return message
    blocks[-1] = {**last, "cache_control": marker}
    return {**message, "content": blocks}


def place_breakpoints(
    system: Any, messages: Sequence[Mapping[str, Any]], ttl: str | None, *, tools: Any = None
) -> tuple[Any, list[dict[str, Any]]]:
    """D1's breakpoint budget on a surface about to be sent: one slot on the stable system block,
    two rolling slots on the history tail (the last message, and the one that ended the previous
    round, so round N+1 reads round N's prefix from cache). Never more than Anthropic's four,
    counting markers the caller put on its tools. Copies; never mutates its arguments."""
    marker = cache_control(ttl)
    budget = 4 - _marked_blocks(tools)
    out_system: Any = copy.deepcopy(system)
    if budget > 0 and isinstance(system, str) and system:
        out_system = [{"type": "text", "text": system, "cache_control": marker}]
        budget -= 1
    elif budget > 0 and isinstance(system, list) and system and isinstance(system[-1], dict):
        out_system = [*system[:-1], {**system[-1], "cache_control": marker}]
        budget -= 1
    out = [dict(m) for m in messages]
    for index in (len(out) - 1, len(out) - 3):
        if budget <= 0 or index < 0:
            break
        marked = _with_marker(out[index], marker)
        if marked is not out[index]:
            out[index] = marked
            budget -= 1
    return out_system, out


def add_nudge_anthropic(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """D8's nudge as a last text block of the last user message: after every cache breakpoint,
    so the cached prefix is untouched and the next round does not miss on it."""
    if not messages or messages[-1].get("role") != "user":
        return [*messages, {"role": "user", "content": text}]
    last = messages[-1]
    content = last.get("content")
    blocks = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    )
    return [*messages[:-1], {**last, "content": [*blocks, {"type": "text", "text": text}]}]


MAX_SEGMENT_TEXT = 20_000


def _segment(kind: str, value: Any, *, with_text: bool = False) -> dict[str, Any]:
    text = json.dumps(_without_markers(jsonable(value)), sort_keys=True, separators=(",", ":"))
    segment: dict[str, Any] = {
        "kind": kind,
        "hash": hashlib.sha256(text.encode()).hexdigest()[:16],
        "tokens": (len(text) + 3) // 4,
    }
    if with_text:
        readable = value if isinstance(value, str) else _texts(value)
        segment["text"] = readable[:MAX_SEGMENT_TEXT]
    return segment


def _without_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_markers(v) for v in value]
    return value


def _texts(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _texts(value.get("text") or value.get("content") or "")
    if isinstance(value, list):
        return "\n".join(t for t in (_texts(v) for v in value) if t)
    return ""


def prefix_segments(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """D1/D2 fingerprints of a request as sent: `tools`, `system` (with its text, so the console
    can show what changed), then one segment per message, each a hash and a chars/4 estimate of
    its canonical JSON (cache_control markers left out: moving a breakpoint changes no prefix).
    Works on Anthropic (`system`, `messages`), OpenAI Chat (a leading system/developer message)
    and Responses (`instructions`, `input`) keyword arguments."""
    segments: list[dict[str, Any]] = []
    if request.get("tools"):
        segments.append(_segment("tools", request["tools"]))
    messages: Any = request.get("messages")
    if messages is None:
        messages = request.get("input")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
    messages = list(messages or [])
    system = request.get("system") or request.get("instructions")
    if system is None and messages:
        first = jsonable(messages[0])
        if isinstance(first, dict) and first.get("role") in ("system", "developer"):
            system, messages = first.get("content"), messages[1:]
    if system:
        segments.append(_segment("system", system, with_text=True))
    segments += [_segment("message", m) for m in messages]
    return segments
