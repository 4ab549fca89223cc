"""OTLP spans and log records -> the console's call records and context events. Pure.

Standard library only (the unit suite runs it with `-p no:django`); the input is the plain
`Span` / `LogRecord` shapes of `telemetry.otlp.wire`, duck-typed through `SpanLike` (here) and
`LogLike` (`telemetry.otlp.claude_code`) so this module imports nothing but the standard library.

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
- identity = the provider's request id when the span names one (`anthropic.request.id`, which
  the Claude SDK's and the Claude API's own spans carry), else the trace and span ids, so a
  replayed export is a duplicate and the same request from another source is the same call
  (`provider_request_key`; which of two reports is kept: `telemetry.otlp.same_request`);
- turn = the trace (its root span, the agent invocation when the agent span is the root);
  calls of a turn are numbered by start time; time = the span's end;
- `gen_ai.conversation.compacted = true` -> an agent-side compaction event on that call;
- `gen_ai.context.window_size` (Sentry's convention) -> the call's window, the first source of
  the window in force (`telemetry.windows`); a value that is no window is left out;
- the provider's cache diagnosis (`cache_miss_reason` and `cache_missed_input_tokens`, or the
  `anthropic.diagnostics.cache_miss_reason.*` / `openai.prompt_cache_diagnostics.*` attributes)
  -> the record's `diagnostics` / `prompt_cache_diagnostics` (`telemetry.cache_diagnostics`).

Claude's platform exports spans itself (`service.name = claude-platform`): GenAI spans like any
other, told apart only as their reporter (`platform-span`).

Claude Code's own trace spans (`claude_code.llm_request`, beta) carry flat Anthropic-style
counts (`input_tokens`, `output_tokens`, `cache_read_tokens`, `cache_creation_tokens`, counts
that exclude each other, like its `api_request` event), `model`, `request_id`, `duration_ms`,
`ttft_ms`, `query_source`, `speed`: a call like the event, turn = `prompt.id` when the span
carries it (the event's turn), else the trace (Claude Code's interaction span is its root). A
span without token counts (a failed request) is not a call.

Claude Code log events are mapped in `telemetry.otlp.claude_code`, with these shapes and
helpers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, Protocol

from context_core.overflow_limit import valid_window
from telemetry.cache_diagnostics import record_fields
from telemetry.errors import FieldError
from telemetry.session_meta import OTLP_NAMES, from_otlp

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


# --- outputs ------------------------------------------------------------------------------------


@dataclass(slots=True)
class CallDraft:
    """One LLM call, but for its turn and call numbers (see the module docstring). Not changed
    once built; not frozen, as a frozen dataclass sets each of its fields through
    `object.__setattr__` and an export builds one per span."""

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
    window_tokens: int | None = None  # `gen_ai.context.window_size`, when it is a window
    # Who reported the call (`same_request.REPORTERS`), for choosing between two reports of one
    # provider request; `provider_request`: that request's id as the provider gave it, or "".
    reporter: str = "sdk-span"
    provider_request: str = ""
    # What the span and its resource say about the session (`telemetry.session_meta.from_otlp`).
    metadata: dict[str, str] = field(default_factory=dict)
    # The provider's cache diagnosis the item carried, as the JSON record's fields
    # (`telemetry.cache_diagnostics.record_fields`): {} when none.
    diagnostics: dict[str, Any] = field(default_factory=dict)


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
    return _EPOCH + timedelta(0, 0, ns // 1000)  # positional: the keyword costs a dict a call


_DIGITS: Final = re.compile(r"\s*\d{1,19}\s*")


def as_count(value: Any) -> Any:
    """A token count as OTLP may carry it: an int, a digit string ("12000", Claude Code), or an
    integral double (JavaScript SDKs). Anything else is returned unchanged, so the usage
    normaliser refuses it naming the attribute."""
    kind = type(value)
    if kind is int:  # what nearly every count is: the common case first, same result
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return int(value)
    return value


def _text(value: Any) -> str:
    if type(value) is str:  # the common case first, same result
        return value.strip()
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value).strip()


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


NOT_SCALAR: Final = "must be a single value (a string or a number), not an array or a map"


def _first(names: Sequence[str], *sources: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first non-empty string value of `names`, looked up in each source in turn.

    What it reads names something (a session, a model, a provider, a request), so an array or a
    map there (valid OTLP, `arrayValue` / `kvlistValue`) raises FieldError naming the attribute
    (NOT_SCALAR): its Python spelling is no name the agent gave. The item is refused, the rest
    of the export kept (`map_spans`, `claude_code.map_log_records`)."""
    for source in sources:
        for name in names:
            value = source.get(name)
            if value is None:  # most names are absent: no call for them (`_text(None)` is "")
                continue
            if type(value) is list or type(value) is dict:
                raise FieldError(name, NOT_SCALAR)
            text = _text(value)
            if text:
                return name, text
    return None


