"""Demo traffic for the console: a small, deterministic fleet of realistic agent sessions.

Standard library only (no Django, nothing of `compaction`): `build_scenario` is a pure function
of the seed, the clock reading it is given and the per-profile limits, so the unit suite can pin
it and `manage.py simulate` can replay it through the real HTTP API.

What the fleet shows (numbers from `ROSTER`):

- Anthropic (dated Sonnet 4.5, Opus 4.5, Haiku 4.5, a Bedrock Sonnet id), OpenAI (gpt-5 in the
  Chat Completions usage shape with reasoning tokens, gpt-4.1 in the Responses shape, gpt-5-mini
  as an OpenTelemetry `gen_ai.usage.*` dict), one self-hosted model no catalogue prices, and one
  Sonnet session on the 1M-token window (reported per record as `window_tokens`).
- Tool-heavy turns of 1-15 rounds, one turn past `round_soft_limit` (the nudge) and one that runs
  into `round_hard_cap` (the stop).
- Context growing turn by turn to a planned pressure: some sessions stay `ok`, some end in the
  `prune` band, some in `compact` (at or above `summarize_threshold`).
- A prompt cache that behaves like the providers': Anthropic writes the prefix, then reads it
  and writes only what is new; an entry lives for the profile's TTL (5 minutes, or 1 hour for
  fleet/desktop, reported as `cache_creation.ephemeral_1h_input_tokens`) and is refreshed by a
  hit. A gap between turns longer than the TTL, or a changed system prompt, costs a full rewrite.
  OpenAI caches automatically in 128-token steps and forgets an idle prefix after a few minutes.
- Gaps between turns of 1-4 minutes and of 10-50 minutes, so the 5-minute and 1-hour tiers
  differ; calls within a turn are seconds apart.

Each turn is a `TurnEvent`: the user message, then per round the call record to report, the
assistant reply and the tool results appended after it (wire-format messages, Anthropic or
OpenAI Chat). Tool results read like their tool's output (code, logs, test runs, JSON, git
log, tickets), with non-ASCII text throughout; a few are whole files or long logs of 20-80k
characters early in a session (so a later prune has something to stub, and some exceed the
50,000-character bound), and one carries a NUL character.

Transcripts: `SessionScript.appends()` is the log as the agent appends it, one append before
each call (see there), so each record can carry the `surface_version` its request used. A
record's `appended_chars` is exactly the characters, as the compaction core counts them
(`Message.chars`: text, tool-call name plus compact JSON arguments, tool-result text), of the
tool results appended after its reply; the reply is counted by the output tokens. A changed
system prompt cannot replace the log's seq 0, so it reaches the log as a reminder at the head of
that turn's user message.

Compaction demo: three roster sessions carry a `demo` role the command acts on itself. The
`overflow` session gets an `OverflowTurn`: a pasted log takes its next request past the wall,
the agent reports the overflow and retries on the compacted surface.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from telemetry.pressure import CHARS_PER_TOKEN

Profile = Literal["default", "fleet", "desktop"]
PROFILES: Final[tuple[Profile, ...]] = ("default", "fleet", "desktop")
CacheTTL = Literal["5m", "1h"]
# How the agent's SDK reports usage (the `usage` object's shape).
Shape = Literal[
    "anthropic", "bedrock", "openai_chat", "openai_responses", "otel", "openai_compatible"
]
Band = Literal["ok", "prune", "compact"]
Signal = Literal["none", "nudge", "stop"]
WireFormat = Literal["anthropic", "openai"]
# The compaction step a session is kept for (the command runs it itself, see the module doc).
DemoRole = Literal["overflow", "archive_outage", "manual_compact"]
Message = dict[str, Any]

SHORT_GAP: Final = (60.0, 240.0)  # seconds between turns: the user answers quickly
LONG_GAP: Final = (600.0, 3000.0)  # the user was away
MAX_ROUND_GAP: Final = 60.0  # calls within a turn are closer than this
ROUNDS: Final = (1, 15)  # rounds of an ordinary turn
ANTHROPIC_TTL_SECONDS: Final[Mapping[CacheTTL, float]] = {"5m": 300.0, "1h": 3600.0}
OPENAI_IDLE_SECONDS: Final = 420.0  # OpenAI drops an idle prefix after 5-10 minutes
OPENAI_CACHE_MIN: Final = 1024
OPENAI_CACHE_STEP: Final = 128
BIG_RESULT_CHARS: Final = (20_000, 80_000)  # a whole source file, a long log
# Tools whose result can be a whole file or a long log.
BIG_TOOLS: Final = frozenset(
    {"read_file", "bash", "query_logs", "fetch_log", "git_log", "run_tests", "http_get", "get_diff"}
)


@dataclass(frozen=True, slots=True)
class Limits:
    """The parts of an agent profile's effective policy the scenario plans against."""

    cache_ttl: CacheTTL = "5m"
    prune_threshold: float = 0.60
    summarize_threshold: float = 0.80
    reserved_output_tokens: int = 16_000
    round_soft_limit: int = 40
    round_hard_cap: int = 100

    @classmethod
    def from_policy(cls, policy: Mapping[str, Any]) -> Limits:
        """From the body of GET /api/v1/policy; raises ValueError when a field is off."""
        ttl = policy.get("cache_ttl")
        if ttl not in ("5m", "1h"):
            raise ValueError(f"cache_ttl: expected '5m' or '1h', got {ttl!r}")
        numbers: dict[str, Any] = {}
        for name in ("prune_threshold", "summarize_threshold"):
            value = policy.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name}: expected a number, got {value!r}")
            numbers[name] = float(value)
        for name in ("reserved_output_tokens", "round_soft_limit", "round_hard_cap"):
            value = policy.get(name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name}: expected an integer, got {value!r}")
            numbers[name] = value
        return cls(cache_ttl=ttl, **numbers)

    def usable(self, window_tokens: int) -> int:
        return window_tokens - self.reserved_output_tokens

    def band(self, pressure: float) -> str:
        if pressure > 1.0:
            return "over"
        if pressure >= self.summarize_threshold:
            return "compact"
        if pressure >= self.prune_threshold:
            return "prune"
        return "ok"

    def signal(self, rounds: int) -> Signal:
        if rounds >= self.round_hard_cap:
            return "stop"
        if rounds >= self.round_soft_limit:
            return "nudge"
        return "none"


