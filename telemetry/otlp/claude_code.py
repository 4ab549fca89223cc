"""Claude Code's OpenTelemetry log events -> call drafts and context events. Pure.

The Claude Code half of `telemetry.otlp.mapping` (which holds the draft shapes, the GenAI span
mapping and the helpers both use); standard library only, like it. The input is the plain
`LogRecord` of `telemetry.otlp.wire`, duck-typed through `LogLike`.

Claude Code log events (`event.name`, or the body `claude_code.<name>`):
- `api_request` -> a call (Anthropic-style exclusive counts; Claude Code's `cost_usd` kept in the
  raw usage beside our own price; the provider's `cache_miss_reason` and
  `cache_missed_input_tokens`, when present, as the record's `diagnostics`); turn = `prompt.id`;
- `compaction` -> an agent-side compaction event with pre/post tokens;
- `api_error` saying the prompt is too long -> a provider-side overflow event;
- other documented events are ignored; unknown ones are ignored and counted by name (as the
  partial-success message shows it: control characters escaped, cut at `SHOWN_CHARS`).

A mapped event dated past the console's clock plus TELEMETRY_CLOCK_SKEW_SECONDS (its
`event.timestamp`, `timeUnixNano` or `observedTimeUnixNano`) is rejected naming that field, as
the JSON API refuses such an `at`; a time of 0 is no time (the console's clock stands in).
Also here: Claude Code's own cost beside ours (`cost_difference`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Protocol

from telemetry.cache_diagnostics import record_fields
from telemetry.errors import FieldError
from telemetry.otlp.mapping import (
    _EPOCH,
    MAX_ID,
    CallDraft,
    EventDraft,
    Mapped,
    Rejection,
    _first,
    _flag,
    _session_problem,
    _text,
    as_count,
    claude_code_usage,
    nul_attribute,
    provider_request_key,
    shown,
    time_of,
    too_late,
)
from telemetry.session_meta import from_otlp
from telemetry.windows import parse_overflow_limit


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
    return _stamp(record) or time_of(record.time_ns) or time_of(record.observed_ns)


def _stamp(record: LogLike) -> datetime | None:
    """`event.timestamp` in UTC; None when absent or not an ISO time with an offset."""
    stamp = _text(record.attributes.get("event.timestamp"))
    if not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise FieldError(
            "event.timestamp", f"{stamp[:40]!r} is outside years 1-9999 in UTC"
        ) from None


def _late(index: int, record: LogLike, latest: datetime | None) -> Rejection | None:
    """Every time the record carries, against `latest` (`too_late`), by its field name."""
    return too_late(
        index,
        latest,
        ("event.timestamp", _stamp(record)),
        ("timeUnixNano", time_of(record.time_ns)),
        ("observedTimeUnixNano", time_of(record.observed_ns)),
    )


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


def map_log_records(
    records: Iterable[LogLike | Rejection], *, latest: datetime | None = None
) -> Mapped:
    """Map one log export of Claude Code events (deterministic, like `map_spans`). A record
    the wire refused stays rejected; so does an event we map dated past `latest` (`_late`)."""
    out = Mapped()
    for index, record in enumerate(records):
        if isinstance(record, Rejection):
            out.rejected.append(record)
            continue
        try:
            _map_log_record(index, record, out, latest)
        except FieldError as exc:
            # one bad record is rejected naming its field; the rest of the export is kept
            out.rejected.append(Rejection(index, exc.field, exc.message))
    return out


def _map_log_record(index: int, record: LogLike, out: Mapped, latest: datetime | None) -> None:
    name = event_name(record)
    mapper = _MAPPERS.get(name)
    if name == "api_error" and _TOO_LONG not in _error_text(record).lower():
        mapper = None
    if mapper is None:
        out.ignored += 1
        if name not in _KNOWN_IGNORED:
            # echoed in the partial-success message, never stored: escaped and cut (`shown`)
            out.unknown_events[shown(name) if name else "(no event name)"] += 1
        return
    mapped = (
        _late(index, record, latest)
        or nul_attribute(index, record.attributes, record.resource)
        or mapper(index, record)
    )
    if isinstance(mapped, Rejection):
        out.rejected.append(mapped)
    elif isinstance(mapped, CallDraft):
        out.calls.append(mapped)
    else:
        out.events.append(mapped)


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
        return provider_request_key(request_id)
    stamp = "" if at is None else at.isoformat()
    return f"cc:seq:{_sequence(record)}@{stamp}"


def _cc_call(index: int, record: LogLike) -> CallDraft | Rejection:
    attrs = record.attributes
    session = _cc_session(index, record)
    if isinstance(session, Rejection):
        return session
    found = _first(("model",), attrs)
    if found is None:
        return Rejection(index, "model", "is required")
    model = found[1]
    if len(model) > MAX_ID:
        return Rejection(index, "model", f"must be at most {MAX_ID} characters")
    # Anthropic's usage shape: input_tokens excludes cache reads and writes.
    usage = claude_code_usage(attrs)
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
        reporter="claude-code-event",
        provider_request=_text(attrs.get("request_id")),
        metadata=from_otlp(record.resource, attrs),
        diagnostics=record_fields(attrs),
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


# The events we map, by name (`api_error` only when it says the prompt is too long).
_MAPPERS: Final[dict[str, Callable[[int, LogLike], CallDraft | EventDraft | Rejection]]] = {
    "api_request": _cc_call,
    "compaction": _cc_compaction,
    "api_error": _cc_overflow,
}


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