MAX_ID: Final = 200  # RecordIn's session_id / request_id limit
# The identity of a call whose provider request id is known, whoever reported it: the prefix
# Claude Code's `api_request` events have always been stored under, so their stored calls keep
# their identity, and a span of the same request meets them.
PROVIDER_REQUEST_PREFIX: Final = "cc:"


def provider_request_key(request_id: str) -> str:
    """The stored `request_id` of a call the provider named `request_id` (whatever reports it)."""
    return f"{PROVIDER_REQUEST_PREFIX}{request_id}"[:MAX_ID]


NUL_MESSAGE: Final = "must not contain NUL characters"


def nul_attribute(
    index: int, attributes: Mapping[str, Any], resource: Mapping[str, Any]
) -> Rejection | None:
    """A Rejection naming the first attribute of a span or log record, or of its resource
    (`resource.` and its name), whose value holds a NUL character, else None. The value is text,
    bytes (which the mapping reads as text, `_text`), or an array or key-value list holding such
    a value at any depth, named down to it (`tags.2`, `cache_miss_reason.type`).

    PostgreSQL's text and JSON cannot hold NUL, and the JSON API refuses it in any text: an item
    carrying one is refused whole, whichever of its values the console would keep (its ids, its
    turn's prompt id, its metadata, its raw usage, an event's detail), and the export's other
    items are kept.
    """
    return _nul_rejection(index, attributes, _nul_in(resource, "resource."))


def _nul_rejection(
    index: int, attributes: Mapping[str, Any], resource_nul: str | None
) -> Rejection | None:
    """`nul_attribute` with its resource's `_nul_in` read already: once per resource, not once
    per span of it (`map_spans`)."""
    path = _nul_in(attributes, "")
    if path is None:
        path = resource_nul
    return None if path is None else Rejection(index, shown(path), NUL_MESSAGE)


def _nul_in(values: Mapping[str, Any], prefix: str) -> str | None:
    """The path (`prefix`, the name, `_nul_path`) of the first of `values` that holds a NUL
    character, else None."""
    for name, value in values.items():
        kind = type(value)
        if kind is str:  # what nearly every text attribute is: one test
            if "\x00" not in value:
                continue
            path: str | None = ""
        elif kind in _HOLDERS:
            path = _nul_path(value)
            if path is None:
                continue
        else:  # a number or a boolean
            continue
        return f"{prefix}{name}{path}"
    return None


# The attribute values other than text that may hold a NUL (`wire.AttrValue`).
_HOLDERS: Final = frozenset({list, dict, bytes})


def _nul_path(value: Any) -> str | None:
    """Where in an attribute value a NUL character is: "" for the value itself, `.<index>` or
    `.<key>` down an array or key-value list to the one holding it; None when nowhere."""
    if isinstance(value, str):
        return "" if "\x00" in value else None
    if isinstance(value, bytes):
        return "" if b"\x00" in value else None
    steps: Iterable[tuple[Any, Any]]
    if isinstance(value, list):
        steps = enumerate(value)
    elif isinstance(value, dict):
        steps = value.items()
    else:
        return None
    for step, item in steps:
        path = _nul_path(item)
        if path is not None:
            return f".{step}{path}"
    return None