DEFAULT_LIMITS: Final[Mapping[Profile, Limits]] = {
    "default": Limits(),
    "fleet": Limits(cache_ttl="1h"),
    "desktop": Limits(cache_ttl="1h"),
}


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One session of the roster: who, on what model, and how its context should evolve.

    `band`/`position` place the session's final projected request: in "ok" at `position` ×
    prune_threshold, in "prune" that far between the two thresholds, in "compact" that far
    between summarize_threshold and the wall. `gaps` has one letter per turn boundary:
    "s" a 1-4 minute gap, "l" a 10-50 minute one. `long_turn` is (turn, "nudge" | "stop"):
    that turn runs past round_soft_limit, or exactly to round_hard_cap.
    `big_results` tool results of 20-80k characters (a whole file, a long log) land in the first
    half of the session, where a later prune can stub them; `nul_turn`'s first tool result
    carries a NUL character. `demo` marks the session the command keeps for one compaction step.
    """

    slug: str
    task: str
    profile: Profile
    model: str
    shape: Shape
    provider: str | None
    window_tokens: int
    report_window: bool
    band: Band
    position: float
    turns: int
    prefix_tokens: int
    gaps: str
    ends_ago_minutes: int
    long_turn: tuple[int, Signal] | None = None
    system_change_turn: int | None = None
    reasoning: bool = False
    priced: bool = True
    tool_names: tuple[str, ...] = ("bash", "read_file", "grep", "edit_file")
    big_results: int = 0
    nul_turn: int | None = None
    demo: DemoRole | None = None

    def __post_init__(self) -> None:
        if len(self.gaps) != self.turns - 1 or set(self.gaps) - {"s", "l"}:
            raise ValueError(f"{self.slug}: gaps needs {self.turns - 1} letters of 's'/'l'")
        if not 0 < self.position < 1:
            raise ValueError(f"{self.slug}: position must be inside (0, 1)")
        if self.big_results and not set(self.tool_names) & BIG_TOOLS:
            raise ValueError(f"{self.slug}: big_results needs a tool that returns files or logs")

    @property
    def wire(self) -> WireFormat:
        return "anthropic" if self.shape in ("anthropic", "bedrock") else "openai"


ROSTER: Final[tuple[SessionSpec, ...]] = (
    SessionSpec(
        slug="billing-refactor",
        task="refactor the invoice rounding in billing/ and keep the tests green",
        profile="default",
        model="claude-sonnet-4-5-20250929",
        shape="anthropic",
        provider="anthropic",
        window_tokens=200_000,
        report_window=False,
        band="compact",
        position=0.35,
        turns=9,
        prefix_tokens=14_200,
        gaps="sslsssss",
        ends_ago_minutes=6,
        system_change_turn=6,
        big_results=2,
        demo="overflow",
    ),
    SessionSpec(
        slug="incident-triage",
        task="triage the 502s on the checkout API from last night's alerts",
        profile="fleet",
        model="claude-opus-4-5-20251101",
        shape="anthropic",
        provider="anthropic",
        window_tokens=200_000,
        report_window=False,
        band="prune",
        position=0.3,
        turns=7,
        prefix_tokens=18_600,
        gaps="lsllls",
        ends_ago_minutes=12,
        tool_names=("query_logs", "get_metrics", "bash", "read_file"),
        big_results=3,
        nul_turn=2,
    ),
    SessionSpec(
        slug="flaky-test-bisect",
        task="find which commit made tests/integration/test_sync.py flaky",
        profile="default",
        model="claude-haiku-4-5-20251001",
        shape="anthropic",
        provider="anthropic",
        window_tokens=200_000,
        report_window=False,
        band="prune",
        position=0.5,
        turns=4,
        prefix_tokens=9_800,
        gaps="sss",
        ends_ago_minutes=3,
        long_turn=(3, "stop"),
        tool_names=("bash", "git_log", "run_tests", "read_file"),
        big_results=2,
    ),
    SessionSpec(
        slug="monorepo-migration",
        task="move the web, worker and shared packages into one workspace",
        profile="desktop",
        model="claude-sonnet-4-5-20250929",
        shape="anthropic",
        provider="anthropic",
        window_tokens=1_000_000,
        report_window=True,
        band="ok",
        position=0.45,
        turns=8,
        prefix_tokens=21_500,
        gaps="lsllsls",
        ends_ago_minutes=25,
        big_results=3,
        demo="manual_compact",
    ),
    SessionSpec(
        slug="dependency-audit",
        task="audit the lockfiles for vulnerable or unmaintained dependencies",
        profile="fleet",
        model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        shape="bedrock",
        provider="aws.bedrock",
        window_tokens=200_000,
        report_window=False,
        band="compact",
        position=0.2,
        turns=6,
        prefix_tokens=12_400,
        gaps="lslsl",
        ends_ago_minutes=40,
        tool_names=("bash", "read_file", "http_get"),
        big_results=2,
        demo="archive_outage",
    ),
    SessionSpec(
        slug="api-docs-writer",
        task="write reference docs for every public endpoint of the orders API",
        profile="default",
        model="gpt-5",
        shape="openai_chat",
        provider="openai",
        window_tokens=400_000,
        report_window=False,
        band="ok",
        position=0.75,
        turns=5,
        prefix_tokens=11_300,
        gaps="ssls",
        ends_ago_minutes=9,
        long_turn=(3, "nudge"),
        reasoning=True,
        big_results=1,
    ),
    SessionSpec(
        slug="support-triage",
        task="label and route the overnight support tickets",
        profile="fleet",
        model="gpt-4.1",
        shape="openai_responses",
        provider="openai",
        window_tokens=1_047_576,
        report_window=False,
        band="ok",
        position=0.2,
        turns=6,
        prefix_tokens=8_900,
        gaps="lslls",
        ends_ago_minutes=18,
        tool_names=("search_tickets", "get_ticket", "set_label"),
    ),
    SessionSpec(
        slug="ci-log-summarizer",
        task="summarise why the nightly CI pipeline failed",
        profile="default",
        model="gpt-5-mini",
        shape="otel",
        provider="openai",
        window_tokens=400_000,
        report_window=False,
        band="ok",
        position=0.3,
        turns=5,
        prefix_tokens=6_200,
        gaps="slss",
        ends_ago_minutes=30,
        reasoning=True,
        tool_names=("fetch_log", "grep"),
        big_results=1,
    ),
    SessionSpec(
        slug="local-coder",
        task="port the CSV importer to the streaming parser",
        profile="default",
        model="acme-coder-70b",
        shape="openai_compatible",
        provider="openai",
        window_tokens=131_072,
        report_window=True,
        band="prune",
        position=0.4,
        turns=5,
        prefix_tokens=5_400,
        gaps="ssss",
        ends_ago_minutes=15,
        priced=False,
        big_results=1,
    ),
    SessionSpec(
        slug="desktop-notes",
        task="tidy my meeting notes into action items",
        profile="desktop",
        model="claude-haiku-4-5-20251001",
        shape="anthropic",
        provider="anthropic",
        window_tokens=200_000,
        report_window=False,
        band="ok",
        position=0.25,
        turns=4,
        prefix_tokens=7_100,
        gaps="lls",
        ends_ago_minutes=50,
        tool_names=("read_file", "write_file"),
    ),
    SessionSpec(
        slug="pr-review",
        task="review pull request #1842 (retry budget for the payments client)",
        profile="default",
        model="claude-opus-4-5-20251101",
        shape="anthropic",
        provider="anthropic",
        window_tokens=200_000,
        report_window=False,
        band="ok",
        position=0.55,
        turns=3,
        prefix_tokens=16_800,
        gaps="ss",
        ends_ago_minutes=70,
        tool_names=("get_diff", "read_file", "grep"),
    ),
)


# --- the records and events ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One LLM call as the agent reports it, and what the console should derive from it."""

    session_id: str
    profile: Profile
    turn: int
    call: int
    model: str
    usage: Mapping[str, Any]
    provider: str | None
    request_id: str | None
    request_chars: int | None
    appended_chars: int
    window_tokens: int | None
    at: datetime
    # Expected figures (not sent): the request's size, the reply, and the projection.
    context_tokens: int
    cache_read: int
    cache_write: int
    output: int
    reasoning: int | None
    projected_next: int
    # Prefix fingerprints (tools, system) the agent reports, when it does (issue 13, D2).
    prefix: tuple[Mapping[str, Any], ...] | None = None

    def payload(self, surface_version: int | None = None) -> dict[str, Any]:
        """The JSON record for POST /api/v1/telemetry; `surface_version` is the transcript
        surface the request was built from (the agent read it from its last append)."""
        body: dict[str, Any] = {
            "session_id": self.session_id,
            "turn": self.turn,
            "call": self.call,
            "model": self.model,
            "usage": _plain(self.usage),
            "appended_chars": self.appended_chars,
            "at": format_at(self.at),
        }
        for name in ("provider", "request_id", "request_chars", "window_tokens"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if surface_version is not None:
            body["surface_version"] = surface_version
        if self.prefix is not None:
            body["prefix"] = [dict(segment) for segment in self.prefix]
        return body


@dataclass(frozen=True, slots=True)
class Round:
    """One call of a turn: the record, the assistant's reply, and what was appended after it."""

    record: CallRecord
    reply: Message
    appended: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """A turn: the user's message, then its rounds in order.

    The transcript of the turn is `user`, then each round's `reply` and `appended`. `system` is
    the system prompt in force (it changed at this turn when `system_changed`);
    `cache_expired` says the gap before the turn outlived the prompt cache.
    """

    session_id: str
    spec: SessionSpec
    turn: int
    user: Message
    rounds: tuple[Round, ...]
    system: str
    system_changed: bool
    cache_expired: bool
    gap_before: timedelta | None

    @property
    def records(self) -> tuple[CallRecord, ...]:
        return tuple(r.record for r in self.rounds)

    @property
    def started_at(self) -> datetime:
        return self.rounds[0].record.at

    def messages(self) -> Iterator[Message]:
        yield self.user
        for r in self.rounds:
            yield r.reply
            yield from r.appended


CallKey = tuple[int, int]  # (turn, call)


@dataclass(frozen=True, slots=True)
class Append:
    """One POST /api/v1/sessions/{session_id}/messages: messages the agent adds to its log.

    `before` is the call whose request is built from the surface right after this append, so
    that call's record carries the `surface_version` this append answers; None for the reply
    that ends the session. The Anthropic `system` prompt is the log's seq 0 (first append only);
    OpenAI sends it as its first message.
    """

    session_id: str
    profile: Profile
    format: WireFormat
    first_seq: int
    messages: tuple[Message, ...]
    before: CallKey | None
    system: str | None = None

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.messages) - 1

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"format": self.format}
        if self.system is not None:
            body["system"] = self.system
        body["messages"] = [
            {"seq": self.first_seq + i, **_plain(m)} for i, m in enumerate(self.messages)
        ]
        return body


