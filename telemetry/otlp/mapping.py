"""OTLP spans and log records -> the console's call records and context events. Pure.

Standard library only (the unit suite runs it with `-p no:django`); the input is the plain
`Span` / `LogRecord` shapes of `telemetry.otlp.wire`, duck-typed here through `SpanLike` and
`LogLike` so this module imports nothing but the standard library.

What comes out is *drafts*: a call draft carries everything of a `telemetry.schemas.RecordIn`
except the turn and call numbers, which only the database can give (a turn key such as a trace id
or a Claude Code prompt id is numbered the first time the session sees it, see
`telemetry.otlp.store`). The usage object of a draft goes through the one normaliser
(`telemetry.usage.normalize_usage`) like every JSON API record, so the token arithmetic —
inclusive vs exclusive OTel counts included — lives in one place.

GenAI spans (OpenTelemetry GenAI semantic conventions, and OpenInference's `llm.*`):
- an LLM call is a span with `gen_ai.usage.*` or `llm.token_count.*` token attributes; agent,
  tool and chain spans are not calls even when they carry usage (it is their calls' total);
- session = `gen_ai.conversation.id`, else `session.id` (span, then resource), else the trace id;
- model = `gen_ai.response.model`, else `gen_ai.request.model`, else `llm.model_name`;
- identity = the trace and span ids (`request_id`), so a replayed export is a duplicate;
- turn = the trace (its root span, the agent invocation when the agent span is the root);
  calls of a turn are numbered by start time; time = the span's end;
- `gen_ai.conversation.compacted = true` -> an agent-side compaction event on that call.

Claude Code log events (`event.name`, or the body `claude_code.<name>`):
- `api_request` -> a call (Anthropic-style exclusive counts; Claude Code's `cost_usd` kept in the
  raw usage beside our own price); turn = `prompt.id`;
- `compaction` -> an agent-side compaction event with pre/post tokens;
- `api_error` saying the prompt is too long -> a provider-side overflow event;
- other documented events are ignored; unknown ones are ignored and counted by name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal, Protocol

from telemetry.errors import FieldError
from telemetry.windows import parse_overflow_limit

# --- inputs (structurally the wire dataclasses) -------------------------------------------------


class SpanLike(Protocol):
    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def resource(self) -> Mapping[str, Any]: ...


class LogLike(Protocol):
    @property
    def time_ns(self) -> int: ...
    @property
    def observed_ns(self) -> int: ...
    @property
    def body(self) -> Any: ...
    @property
    def event_name(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def resource(self) -> Mapping[str, Any]: ...


# --- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallDraft:
    """One LLM call, but for its turn and call numbers (see the module docstring)."""

    index: int  # position of the span / log record in the export, for error messages
    session_id: str
    turn_key: str  # "trace:<hex>" or "prompt:<id>": numbered per session by the store
    order: tuple[int, str]  # sorts the calls of a turn (start time, then identity)
    request_id: str  # the call's identity: a replay carries the same one
    model: str
    provider: str  # the usage *format* for normalize_usage: "otel" or "anthropic"
    usage: dict[str, Any]
    at: datetime | None
    source: str  # "otlp" or "claude-code"
    compacted: bool = False


# The `ContextEvent.Kind` and `.Origin` values OTLP produces (tests/db/test_status_choices.py).
DraftKind = Literal["compaction", "overflow"]
DraftOrigin = Literal["agent", "provider"]


@dataclass(frozen=True, slots=True)
class EventDraft:
    """A context event (agent- or provider-side compaction, overflow) for `ContextEvent`."""

    session_id: str
    kind: DraftKind
    origin: DraftOrigin
    source: str
    source_key: str
    at: datetime | None
    turn_key: str | None = None
    call_request_id: str | None = None
    trigger: str = ""
    tokens_before: int | None = None
    tokens_after: int | None = None
    summary: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rejection:
    index: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"item {self.index}: {self.field}: {self.message}"


@dataclass
class Mapped:
    """What one export maps to. Every input item is exactly one call, event, ignored or
    rejected item (an item may be a call *and* carry an event: `compacted` spans)."""

    calls: list[CallDraft] = field(default_factory=list)
    events: list[EventDraft] = field(default_factory=list)
    ignored: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    unknown_events: Counter[str] = field(default_factory=Counter)


# --- shared helpers -----------------------------------------------------------------------------

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def time_of(ns: int) -> datetime | None:
    """Nanoseconds since the epoch as an aware UTC datetime (microsecond precision); 0 is None."""
    if ns <= 0:
        return None
    return _EPOCH + timedelta(microseconds=ns // 1000)


def as_count(value: Any) -> Any:
    """A token count as OTLP may carry it: an int, a digit string ("12000", Claude Code), or an
    integral double (JavaScript SDKs). Anything else is returned unchanged, so the usage
    normaliser refuses it naming the attribute."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d{1,19}\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return int(value)
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value).strip()


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _first(names: Sequence[str], *sources: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first non-empty string value of `names`, looked up in each source in turn."""
    for source in sources:
        for name in names:
            text = _text(source.get(name))
            if text:
                return name, text
    return None


MAX_ID: Final = 200  # RecordIn's session_id / request_id limit


def _session_problem(value: str) -> str | None:
    """Why `value` cannot be a session id (RecordIn's rules), or None."""
    if not 0 < len(value) <= MAX_ID:
        return f"must be 1-{MAX_ID} characters"
    if "\x00" in value:
        return "must not contain NUL characters"
    if "/" in value:
        return "must not contain '/' (session ids are one URL path segment)"
    return None


# --- GenAI spans --------------------------------------------------------------------------------

# OpenInference token counts, and the GenAI attribute each one means.
_OPENINFERENCE_TOKENS: Final = {
    "llm.token_count.prompt": "gen_ai.usage.input_tokens",
    "llm.token_count.completion": "gen_ai.usage.output_tokens",
    "llm.token_count.prompt_details.cache_read": "gen_ai.usage.cache_read.input_tokens",
    "llm.token_count.prompt_details.cache_write": "gen_ai.usage.cache_creation.input_tokens",
    "llm.token_count.completion_details.reasoning": "gen_ai.usage.reasoning.output_tokens",
}
_SESSION_KEYS: Final = ("gen_ai.conversation.id", "session.id")
_MODEL_KEYS: Final = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
_PROVIDER_KEYS: Final = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
# Spans that carry the usage total of the calls under them: counting them would double it.
_NOT_CALL_OPERATIONS: Final = frozenset(
    {"invoke_agent", "create_agent", "execute_tool", "invoke_workflow", "workflow"}
)
COMPACTED: Final = "gen_ai.conversation.compacted"


def is_llm_call(attributes: Mapping[str, Any]) -> bool:
    """A span is an LLM call when it carries token usage and is not an agent/tool/chain span."""
    has_tokens = any(
        k.startswith("gen_ai.usage.") or k.startswith("llm.token_count.") for k in attributes
    )
    if not has_tokens:
        return False
    if _text(attributes.get("gen_ai.operation.name")).lower() in _NOT_CALL_OPERATIONS:
        return False
    kind = _text(attributes.get("openinference.span.kind")).upper()
    return kind in ("", "LLM")


def span_usage(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The span's usage attributes as a GenAI usage object (`gen_ai.usage.*` keys).

    OpenInference counts are renamed to their GenAI meaning (a GenAI value wins where both are
    present); string and integral-double counts become ints; the provider name is kept for
    the record (the normaliser ignores it).
    """
    usage: dict[str, Any] = {}
    for key, value in attributes.items():
        if key.startswith("gen_ai.usage."):
            usage[key] = as_count(value)
    for source, target in _OPENINFERENCE_TOKENS.items():
        if source in attributes and target not in usage:
            usage[target] = as_count(attributes[source])
    provider = _first(_PROVIDER_KEYS, attributes)
    if provider is not None:
        usage["gen_ai.provider.name"] = provider[1]
    return usage


def span_session(span: SpanLike) -> str:
    found = _first(_SESSION_KEYS, span.attributes, span.resource)
    if found is not None:
        return found[1]
    return span.trace_id or span.span_id


def map_spans(spans: Sequence[SpanLike | Rejection]) -> Mapped:
    """Map one trace export. Deterministic: the same spans give equal drafts, whatever else
    the export holds (so a replay, or the same span in another batch, is a duplicate). A span
    the wire refused (a `Rejection` in its place) stays rejected."""
    out = Mapped()
    for index, span in enumerate(spans):
        if isinstance(span, Rejection):
            out.rejected.append(span)
            continue
        attrs = span.attributes
        compacted = _flag(attrs.get(COMPACTED))
        if not is_llm_call(attrs):
            if compacted:
                event = _span_compaction(span, call_request_id=None)
                if event is not None:
                    out.events.append(event)
                    continue
            out.ignored += 1
            continue
        draft_or_error = _span_call(index, span, compacted)
        if isinstance(draft_or_error, Rejection):
            out.rejected.append(draft_or_error)
            continue
        out.calls.append(draft_or_error)
        if compacted:
            event = _span_compaction(span, call_request_id=draft_or_error.request_id)
            if event is not None:
                out.events.append(event)
    return out


def _span_request_id(span: SpanLike) -> str:
    return f"{span.trace_id}/{span.span_id}"


def _span_call(index: int, span: SpanLike, compacted: bool) -> CallDraft | Rejection:
    if not span.span_id:
        return Rejection(index, "spanId", "is required to identify the call")
    session = span_session(span)
    problem = _session_problem(session)
    if problem is not None:
        return Rejection(index, "gen_ai.conversation.id", problem)
    model = _first(_MODEL_KEYS, span.attributes)
    if model is None:
        return Rejection(index, "gen_ai.request.model", "is required (or gen_ai.response.model)")
    if len(model[1]) > MAX_ID:
        return Rejection(index, model[0], f"must be at most {MAX_ID} characters")
    return CallDraft(
        index=index,
        session_id=session,
        turn_key=f"trace:{span.trace_id}" if span.trace_id else f"span:{span.span_id}",
        order=(span.start_ns or span.end_ns, span.span_id),
        request_id=_span_request_id(span),
        model=model[1],
        provider="otel",
        usage=span_usage(span.attributes),
        at=time_of(span.end_ns) or time_of(span.start_ns),
        source="otlp",
        compacted=compacted,
    )


def _span_compaction(span: SpanLike, *, call_request_id: str | None) -> EventDraft | None:
    session = span_session(span)
    if _session_problem(session) is not None or not span.span_id:
        return None
    return EventDraft(
        session_id=session,
        kind="compaction",
        origin="agent",
        source="otlp",
        source_key=f"span:{span.trace_id}/{span.span_id}",
        at=time_of(span.end_ns) or time_of(span.start_ns),
        turn_key=f"trace:{span.trace_id}" if span.trace_id else None,
        call_request_id=call_request_id,
        detail={"attribute": COMPACTED, "span": span.name},
    )


# --- Claude Code log events ---------------------------------------------------------------------

CLAUDE_CODE_PREFIX: Final = "claude_code."
# Documented Claude Code events we read nothing from (they are ignored, not "unknown").
_KNOWN_IGNORED: Final = frozenset(
    {
        "user_prompt",
        "tool_result",
        "tool_decision",
        "api_error",  # unless it is an overflow, see below
        "api_request_body",
        "api_response_body",
        "mcp_server_connection",
        "skill_activated",
        "plugin_installed",
        "hook_execution",
    }
)
_TOO_LONG: Final = "prompt is too long"


def event_name(record: LogLike) -> str:
    """The Claude Code event name without its prefix ("" when the record is not an event)."""
    for candidate in (
        _text(record.attributes.get("event.name")),
        record.event_name,
        _text(record.body) if isinstance(record.body, str) else "",
    ):
        if candidate:
            return candidate.removeprefix(CLAUDE_CODE_PREFIX)
    return ""


def event_time(record: LogLike) -> datetime | None:
    """The record's `event.timestamp` in UTC (else its OTLP times); a FieldError when that
    timestamp has no UTC time (`0001-01-01T00:00:00+01:00` is before year 1 in UTC)."""
    stamp = _text(record.attributes.get("event.timestamp"))
    if stamp:
        try:
            parsed = datetime.fromisoformat(stamp)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            try:
                return parsed.astimezone(UTC)
            except OverflowError:
                raise FieldError(
                    "event.timestamp", f"{stamp[:40]!r} is outside years 1-9999 in UTC"
                ) from None
    return time_of(record.time_ns) or time_of(record.observed_ns)


def _sequence(record: LogLike) -> int:
    value = as_count(record.attributes.get("event.sequence"))
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _order(record: LogLike, at: datetime | None) -> tuple[int, str]:
    micros = 0 if at is None else (at - _EPOCH) // timedelta(microseconds=1)
    return (micros * 1000, f"{_sequence(record):020d}")


def _cost(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return str(amount) if amount.is_finite() and amount >= 0 else None


def map_log_records(records: Sequence[LogLike | Rejection]) -> Mapped:
    """Map one log export of Claude Code events (deterministic, like `map_spans`)."""
    out = Mapped()
    for index, record in enumerate(records):
        if isinstance(record, Rejection):
            out.rejected.append(record)
            continue
        try:
            _map_log_record(index, record, out)
        except FieldError as exc:
            # one bad record is rejected naming its field; the rest of the export is kept
            out.rejected.append(Rejection(index, exc.field, exc.message))
    return out


def _map_log_record(index: int, record: LogLike, out: Mapped) -> None:
    name = event_name(record)
    if name == "api_request":
        call = _cc_call(index, record)
        if isinstance(call, Rejection):
            out.rejected.append(call)
        else:
            out.calls.append(call)
    elif name == "compaction":
        event = _cc_compaction(index, record)
        if isinstance(event, Rejection):
            out.rejected.append(event)
        else:
            out.events.append(event)
    elif name == "api_error" and _TOO_LONG in _error_text(record).lower():
        overflow = _cc_overflow(index, record)
        if isinstance(overflow, Rejection):
            out.rejected.append(overflow)
        else:
            out.events.append(overflow)
    elif name in _KNOWN_IGNORED:
        out.ignored += 1
    else:
        out.ignored += 1
        out.unknown_events[name or "(no event name)"] += 1


def _cc_session(index: int, record: LogLike) -> str | Rejection:
    found = _first(("session.id",), record.attributes, record.resource)
    if found is None:
        return Rejection(index, "session.id", "is required")
    problem = _session_problem(found[1])
    if problem is not None:
        return Rejection(index, "session.id", problem)
    return found[1]


def _prompt_key(record: LogLike) -> str:
    return f"prompt:{_text(record.attributes.get('prompt.id'))[:180]}"


def _cc_identity(record: LogLike, at: datetime | None) -> str:
    """A Claude Code event's identity: the API request id when it has one, else its sequence
    number and timestamp (unique within a session's run)."""
    request_id = _text(record.attributes.get("request_id"))
    if request_id:
        return f"cc:{request_id}"[:MAX_ID]
    stamp = "" if at is None else at.isoformat()
    return f"cc:seq:{_sequence(record)}@{stamp}"


_CC_TOKENS: Final = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cache_read_input_tokens"),
    ("cache_creation_tokens", "cache_creation_input_tokens"),
)


def _cc_call(index: int, record: LogLike) -> CallDraft | Rejection:
    attrs = record.attributes
    session = _cc_session(index, record)
    if isinstance(session, Rejection):
        return session
    model = _text(attrs.get("model"))
    if not model:
        return Rejection(index, "model", "is required")
    if len(model) > MAX_ID:
        return Rejection(index, "model", f"must be at most {MAX_ID} characters")
    # Anthropic's usage shape: input_tokens excludes cache reads and writes.
    usage: dict[str, Any] = {
        target: as_count(attrs[source]) for source, target in _CC_TOKENS if source in attrs
    }
    cost = _cost(attrs.get("cost_usd"))
    if cost is not None:
        usage["cost_usd"] = cost  # Claude Code's own figure, kept beside ours
    for extra in ("query_source", "duration_ms"):
        if extra in attrs:
            value = attrs[extra]
            usage[extra] = as_count(value) if extra == "duration_ms" else _text(value)
    at = event_time(record)
    return CallDraft(
        index=index,
        session_id=session,
        turn_key=_prompt_key(record),
        order=_order(record, at),
        request_id=_cc_identity(record, at),
        model=model,
        provider="anthropic",
        usage=usage,
        at=at,
        source="claude-code",
    )


def _optional_tokens(value: Any) -> int | None:
    count = as_count(value)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _cc_compaction(index: int, record: LogLike) -> EventDraft | Rejection:
    attrs = record.attributes
    session = _cc_session(index, record)
    if isinstance(session, Rejection):
        return session
    at = event_time(record)
    detail: dict[str, Any] = {}
    if "success" in attrs:
        detail["success"] = _flag(attrs["success"])
    duration = _optional_tokens(attrs.get("duration_ms"))
    if duration is not None:
        detail["duration_ms"] = duration
    return EventDraft(
        session_id=session,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key=f"compaction:{_cc_identity(record, at)}",
        at=at,
        turn_key=_prompt_key(record) if _text(attrs.get("prompt.id")) else None,
        trigger=_text(attrs.get("trigger"))[:40],
        tokens_before=_optional_tokens(attrs.get("pre_tokens")),
        tokens_after=_optional_tokens(attrs.get("post_tokens")),
        detail=detail,
    )


def _error_text(record: LogLike) -> str:
    return _text(record.attributes.get("error"))


def _cc_overflow(index: int, record: LogLike) -> EventDraft | Rejection:
    attrs = record.attributes
    session = _cc_session(index, record)
    if isinstance(session, Rejection):
        return session
    at = event_time(record)
    error = _error_text(record)
    detail: dict[str, Any] = {"error": error[:2000]}
    stated = parse_overflow_limit(error, field="error")
    tokens: int | None = None
    if stated is not None:
        tokens = stated.requested
        detail["window_tokens"] = stated.limit
    for extra in ("model", "status_code"):
        if extra in attrs:
            detail[extra] = _text(attrs[extra])
    return EventDraft(
        session_id=session,
        kind="overflow",
        origin="provider",
        source="claude-code",
        source_key=f"overflow:{_cc_identity(record, at)}",
        at=at,
        turn_key=_prompt_key(record) if _text(attrs.get("prompt.id")) else None,
        tokens_before=tokens,
        detail=detail,
    )


# --- the agent's own cost beside ours -----------------------------------------------------------

COST_TOLERANCE: Final = Decimal("0.01")  # 1 %: float rounding in the agent is not a difference
COST_FLOOR: Final = Decimal("0.000001")  # below a micro-dollar nothing differs


def cost_difference(ours: Decimal | None, theirs: Decimal | None) -> Decimal | None:
    """Ours minus the agent's figure when the two really differ (beyond 1 % and a micro-dollar);
    None when they agree or either is unknown (a model we cannot price)."""
    if ours is None or theirs is None:
        return None
    difference = ours - theirs
    if abs(difference) < COST_FLOOR or abs(difference) <= COST_TOLERANCE * abs(theirs):
        return None
    return difference