def nul_span_name(index: int, name: str) -> Rejection | None:
    """A Rejection when a span's name holds a NUL character (a compaction event keeps the name
    in its detail, JSON that PostgreSQL cannot store with NUL), else None."""
    return Rejection(index, "name", NUL_MESSAGE) if "\x00" in name else None


SHOWN_CHARS: Final = 100
# C0 and C1 control characters and DEL: NUL, escape sequences, line breaks.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """`text` as the export's partial-success message may echo it (an attribute path, an
    unknown event's name): at most SHOWN_CHARS characters of it (`…` marks a cut), each control
    character written `\\xNN`. No NUL, escape sequence or line break from an exporter reaches
    the message, nor what an exporter's log or terminal prints of it."""
    cut = text[:SHOWN_CHARS]
    escaped = _CONTROL.sub(lambda char: f"\\x{ord(char[0]):02x}", cut)
    return escaped if len(text) <= SHOWN_CHARS else f"{escaped}…"


def _session_problem(value: str) -> str | None:
    """Why `value` cannot be a session id (RecordIn's rules), or None."""
    if not 0 < len(value) <= MAX_ID:
        return f"must be 1-{MAX_ID} characters"
    if "\x00" in value:
        return "must not contain NUL characters"
    if "/" in value:
        return "must not contain '/' (session ids are one URL path segment)"
    return None


def too_late(
    index: int, latest: datetime | None, *stamps: tuple[str, datetime | None]
) -> Rejection | None:
    """A Rejection naming the first of `stamps` (field, time) past `latest`, else None.

    `latest` is the console's clock plus TELEMETRY_CLOCK_SKEW_SECONDS
    (`telemetry.ingest.pipeline.latest_accepted_at`, the JSON API's bound on `at`; None bounds nothing):
    a record dated further ahead would sit at the top of "last seen" for good.
    """
    if latest is None:
        return None
    for name, at in stamps:
        if at is not None and at > latest:
            return Rejection(
                index,
                name,
                f"is after {latest.isoformat(timespec='seconds')}, the console's clock plus the"
                " skew it allows (TELEMETRY_CLOCK_SKEW_SECONDS)",
            )
    return None


def span_times(span: SpanLike) -> tuple[tuple[str, datetime | None], ...]:
    """A span's times by their OTLP field names, for `too_late`."""
    return (
        ("endTimeUnixNano", time_of(span.end_ns)),
        ("startTimeUnixNano", time_of(span.start_ns)),
    )


# Claude Code's flat token counts (its `api_request` event and its `claude_code.llm_request`
# span alike) and the Anthropic usage key each one is.
CLAUDE_CODE_TOKENS: Final = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cache_read_input_tokens"),
    ("cache_creation_tokens", "cache_creation_input_tokens"),
)