@dataclass(frozen=True, slots=True)
class OverflowTurn:
    """The turn after the session's last: the user pastes a long log, and the request built from
    the surface that includes it is rejected as too long (D4).

    The agent reports the overflow with the surface version the request used, reads the
    compacted surface from the answer and retries once. Only the server knows how small the
    surface became, so `retry(surface_tokens)` makes the retried call's record from it: the
    request is that surface plus what the log does not hold (tool schemas), the stable prefix
    (tool schemas and system prompt) is still cached, the compacted history is written anew.
    """

    session_id: str
    spec: SessionSpec
    limits: Limits
    turn: int
    user: Message
    reply: Message
    rejected_tokens: int
    detail: str
    overhead_tokens: int
    stable_tokens: int
    output: int
    uncached: int
    request_id: str | None
    at: datetime
    first_seq: int

    def appends(self) -> tuple[Append, Append]:
        """The pasted log (before the rejected request) and the retried call's reply."""
        fmt = self.spec.wire
        profile = self.spec.profile
        return (
            Append(self.session_id, profile, fmt, self.first_seq, (self.user,), (self.turn, 0)),
            Append(self.session_id, profile, fmt, self.first_seq + 1, (self.reply,), None),
        )

    def retry(self, surface_tokens: int) -> CallRecord:
        """The retried call, on a compacted surface of `surface_tokens` (the server's estimate)."""
        context = surface_tokens + self.overhead_tokens
        uncached = min(self.uncached, context)
        read = 0
        if self.spec.shape in ("anthropic", "bedrock"):
            read = min(self.stable_tokens, context - uncached)
        elif self.spec.shape != "openai_compatible" and self.stable_tokens >= OPENAI_CACHE_MIN:
            read = min(self.stable_tokens, context) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
            uncached = context - read
        draft = _RoundDraft(
            clock=0.0,
            context=context,
            read=read,
            write=context - read - uncached,
            uncached=uncached,
            output=self.output,
            reasoning=None,
            appended_chars=0,
            request_chars=0,
            reply=self.reply,
            appended=(),
        )
        return CallRecord(
            session_id=self.session_id,
            profile=self.spec.profile,
            turn=self.turn,
            call=0,
            model=self.spec.model,
            usage=_usage(self.spec.shape, draft, self.limits.cache_ttl),
            provider=self.spec.provider,
            request_id=self.request_id,
            request_chars=None,
            appended_chars=0,
            window_tokens=self.spec.window_tokens if self.spec.report_window else None,
            at=self.at,
            context_tokens=context,
            cache_read=read,
            cache_write=draft.write,
            output=self.output,
            reasoning=None,
            projected_next=context + self.output,
        )


@dataclass(frozen=True, slots=True)
class SessionScript:
    session_id: str
    spec: SessionSpec
    limits: Limits
    turns: tuple[TurnEvent, ...]
    overflow: OverflowTurn | None = None

    def appends(self) -> tuple[Append, ...]:
        """The transcript as the agent appends it, one append before each call.

        First the system prompt and the first user message; before each further call of a turn
        the previous call's reply and its tool results; before a turn's first call the last
        reply of the turn before and the new user message; at the end the last reply. So each
        call's request is exactly the log up to its append, and the tool results appended after
        a call are the messages whose characters are its record's `appended_chars`.
        """
        fmt = self.spec.wire
        out: list[Append] = []
        seq = 1 if fmt == "anthropic" else 0
        system: str | None = self.turns[0].system
        pending: list[Message] = []
        if fmt == "openai":
            pending.append({"role": "system", "content": system})
            system = None

        def flush(before: CallKey | None) -> None:
            nonlocal seq, system
            out.append(
                Append(
                    self.session_id,
                    self.spec.profile,
                    fmt,
                    seq,
                    tuple(pending),
                    before,
                    system,
                )
            )
            seq += len(pending)
            system = None
            pending.clear()

        for event in self.turns:
            pending.append(event.user)
            for k, rnd in enumerate(event.rounds):
                flush((event.turn, k))
                pending.append(rnd.reply)
                pending.extend(rnd.appended)
        flush(None)
        return tuple(out)

    @property
    def log_length(self) -> int:
        """Messages in the log after every scripted append (the system prompt included)."""
        last = self.appends()[-1]
        return last.last_seq + 1

    @property
    def records(self) -> tuple[CallRecord, ...]:
        return tuple(rec for t in self.turns for rec in t.records)

    @property
    def last(self) -> CallRecord:
        return self.turns[-1].rounds[-1].record

    @property
    def usable_window(self) -> int:
        return self.limits.usable(self.spec.window_tokens)

    @property
    def final_pressure(self) -> float:
        return self.last.projected_next / self.usable_window

    @property
    def final_band(self) -> str:
        return self.limits.band(self.final_pressure)

    @property
    def max_rounds(self) -> int:
        return max(len(t.rounds) for t in self.turns)

    @property
    def signal(self) -> Signal:
        return self.limits.signal(self.max_rounds)

    @property
    def cache_break_turns(self) -> tuple[int, ...]:
        return tuple(t.turn for t in self.turns if t.system_changed or t.cache_expired)


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    now: datetime
    sessions: tuple[SessionScript, ...]

    @property
    def records(self) -> tuple[CallRecord, ...]:
        return tuple(rec for s in self.sessions for rec in s.records)

    @property
    def profiles(self) -> tuple[Profile, ...]:
        return tuple(p for p in PROFILES if any(s.spec.profile == p for s in self.sessions))

    def turn_events(self) -> Iterator[TurnEvent]:
        """Every turn of every session, in the order they started (ties by session order)."""
        events = [(t.started_at, i, t) for i, s in enumerate(self.sessions) for t in s.turns]
        for _, _, event in sorted(events, key=lambda e: (e[0], e[1], e[2].turn)):
            yield event


def _system_prefix(spec: SessionSpec, system: str) -> tuple[Mapping[str, Any], ...]:
    """The tools and system segments of a request, as an agent fingerprints them."""
    tools = ",".join(spec.tool_names)
    return (
        {"kind": "tools", "hash": _short_hash(tools), "tokens": 600 * len(spec.tool_names)},
        {
            "kind": "system",
            "hash": _short_hash(system),
            "tokens": len(system) // CHARS_PER_TOKEN,
            "text": system[:20_000],
        },
    )


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def format_at(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, to the millisecond."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _plain(value: Any) -> Any:
    """A deep copy made of dicts and lists (the records hold read-only mappings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- building the scenario -------------------------------------------------------------------


def build_scenario(
    *,
    seed: int = 7,
    now: datetime,
    sessions: int | None = None,
    limits: Mapping[Profile, Limits] | None = None,
) -> Scenario:
    """The fleet for `seed`, ending before `now` (timezone-aware). Same arguments, same scenario.

    `sessions` takes the first N of `ROSTER` (all by default); more than the roster repeats it
    with numbered variants. Session ids carry a digest of seed and `now`, so another run of the
    command creates new sessions instead of colliding with the last ones.
    """
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    count = len(ROSTER) if sessions is None else sessions
    if count < 1:
        raise ValueError("sessions must be at least 1")
    all_limits = {**DEFAULT_LIMITS, **(limits or {})}
    scripts = []
    for index in range(count):
        spec = ROSTER[index % len(ROSTER)]
        lap = index // len(ROSTER)
        name = spec.slug if lap == 0 else f"{spec.slug}-{lap + 1}"
        digest = hashlib.sha256(f"{seed}|{now.isoformat()}|{name}".encode()).hexdigest()[:6]
        rng = random.Random(f"simulate|{seed}|{name}")
        ends_at = now - timedelta(minutes=spec.ends_ago_minutes + 97 * lap)
        scripts.append(
            _SessionBuilder(
                spec, f"{name}-{digest}", all_limits[spec.profile], rng, ends_at
            ).build()
        )
    return Scenario(seed=seed, now=now, sessions=tuple(scripts))


def target_pressure(spec: SessionSpec, limits: Limits) -> float:
    """Where `spec`'s final projected request lands, as a share of the usable window."""
    prune, summarize = limits.prune_threshold, limits.summarize_threshold
    if spec.band == "ok":
        return spec.position * prune
    if spec.band == "prune":
        return prune + spec.position * (summarize - prune)
    return summarize + spec.position * (1.0 - summarize)


@dataclass
class _Plan:
    rounds: list[int]
    outputs: list[list[int]]  # per turn, per round: output tokens (reasoning included)
    reasoning: list[list[int | None]]
    results: list[list[int]]  # per turn, per round: tokens appended after the reply
    user_tokens: list[int]
    gaps: list[float]
    system_delta: int
    big: dict[tuple[int, int], int]  # (turn index, round) -> characters of a big tool result


class _SessionBuilder:
    def __init__(
        self, spec: SessionSpec, session_id: str, limits: Limits, rng: random.Random, ends: datetime
    ) -> None:
        self.spec = spec
        self.session_id = session_id
        self.limits = limits
        self.rng = rng
        self.ends = ends
        self.texts = _TextSource(rng)

    # The plan: token budgets first, so the final pressure lands where the spec says.
    def _plan(self) -> _Plan:
        spec, rng, limits = self.spec, self.rng, self.limits
        rounds = []
        for turn in range(1, spec.turns + 1):
            if spec.long_turn is not None and spec.long_turn[0] == turn:
                n = (
                    limits.round_hard_cap
                    if spec.long_turn[1] == "stop"
                    else min(limits.round_soft_limit + 6, limits.round_hard_cap - 1)
                )
            elif turn == spec.system_change_turn:
                n = 2  # one rewrite, then a hit: the turn's cache-hit ratio visibly drops
            elif turn == 1:
                n = rng.randint(3, 8)
            else:
                n = max(ROUNDS[0], min(ROUNDS[1], round(rng.lognormvariate(1.55, 0.55))))
            rounds.append(n)
        outputs: list[list[int]] = []
        reasoning: list[list[int | None]] = []
        for n in rounds:
            long_turn = n > ROUNDS[1]
            outs, reas = [], []
            for k in range(n):
                final = k == n - 1
                visible = rng.randint(250, 1400) if final else rng.randint(60, 420)
                if long_turn and not final:
                    visible = rng.randint(50, 160)
                think = rng.randint(64, 2200) if spec.reasoning else None
                outs.append(visible + (think or 0))
                reas.append(think)
            outputs.append(outs)
            reasoning.append(reas)
        user_tokens = [rng.randint(40, 900) for _ in rounds]
        user_tokens[0] = rng.randint(200, 1200)
        system_delta = rng.randint(300, 900) if spec.system_change_turn else 0

        target = int(target_pressure(spec, limits) * limits.usable(spec.window_tokens))
        fixed = (
            spec.prefix_tokens
            + system_delta
            + sum(user_tokens)
            + sum(
                o - (r or 0)
                for outs, reas in zip(outputs, reasoning, strict=True)
                for o, r in zip(outs, reas, strict=True)
            )
        )
        weights: list[list[float]] = []
        for n in rounds:
            long_turn = n > ROUNDS[1]
            row = []
            for k in range(n):
                if k == n - 1:
                    row.append(0.0)  # the final reply ends the turn: nothing appended after it
                elif long_turn:
                    row.append(rng.uniform(0.05, 0.25))  # many small results (grep, git log)
                else:
                    w = rng.uniform(0.3, 1.7)
                    row.append(w * 3 if rng.random() < 0.08 else w)  # now and then a big file
            weights.append(row)
        budget = max(target - fixed, 0)
        big = self._big_results(rounds, budget)
        for t, k in big:
            weights[t][k] = 0.0
        total_weight = sum(sum(row) for row in weights)
        rest = budget - sum(chars // CHARS_PER_TOKEN for chars in big.values())
        results = [
            [
                big[(t, k)] // CHARS_PER_TOKEN
                if (t, k) in big
                else 0
                if w == 0
                else max(40, math.floor(rest * w / total_weight))
                for k, w in enumerate(row)
            ]
            for t, row in enumerate(weights)
        ]
        gaps = [rng.uniform(*(SHORT_GAP if g == "s" else LONG_GAP)) for g in spec.gaps]
        return _Plan(rounds, outputs, reasoning, results, user_tokens, gaps, system_delta, big)

    def _big_results(self, rounds: list[int], budget: int) -> dict[tuple[int, int], int]:
        """Rounds of the first half of the session that read a whole file or a long log.

        Early, so that by the time the session needs relief they are older than the rounds a
        prune keeps; together at most half of the results' budget, so the rest stays varied.
        """
        if not self.spec.big_results:
            return {}
        half = max(1, (len(rounds) + 1) // 2)
        candidates = [
            (t, k) for t, n in enumerate(rounds[:half]) if n <= ROUNDS[1] for k in range(n - 1)
        ]
        chosen = sorted(self.rng.sample(candidates, min(self.spec.big_results, len(candidates))))
        sizes = {key: self.rng.randint(*BIG_RESULT_CHARS) for key in chosen}
        while sizes and sum(sizes.values()) // CHARS_PER_TOKEN > budget // 2:
            sizes.pop(max(sizes))
        return sizes

    def build(self) -> SessionScript:
        spec, rng = self.spec, self.rng
        plan = self._plan()
        cache = _cache_for(spec, self.limits, rng)
        prefix = spec.prefix_tokens
        system = self.texts.system(spec, changed=False)
        history = history_chars = 0  # the messages so far, in tokens and characters
        clock = 0.0  # seconds from the session's first response; shifted to wall time below
        drafts: list[_TurnDraft] = []
        nul_pending = spec.nul_turn is not None
        for t, n in enumerate(plan.rounds):
            turn = t + 1
            gap = plan.gaps[t - 1] if t else None
            changed = turn == spec.system_change_turn
            if changed:
                prefix += plan.system_delta
                system = self.texts.system(spec, changed=True)
            if gap is not None:
                clock += gap
            # The log keeps the first system prompt (seq 0); a changed one reaches the model as
            # a reminder at the head of that turn's user message, as coding agents do.
            user = self.texts.user(spec, turn, plan.user_tokens[t], reminder=changed)
            history += plan.user_tokens[t]
            history_chars += _chars(user)
            draft = _TurnDraft(turn, user, system, changed, cache.expires_after(gap), gap, [])
            for k in range(n):
                if k:  # the agent ran the tools, then called the model again
                    clock += rng.uniform(1.0, 24.0) + 1.0 + plan.outputs[t][k] / 150.0
                output, reasoning = plan.outputs[t][k], plan.reasoning[t][k]
                context = prefix + history
                read, write, uncached = cache.call(clock, context, reset=changed and k == 0)
                reply_tokens = output - (reasoning or 0)
                big = (t, k) in plan.big
                reply, calls = self.texts.reply(spec, reply_tokens, final=k == n - 1, big=big)
                nul = nul_pending and bool(calls) and turn >= (spec.nul_turn or 0)
                nul_pending = nul_pending and not nul
                appended = self.texts.results(spec, calls, plan.results[t][k], nul=nul)
                appended_chars = sum(_chars(m) for m in appended)
                draft.rounds.append(
                    _RoundDraft(
                        clock=clock,
                        context=context,
                        read=read,
                        write=write,
                        uncached=uncached,
                        output=output,
                        reasoning=reasoning,
                        appended_chars=appended_chars,
                        request_chars=len(system) + history_chars,
                        reply=reply,
                        appended=tuple(appended),
                    )
                )
                history += reply_tokens + appended_chars // CHARS_PER_TOKEN
                history_chars += _chars(reply) + appended_chars
            drafts.append(draft)
        start = self.ends - timedelta(seconds=clock)
        turns = tuple(self._event(d, start) for d in drafts)
        script = SessionScript(self.session_id, spec, self.limits, turns)
        if spec.demo != "overflow":
            return script
        return replace(script, overflow=self._overflow(script, drafts[-1].rounds[-1]))

    def _overflow(self, script: SessionScript, last: _RoundDraft) -> OverflowTurn:
        """A pasted log that takes the next request past the provider's limit."""
        spec, rng, limits = self.spec, self.rng, self.limits
        projected = script.last.projected_next
        user_tokens = max(limits.usable(spec.window_tokens) - projected, 0) + rng.randint(
            3_000, 9_000
        )
        user = self.texts.pasted_log(spec, user_tokens)
        rejected = projected + user_tokens
        gap = rng.uniform(SHORT_GAP[0], min(SHORT_GAP[1], spec.ends_ago_minutes * 60 - 30))
        output = rng.randint(250, 900)
        reply, _ = self.texts.reply(spec, output, final=True)
        overhead = max(last.context - last.request_chars // CHARS_PER_TOKEN, 0)
        log_system = len(script.turns[0].system) // CHARS_PER_TOKEN
        return OverflowTurn(
            session_id=self.session_id,
            spec=spec,
            limits=limits,
            turn=len(script.turns) + 1,
            user=user,
            reply=reply,
            rejected_tokens=rejected,
            detail=_overflow_detail(spec, rejected, limits),
            overhead_tokens=overhead,
            stable_tokens=overhead + log_system,
            output=output,
            uncached=rng.randint(1, 12),
            request_id=_request_id(spec.shape, rng),
            at=script.last.at + timedelta(seconds=gap + rng.uniform(3.0, 8.0)),
            first_seq=script.log_length,
        )

    def _event(self, draft: _TurnDraft, start: datetime) -> TurnEvent:
        spec = self.spec
        rounds = []
        for k, r in enumerate(draft.rounds):
            usage = _usage(spec.shape, r, self.limits.cache_ttl)
            record = CallRecord(
                session_id=self.session_id,
                profile=spec.profile,
                turn=draft.turn,
                call=k,
                model=spec.model,
                usage=usage,
                provider=spec.provider,
                request_id=_request_id(spec.shape, self.rng),
                request_chars=r.request_chars if spec.shape in _KNOWS_REQUEST_CHARS else None,
                appended_chars=r.appended_chars,
                window_tokens=spec.window_tokens if spec.report_window else None,
                at=start + timedelta(seconds=r.clock),
                context_tokens=r.context,
                cache_read=r.read,
                cache_write=r.write,
                output=r.output,
                reasoning=r.reasoning,
                projected_next=r.context
                + r.output
                - (r.reasoning or 0)
                + r.appended_chars // CHARS_PER_TOKEN,
                # the agent whose system prompt changes reports its prefix fingerprints, so the
                # console can name the break (issue 13)
                prefix=_system_prefix(spec, draft.system) if spec.system_change_turn else None,
            )
            rounds.append(Round(record, r.reply, r.appended))
        return TurnEvent(
            session_id=self.session_id,
            spec=spec,
            turn=draft.turn,
            user=draft.user,
            rounds=tuple(rounds),
            system=draft.system,
            system_changed=draft.system_changed,
            cache_expired=draft.cache_expired,
            gap_before=None if draft.gap is None else timedelta(seconds=draft.gap),
        )


@dataclass
class _RoundDraft:
    clock: float
    context: int
    read: int
    write: int
    uncached: int
    output: int
    reasoning: int | None
    appended_chars: int
    request_chars: int
    reply: Message
    appended: tuple[Message, ...]


@dataclass
class _TurnDraft:
    turn: int
    user: Message
    system: str
    system_changed: bool
    cache_expired: bool
    gap: float | None
    rounds: list[_RoundDraft] = field(default_factory=list)


# --- the providers' prompt caches ------------------------------------------------------------


class _Cache:
    """A provider's prompt cache for one session: what a call reads, writes and leaves uncached."""

    lifetime = math.inf

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cached = 0
        self.last: float | None = None

    def expires_after(self, gap: float | None) -> bool:
        """Whether an entry left by the previous call is gone after `gap` seconds."""
        return gap is not None and self.cached > 0 and gap > self.lifetime

    def alive(self, clock: float) -> bool:
        return self.last is not None and self.cached > 0 and clock - self.last <= self.lifetime

    def call(self, clock: float, context: int, *, reset: bool) -> tuple[int, int, int]:
        """(cache read, cache write, uncached input) of a request of `context` tokens."""
        self.last = clock
        return 0, 0, context


class _AnthropicCache(_Cache):
    """Breakpoints on the system block and the history tail: the whole prefix is cached, only a
    few tokens after the last breakpoint stay uncached. A hit refreshes the entry's TTL."""

    def __init__(self, rng: random.Random, ttl: CacheTTL) -> None:
        super().__init__(rng)
        self.lifetime = ANTHROPIC_TTL_SECONDS[ttl]

    def call(self, clock: float, context: int, *, reset: bool) -> tuple[int, int, int]:
        uncached = min(self.rng.randint(1, 12), context)
        read = 0 if reset or not self.alive(clock) else min(self.cached, context - uncached)
        write = context - uncached - read
        self.cached = read + write
        self.last = clock
        return read, write, uncached


class _OpenAICache(_Cache):
    """Automatic caching of the previous prompt's prefix in 128-token steps from 1,024 tokens;
    an idle prefix is dropped after a few minutes, and now and then a request is routed to a
    machine that does not hold it."""

    lifetime = OPENAI_IDLE_SECONDS

    def call(self, clock: float, context: int, *, reset: bool) -> tuple[int, int, int]:
        routed_away = self.rng.random() < 0.03
        cached = 0
        if not reset and not routed_away and self.alive(clock) and self.cached >= OPENAI_CACHE_MIN:
            cached = min(self.cached, context) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
        self.cached = context
        self.last = clock
        return cached, 0, context - cached


def _cache_for(spec: SessionSpec, limits: Limits, rng: random.Random) -> _Cache:
    if spec.shape in ("anthropic", "bedrock"):
        return _AnthropicCache(rng, limits.cache_ttl)
    if spec.shape == "openai_compatible":
        return _Cache(rng)  # a self-hosted server that reports no cache at all
    return _OpenAICache(rng)


# --- usage objects, as each SDK returns them -------------------------------------------------

_KNOWS_REQUEST_CHARS: Final = frozenset({"anthropic", "openai_chat", "openai_responses"})


def _usage(shape: Shape, r: _RoundDraft, ttl: CacheTTL) -> dict[str, Any]:
    if shape in ("anthropic", "bedrock"):
        usage: dict[str, Any] = {
            "input_tokens": r.uncached,
            "cache_creation_input_tokens": r.write,
            "cache_read_input_tokens": r.read,
            "output_tokens": r.output,
        }
        if shape == "anthropic":
            # Bedrock reports the write total only; the profile's tier prices it.
            usage["cache_creation"] = {
                "ephemeral_5m_input_tokens": r.write if ttl == "5m" else 0,
                "ephemeral_1h_input_tokens": r.write if ttl == "1h" else 0,
            }
            usage["service_tier"] = "standard"
        return usage
    if shape == "openai_chat":
        return {
            "prompt_tokens": r.context,
            "completion_tokens": r.output,
            "total_tokens": r.context + r.output,
            "prompt_tokens_details": {"cached_tokens": r.read, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": r.reasoning or 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
    if shape == "openai_responses":
        return {
            "input_tokens": r.context,
            "input_tokens_details": {"cached_tokens": r.read},
            "output_tokens": r.output,
            "output_tokens_details": {"reasoning_tokens": r.reasoning or 0},
            "total_tokens": r.context + r.output,
        }
    if shape == "otel":
        usage = {
            "gen_ai.usage.input_tokens": r.context,
            "gen_ai.usage.output_tokens": r.output,
            "gen_ai.usage.cache_read.input_tokens": r.read,
        }
        if r.reasoning is not None:
            usage["gen_ai.usage.reasoning.output_tokens"] = r.reasoning
        return usage
    # An OpenAI-compatible server (vLLM and friends): no cache details at all.
    return {
        "prompt_tokens": r.context,
        "completion_tokens": r.output,
        "total_tokens": r.context + r.output,
        "prompt_tokens_details": None,
    }


_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _request_id(shape: Shape, rng: random.Random) -> str | None:
    if shape == "anthropic":
        return "msg_01" + "".join(rng.choices(_BASE62, k=22))
    if shape == "bedrock":
        return "msg_bdrk_01" + "".join(rng.choices(_BASE62, k=22))
    if shape == "openai_chat":
        return "chatcmpl-" + "".join(rng.choices(_BASE62, k=29))
    if shape == "openai_responses":
        return "resp_" + "".join(rng.choices("0123456789abcdef", k=50))
    return None  # OTel spans and the self-hosted server carry no response id here


# --- message text ----------------------------------------------------------------------------

# What each kind of tool returns, a line at a time; filler is cut from these to exact lengths.
# Some lines are not ASCII (names, units, arrows, CJK, an emoji): transcripts are UTF-8 text.
_CODE: Final = (
    "def apply_rounding(amount: Decimal, mode: str = 'half_even') -> Decimal:",
    "    return amount.quantize(Decimal('0.01'), rounding=ROUNDING[mode])",
    "    # Kaufmännisch runden: 0,005 € → 0,01 € (the Finanzamt's rule, not banker's)",
    "src/orders/api.py:212:    raise HTTPException(status_code=409, detail='stale version')",
    "    for line in reader:  # streaming: never holds the whole file",
    "import { parse } from '@acme/csv-stream';",
    "      at Object.<anonymous> (packages/web/src/index.ts:14:7)",
    "class InvoiceLine(NamedTuple):",
    "    label: str  # 'Größe', 'Menge' and '数量' all occur in the imported files",
    "    unit_price_µ: int  # micro-euros, so 1 µ€ never rounds away",
    "        if attempt >= self.retry_budget:",
    '    """Return the total in cents; raises ValueError on a negative quantity."""',
    "export const retryBudget = { attempts: 3, backoffMs: [100, 400, 1600] } as const;",
)
_LOGS: Final = (
    "2026-11-29T23:41:07.112Z ERROR upstream timed out (504) path=/v2/checkout attempt=3",
    "2026-11-29T23:41:07.398Z WARN  retry budget exhausted for payments-client",
    "2026-11-29T23:41:08.020Z INFO  pool=checkout-db active=48/50 wait_p99=1.8s",
    "2026-11-29T23:41:09.551Z ERROR TLS handshake with payments.internal → reset by peer",
    "2026-11-29T23:41:10.004Z INFO  request_id=7f3c latency=1834ms µs_in_queue=912004",
    "2026-11-29T23:41:11.730Z WARN  名前解決に失敗しました (DNS lookup failed) host=ledger-2",
    "2026-11-29T23:41:12.090Z ERROR 🔥 circuit open for payments-client (5 failures / 10 s)",
    "Step 7/12 : RUN npm ci --omit=dev",
    "npm WARN deprecated left-pad@1.3.0: use String.prototype.padStart()",
    "make: *** [Makefile:41: test] Error 1",
)
_TESTS: Final = (
    "tests/integration/test_sync.py::test_resume_after_disconnect PASSED     [ 41%]",
    "tests/integration/test_sync.py::test_concurrent_writers FAILED          [ 42%]",
    "E       AssertionError: expected 3 rows, found 2",
    "E       assert 'Zoë' == 'Zoe'",
    "tests/unit/test_rounding.py ✓✓✓✓✓✓✓✓✓✓✓✓                                  [ 57%]",
    "FAILED tests/integration/test_sync.py::test_concurrent_writers - AssertionError",
    "=========== 1 failed, 312 passed, 4 skipped in 48.91s ===========",
)
_GIT: Final = (
    "commit 9f1c2ab  Retry idempotent writes on connection reset",
    "Author: José Álvarez <jose@example.org>",
    "Date:   Fri Nov 27 18:02:11 2026 +0100",
    "    sync: take the row lock before reading the cursor (李雷 found the race)",
    "commit 41d07ee  Bump the sync client's batch size from 100 to 500",
)
_JSON: Final = (
    '  "name": "left-pad", "version": "1.3.0", "license": "WTFPL", "deprecated": false,',
    '  {"id": "GHSA-29mw-wpgm-hmr9", "severity": "high", "package": "lodash", "fixed": "4.17.21"},',
    '  {"metric": "http_5xx_total", "labels": {"route": "/v2/checkout"}, "value": 1841},',
    '  {"metric": "p99_latency_seconds", "labels": {"route": "/v2/checkout"}, "value": 2.31},',
    '  "description": "Prototype pollution in zipObjectDeep — upgrade to ≥ 4.17.21",',
)
_TICKETS: Final = (
    "| ticket | subject                              | priority | queue    |",
    "| 48213  | Refund not received after 10 days    | high     | billing  |",
    "| 48217  | Rechnung doppelt abgebucht (€ 49,00) | high     | billing  |",
    "| 48230  | App crashes on login — iOS 18.2      | normal   | mobile   |",
    "| 48241  | 配送状況が更新されません              | normal   | shipping |",
)
_DIFF: Final = (
    "diff --git a/payments/client.py b/payments/client.py",
    "@@ -88,11 +88,19 @@ class PaymentsClient:",
    "+        if attempt >= self.retry_budget:",
    "+            raise RetryBudgetExceeded(f'gave up after {attempt} attempts')",
    "-        time.sleep(2 ** attempt)",
    "+        time.sleep(min(self.max_backoff, 0.1 * 2 ** attempt) * random.uniform(0.5, 1.5))",
)
_NOTES: Final = (
    "- [ ] Ask Priya for the Q3 numbers before Thursday",
    "- [x] Send the offsite agenda to Zoë and Łukasz",
    "Decision: we ship the importer behind a flag – default off until 2026-12-08",
    "GET /v1/orders/{order_id} -> 200 Order | 404 NotFound | 410 Gone",
)
_TOOL_OUTPUT: Final[Mapping[str, tuple[str, ...]]] = {
    "read_file": _CODE,
    "edit_file": _DIFF,
    "write_file": _NOTES,
    "grep": _CODE,
    "bash": _TESTS + _LOGS,
    "run_tests": _TESTS,
    "query_logs": _LOGS,
    "fetch_log": _LOGS + _TESTS,
    "git_log": _GIT,
    "http_get": _JSON,
    "get_metrics": _JSON,
    "search_tickets": _TICKETS,
    "get_ticket": _TICKETS,
    "set_label": _TICKETS,
    "get_diff": _DIFF,
}
_PROSE: Final = _CODE + _LOGS + _NOTES + _DIFF
_FOLLOW_UPS: Final = (
    "Looks right. Go on with the next part.",
    "That test still fails on CI, see the log below.",
    "Good. Now update the docs and the changelog too.",
    "Can you double-check the edge case with empty input?",
    "Please keep the public API unchanged.",
    "OK, continue, and tell me when you are done.",
    "Here is the output I get locally:",
)
SYSTEM_REMINDER: Final = (
    "<system-reminder>Updated project instructions: run the linters before every commit."
    "</system-reminder>"
)
_ARGUMENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "bash": ("pytest -q tests/unit", "git status --short", "ls -la src/", "make lint"),
    "read_file": ("src/billing/rounding.py", "README.md", "pyproject.toml", "src/orders/api.py"),
    "grep": ("retry_budget", "def apply_rounding", "TODO", "HTTPException"),
    "edit_file": ("src/billing/rounding.py", "src/orders/api.py", "CHANGELOG.md"),
}
# What an agent runs when it reads something whole.
_BIG_ARGUMENTS: Final[Mapping[str, str]] = {
    "read_file": "src/billing/legacy_invoices.py",
    "bash": "pytest -vv tests/ 2>&1 | tee /tmp/full-run.log",
    "query_logs": "service:checkout level:>=WARN since:-12h",
    "fetch_log": "nightly/2026-11-29/full.log",
    "git_log": "--stat --since=2026-10-01 -- tests/integration",
    "run_tests": "tests/integration -vv --count=20",
    "http_get": "https://api.osv.dev/v1/query?ecosystem=npm",
    "get_diff": "--full-index",
}


def _argument_key(name: str) -> str:
    if name not in _ARGUMENTS and name not in _BIG_ARGUMENTS:
        return "query"
    return {"bash": "command", "grep": "pattern", "run_tests": "target"}.get(name, "path")


def _compact(value: Any) -> str:
    """JSON text as the compaction core measures a tool call's arguments."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _TextSource:
    """Deterministic text of exact lengths, cut from small code/log/data corpora."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tool_ids = 0
        self.corpora: dict[tuple[str, ...], str] = {}

    def fill(self, chars: int, lines: tuple[str, ...] = _PROSE) -> str:
        if chars <= 0:
            return ""
        corpus = self.corpora.get(lines)
        if corpus is None:
            corpus = self.corpora[lines] = "\n".join(lines) + "\n"
        start = self.rng.randrange(len(corpus))
        repeated = corpus * (chars // len(corpus) + 2)
        return repeated[start : start + chars]

    def padded(
        self, head: str, chars: int, *, exact: bool = False, lines: tuple[str, ...] = _PROSE
    ) -> str:
        """`head`, a newline and filler: `chars` long (at least `head` unless `exact`)."""
        text = head + "\n" + self.fill(chars - len(head) - 1, lines)
        return text[:chars] if exact else text[: max(chars, len(head))]

    def system(self, spec: SessionSpec, *, changed: bool) -> str:
        head = f"You are a careful software agent working for {spec.profile} operators."
        if changed:
            head += " Updated project instructions: run the linters before every commit."
        return self.padded(head, spec.prefix_tokens * 2)

    def user(self, spec: SessionSpec, turn: int, tokens: int, *, reminder: bool = False) -> Message:
        head = f"Please {spec.task}." if turn == 1 else self.rng.choice(_FOLLOW_UPS)
        if reminder:
            head = SYSTEM_REMINDER + "\n" + head
        return {"role": "user", "content": self.padded(head, tokens * CHARS_PER_TOKEN)}

    def pasted_log(self, spec: SessionSpec, tokens: int) -> Message:
        head = "Here is the full log of last night's failing run, all of it:"
        text = self.padded(head, tokens * CHARS_PER_TOKEN, exact=True, lines=_LOGS + _TESTS)
        return {"role": "user", "content": text}

    def _tool_id(self, spec: SessionSpec) -> str:
        self.tool_ids += 1
        suffix = "".join(self.rng.choices(_BASE62, k=20))
        return f"toolu_{suffix}" if spec.wire == "anthropic" else f"call_{suffix}"

    def reply(
        self, spec: SessionSpec, tokens: int, *, final: bool, big: bool = False
    ) -> tuple[Message, list[tuple[str, str, str]]]:
        """The assistant's reply of about `tokens` tokens and its tool calls (id, name, args).

        `big`: one call to a tool that reads something whole (a file, a long log).
        """
        calls: list[tuple[str, str, str]] = []
        if big:
            name = self.rng.choice([n for n in spec.tool_names if n in BIG_TOOLS])
            value = _BIG_ARGUMENTS[name]
            calls.append((self._tool_id(spec), name, _compact({_argument_key(name): value})))
        elif not final:
            for _ in range(1 if self.rng.random() < 0.7 else self.rng.randint(2, 3)):
                name = self.rng.choice(spec.tool_names)
                value = self.rng.choice(_ARGUMENTS.get(name, ("latest",)))
                calls.append((self._tool_id(spec), name, _compact({_argument_key(name): value})))
        call_chars = sum(len(name) + len(args) for _, name, args in calls)
        head = "Done. Summary of the changes:" if final else "Let me check that."
        text = self.padded(head, max(tokens * CHARS_PER_TOKEN - call_chars, len(head)))
        if spec.wire == "anthropic":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
            blocks += [
                {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)}
                for i, n, a in calls
            ]
            return {"role": "assistant", "content": blocks}, calls
        message: Message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ]
        return message, calls

    def results(
        self,
        spec: SessionSpec,
        calls: Sequence[tuple[str, str, str]],
        tokens: int,
        *,
        nul: bool = False,
    ) -> list[Message]:
        """Tool results for `calls` whose characters total `tokens` × 4 (+0-3).

        `nul`: the first result holds a NUL character (a binary byte in a log line), which JSON
        carries as the escape \\u0000.
        """
        if not calls:
            return []
        total = tokens * CHARS_PER_TOKEN + self.rng.randint(0, CHARS_PER_TOKEN - 1)
        sizes = [total // len(calls)] * len(calls)
        sizes[0] += total - sum(sizes)
        texts = [
            self.padded(
                f"[{name}] {json.loads(args).popitem()[1]}",
                size,
                exact=True,
                lines=_TOOL_OUTPUT.get(name, _PROSE),
            )
            for (_, name, args), size in zip(calls, sizes, strict=True)
        ]
        if nul and len(texts[0]) > 2:
            at = len(texts[0]) // 2
            texts[0] = texts[0][:at] + "\x00" + texts[0][at + 1 :]
        if spec.wire == "anthropic":
            blocks = [
                {"type": "tool_result", "tool_use_id": i, "content": text}
                for (i, _, _), text in zip(calls, texts, strict=True)
            ]
            return [{"role": "user", "content": blocks}]
        return [
            {"role": "tool", "tool_call_id": i, "content": text}
            for (i, _, _), text in zip(calls, texts, strict=True)
        ]


def _overflow_detail(spec: SessionSpec, rejected: int, limits: Limits) -> str:
    """The provider's context-length error, as its API words it."""
    reserved, window = limits.reserved_output_tokens, spec.window_tokens
    if spec.wire == "anthropic":
        return (
            f"input length and `max_tokens` exceed context limit: {rejected} + {reserved} > "
            f"{window}, decrease input length or `max_tokens` and try again"
        )
    return (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{rejected + reserved} tokens ({rejected} in the messages, {reserved} in the "
        "completion). Please reduce the length of the messages or completion."
    )


def _chars(message: Mapping[str, Any]) -> int:
    """Characters of a message as the compaction core counts them (`Message.chars`): text,
    each tool call's name plus its arguments as compact JSON, each tool result's text."""
    content = message.get("content")
    total = 0
    if isinstance(content, str):
        total += len(content)
    elif isinstance(content, list):
        for block in content:
            kind = block.get("type")
            if kind == "text":
                total += len(block["text"])
            elif kind == "tool_use":
                total += len(block["name"]) + len(_compact(block["input"]))
            elif kind == "tool_result":
                total += len(block["content"])
    for call in message.get("tool_calls") or ():
        total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total


def message_chars(message: Mapping[str, Any]) -> int:
    """Public alias of the character count the records' `appended_chars` are made of."""
    return _chars(message)


# --- how the agents send it ------------------------------------------------------------------

MERGE_LIMIT: Final = 80  # records per merged batch (an exporter flushing several sessions)


@dataclass(frozen=True, slots=True)
class Submission:
    """One POST /api/v1/telemetry: a batch, or a single record; `replay` repeats an earlier one."""

    profile: Profile
    records: tuple[CallRecord, ...]
    batch: bool
    replay: bool = False

    def body(self, versions: Mapping[tuple[str, int, int], int] | None = None) -> dict[str, Any]:
        """The request body; `versions` gives each call's surface version by (session, turn,
        call) when the transcript is appended too."""
        known = versions or {}
        payloads = [r.payload(known.get((r.session_id, r.turn, r.call))) for r in self.records]
        if self.batch:
            return {"records": payloads}
        (payload,) = payloads
        return payload


def plan_submissions(scenario: Scenario) -> list[Submission]:
    """How the fleet reports: mostly batches of 1-3 turns, in time order across sessions.

    A turn that runs past the ordinary round count is reported call by call (the agent reads the
    nudge and the stop after each round), and so is the last turn of every third session.
    Consecutive batches of one profile are merged, as an exporter flushing several sessions
    would; the last submission replays an earlier batch verbatim (all duplicates).
    """
    rng = random.Random(f"simulate|{scenario.seed}|submissions")
    pieces: list[Submission] = []
    for index, script in enumerate(scenario.sessions):
        profile = script.spec.profile
        batch: list[CallRecord] = []
        left = rng.randint(1, 3)
        for event in script.turns:
            one_by_one = len(event.rounds) > ROUNDS[1] or (
                event is script.turns[-1] and index % 3 == 1
            )
            if one_by_one or left == 0:
                if batch:
                    pieces.append(Submission(profile, tuple(batch), batch=True))
                batch, left = [], rng.randint(1, 3)
            if one_by_one:
                pieces += [Submission(profile, (r,), batch=False) for r in event.records]
                continue
            batch.extend(event.records)
            left -= 1
        if batch:
            pieces.append(Submission(profile, tuple(batch), batch=True))
    pieces.sort(key=lambda s: (s.records[-1].at, s.records[-1].session_id, s.records[-1].call))
    merged: list[Submission] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.batch
            and piece.batch
            and last.profile == piece.profile
            and len(last.records) + len(piece.records) <= MERGE_LIMIT
        ):
            merged[-1] = Submission(piece.profile, last.records + piece.records, batch=True)
        else:
            merged.append(piece)
    batches = [s for s in merged if s.batch and len(s.records) >= 3]
    if batches:
        replayed = max(batches, key=lambda s: len({r.session_id for r in s.records}))
        merged.append(Submission(replayed.profile, replayed.records, batch=True, replay=True))
    return merged


def expected_signals(
    submissions: Sequence[Submission], limits: Mapping[Profile, Limits] | None = None
) -> list[list[Signal]]:
    """Per submission, per item: the round signal the API should answer.

    The API judges each call by the rounds it completes: the stored calls of its turn numbered
    at or below it, so a batch holding rounds 30-45 flags only those at or past the limits.
    """
    all_limits = {**DEFAULT_LIMITS, **(limits or {})}
    stored: dict[tuple[str, int], set[int]] = {}
    answers: list[list[Signal]] = []
    for sub in submissions:
        for r in sub.records:
            stored.setdefault((r.session_id, r.turn), set()).add(r.call)
        answers.append(
            [
                all_limits[r.profile].signal(
                    sum(1 for call in stored[(r.session_id, r.turn)] if call <= r.call)
                )
                for r in sub.records
            ]
        )
    return answers