def claude_code_usage(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Claude Code's flat counts as an Anthropic usage object (input excludes cache reads and
    writes), string and integral-double counts as ints."""
    return {
        target: as_count(attributes[source])
        for source, target in CLAUDE_CODE_TOKENS
        if source in attributes
    }


class ResourceMetadata:
    """`from_otlp` for the items of one export, each resource read once: an item whose
    attributes carry none of `OTLP_NAMES` has its resource's metadata (what `from_otlp` gives
    for it by definition), kept per resource object; any other item is read whole.

    The items of one resource share its one dict (a draft's metadata is never changed once
    built), so the store merges it once per session, not once per call
    (`telemetry.otlp.store._merged_metadata`)."""

    def __init__(self) -> None:
        # id(resource) -> (resource, its metadata); the resource is held so its id stays its own
        self._seen: dict[int, tuple[Mapping[str, Any], dict[str, str]]] = {}

    def __call__(
        self, resource: Mapping[str, Any], attributes: Mapping[str, Any]
    ) -> dict[str, str]:
        if not OTLP_NAMES.isdisjoint(attributes):
            return from_otlp(resource, attributes)
        held = self._seen.get(id(resource))
        if held is None or held[0] is not resource:
            held = (resource, from_otlp(resource, {}))
            self._seen[id(resource)] = held
        return held[1]


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
WINDOW: Final = "gen_ai.context.window_size"
REQUEST_ID: Final = "anthropic.request.id"
CLAUDE_CODE_SPAN: Final = "claude_code.llm_request"
PLATFORM_SERVICE: Final = "claude-platform"


_USAGE_PREFIX: Final = "gen_ai.usage."
_OPENINFERENCE_PREFIX: Final = "llm.token_count."


def is_llm_call(attributes: Mapping[str, Any]) -> bool:
    """A span is an LLM call when it carries token usage and is not an agent/tool/chain span."""
    usage, openinference = _token_attributes(attributes)
    return _is_call(attributes, bool(usage) or openinference)


def _is_call(attributes: Mapping[str, Any], has_tokens: bool) -> bool:
    """`is_llm_call`, whether the span carries token usage (`_token_attributes`) known."""
    if not has_tokens:
        return False
    operation = attributes.get("gen_ai.operation.name")  # absent: `_text` would give ""
    if operation is not None and _text(operation).lower() in _NOT_CALL_OPERATIONS:
        return False
    kind = attributes.get("openinference.span.kind")
    return kind is None or _text(kind).upper() in ("", "LLM")


# What `_token_attributes` makes of an attribute's name (`_token_kind`).
_OTHER, _USAGE, _OPENINFERENCE = 0, 1, 2


def _token_kind(name: str) -> int:
    """A `gen_ai.usage.*` count (_USAGE), an OpenInference count (_OPENINFERENCE) or neither."""
    if name.startswith(_USAGE_PREFIX):
        return _USAGE
    return _OPENINFERENCE if name.startswith(_OPENINFERENCE_PREFIX) else _OTHER


def _token_attributes(
    attributes: Mapping[str, Any], kinds: dict[str, int] | None = None
) -> tuple[dict[str, Any], bool]:
    """The span's `gen_ai.usage.*` attributes, counts as ints (`as_count`), and whether it
    carries an OpenInference count (`llm.token_count.*`): one pass over its attributes, which
    says both whether it is a call (`is_llm_call`) and most of its usage (`span_usage`).

    `kinds`: `_token_kind` of the names read so far, kept by the caller across the spans of one
    export (whose names repeat from span to span) and filled in here: a lookup a name instead
    of its prefix tests."""
    usage: dict[str, Any] = {}
    openinference = False
    if kinds is None:
        kinds = {}
    for key, value in attributes.items():
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _token_kind(key)
        if kind == _USAGE:
            usage[key] = value if type(value) is int else as_count(value)  # ints: as_count's own
        elif kind == _OPENINFERENCE:
            openinference = True
    return usage, openinference


def span_usage(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The span's usage attributes as a GenAI usage object (`gen_ai.usage.*` keys).

    OpenInference counts are renamed to their GenAI meaning (a GenAI value wins where both are
    present); string and integral-double counts become ints; the provider name is kept for
    the record (the normaliser ignores it).
    """
    return _completed_usage(attributes, *_token_attributes(attributes))


def _completed_usage(
    attributes: Mapping[str, Any], usage: dict[str, Any], openinference: bool
) -> dict[str, Any]:
    """`span_usage` from what `_token_attributes` read (`usage` is completed in place)."""
    if openinference:
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


def map_spans(spans: Iterable[SpanLike | Rejection], *, latest: datetime | None = None) -> Mapped:
    """Map one trace export. Deterministic: the same spans give equal drafts, whatever else
    the export holds (so a replay, or the same span in another batch, is a duplicate). A span
    the wire refused (a `Rejection` in its place) stays rejected, and so does a call or
    compaction span that starts or ends past `latest` (see `too_late`)."""
    out = Mapped()
    metadata = ResourceMetadata()
    resource: Mapping[str, Any] | None = None
    reporter = ""
    resource_nul: str | None = None
    kinds: dict[str, int] = {}  # `_token_kind` of the export's attribute names
    for index, span in enumerate(spans):
        try:
            if isinstance(span, Rejection):
                out.rejected.append(span)
                continue
            attrs = span.attributes
            if span.name == CLAUDE_CODE_SPAN:
                _map_claude_code_span(index, span, out, latest, metadata)
                continue
            compacted = _flag(attrs.get(COMPACTED))
            usage, openinference = _token_attributes(attrs, kinds)
            call = _is_call(attrs, bool(usage) or openinference)
            at = None
            if compacted or call:
                if span.resource is not resource:  # the spans of one resource come together
                    resource = span.resource
                    reporter = _reporter(span)
                    resource_nul = _nul_in(resource, "resource.")
                at = time_of(span.end_ns)
                start_ns = span.start_ns
                if start_ns > span.end_ns and start_ns > 0:
                    late = too_late(
                        index,
                        latest,
                        ("endTimeUnixNano", at),
                        ("startTimeUnixNano", time_of(start_ns)),
                    )
                else:  # it starts when or before it ends (or never): its start is late only if its end is
                    late = too_late(index, latest, ("endTimeUnixNano", at))
                late = (
                    late
                    or _nul_rejection(index, attrs, resource_nul)
                    or nul_span_name(index, span.name)
                )
                if late is not None:
                    out.rejected.append(late)
                    continue
                if at is None:  # a call's time: its end, else its start
                    at = time_of(start_ns)
            if not call:
                if compacted:
                    event = _span_compaction(span, call_request_id=None)
                    if event is not None:
                        out.events.append(event)
                        continue
                out.ignored += 1
                continue
            draft_or_error = _span_call(
                index,
                span,
                compacted,
                metadata,
                at,
                reporter,
                _completed_usage(attrs, usage, openinference),
            )
            if isinstance(draft_or_error, Rejection):
                out.rejected.append(draft_or_error)
                continue
            out.calls.append(draft_or_error)
            if compacted:
                event = _span_compaction(span, call_request_id=draft_or_error.request_id)
                if event is not None:
                    out.events.append(event)
        except FieldError as exc:  # an attribute the call is named by (`_first`)
            out.rejected.append(Rejection(index, exc.field, exc.message))
    return out


def _span_request_id(span: SpanLike) -> str:
    return f"{span.trace_id}/{span.span_id}"


def _provider_request(attributes: Mapping[str, Any], *names: str) -> str:
    """The provider's request id: the first of `names` the span carries ("" when none)."""
    found = _first(names, attributes)
    return "" if found is None else found[1]


def span_window(attributes: Mapping[str, Any]) -> int | None:
    """`gen_ai.context.window_size` as a window (an int, digit string or integral double in
    (0, MAX_WINDOW]); None when absent or not a window, which costs the call nothing."""
    value = as_count(attributes.get(WINDOW))
    return value if valid_window(value) else None


def _reporter(span: SpanLike) -> str:
    service = _text(span.resource.get("service.name"))
    return "platform-span" if service == PLATFORM_SERVICE else "sdk-span"


def _span_call(
    index: int,
    span: SpanLike,
    compacted: bool,
    metadata: ResourceMetadata,
    at: datetime | None,
    reporter: str,
    usage: dict[str, Any],
) -> CallDraft | Rejection:
    """The call of a GenAI span, its time (`time_of` its end, else its start), its reporter
    (`_reporter`) and its usage (`span_usage`) read already."""
    span_id = span.span_id
    if not span_id:
        return Rejection(index, "spanId", "is required to identify the call")
    attrs = span.attributes
    session = span_session(span)
    problem = _session_problem(session)
    if problem is not None:
        return Rejection(index, "gen_ai.conversation.id", problem)
    model = _first(_MODEL_KEYS, attrs)
    if model is None:
        return Rejection(index, "gen_ai.request.model", "is required (or gen_ai.response.model)")
    if len(model[1]) > MAX_ID:
        return Rejection(index, model[0], f"must be at most {MAX_ID} characters")
    trace_id = span.trace_id
    provider_request = "" if REQUEST_ID not in attrs else _provider_request(attrs, REQUEST_ID)
    # positional, in the fields' order: one draft per span of an export
    return CallDraft(
        index,
        session,
        f"trace:{trace_id}" if trace_id else f"span:{span_id}",
        (span.start_ns or span.end_ns, span_id),
        provider_request_key(provider_request) if provider_request else f"{trace_id}/{span_id}",
        model[1],
        "otel",
        usage,
        at,
        "otlp",
        compacted,
        None if WINDOW not in attrs else span_window(attrs),
        reporter,
        provider_request,
        metadata(span.resource, attrs),
        record_fields(attrs),
    )


# What a `claude_code.llm_request` span carries beside its counts, kept in the raw usage as the
# `api_request` event's are (durations as counts, the rest as text).
_CLAUDE_CODE_SPAN_EXTRAS: Final = ("query_source", "duration_ms", "ttft_ms", "speed")
_DURATIONS: Final = frozenset({"duration_ms", "ttft_ms"})


def _map_claude_code_span(
    index: int, span: SpanLike, out: Mapped, latest: datetime | None, metadata: ResourceMetadata
) -> None:
    """A `claude_code.llm_request` span: a call when it carries token counts, else ignored."""
    attrs = span.attributes
    if not any(source in attrs for source, _ in CLAUDE_CODE_TOKENS):
        out.ignored += 1  # a request that failed or was cancelled: no usage, no call
        return
    draft = (
        too_late(index, latest, *span_times(span))
        or nul_attribute(index, attrs, span.resource)
        or _claude_code_span_call(index, span, metadata)
    )
    if isinstance(draft, Rejection):
        out.rejected.append(draft)
    else:
        out.calls.append(draft)


def _claude_code_span_call(
    index: int, span: SpanLike, metadata: ResourceMetadata
) -> CallDraft | Rejection:
    if not span.span_id:
        return Rejection(index, "spanId", "is required to identify the call")
    attrs = span.attributes
    found = _first(("session.id",), attrs, span.resource)
    if found is None:
        return Rejection(index, "session.id", "is required")
    problem = _session_problem(found[1])
    if problem is not None:
        return Rejection(index, "session.id", problem)
    model = _first(("model", "gen_ai.request.model"), attrs)
    if model is None:
        return Rejection(index, "model", "is required")
    if len(model[1]) > MAX_ID:
        return Rejection(index, model[0], f"must be at most {MAX_ID} characters")
    usage = claude_code_usage(attrs)
    for extra in _CLAUDE_CODE_SPAN_EXTRAS:
        if extra in attrs:
            value = attrs[extra]
            usage[extra] = as_count(value) if extra in _DURATIONS else _text(value)
    prompt = _text(attrs.get("prompt.id"))[:180]
    if prompt:
        turn_key = f"prompt:{prompt}"
    else:
        turn_key = f"trace:{span.trace_id}" if span.trace_id else f"span:{span.span_id}"
    provider_request = _provider_request(attrs, "request_id", REQUEST_ID)
    return CallDraft(
        index=index,
        session_id=found[1],
        turn_key=turn_key,
        order=(span.start_ns or span.end_ns, span.span_id),
        request_id=provider_request_key(provider_request)
        if provider_request
        else _span_request_id(span),
        model=model[1],
        provider="anthropic",
        usage=usage,
        at=time_of(span.end_ns) or time_of(span.start_ns),
        source="claude-code",
        window_tokens=span_window(attrs),
        reporter="claude-code-span",
        provider_request=provider_request,
        metadata=metadata(span.resource, attrs),
        diagnostics=record_fields(attrs),
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
