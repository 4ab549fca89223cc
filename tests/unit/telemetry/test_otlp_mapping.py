"""GenAI spans and Claude Code log records -> call drafts and context events (pure)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.otlp.claude_code import map_log_records
from telemetry.otlp.mapping import (
    CLAUDE_CODE_SPAN,
    NOT_SCALAR,
    NUL_MESSAGE,
    SHOWN_CHARS,
    ResourceMetadata,
    _token_attributes,
    _token_kind,
    as_count,
    is_llm_call,
    map_spans,
    nul_attribute,
    shown,
    time_of,
)
from telemetry.otlp.wire import LogRecord, Span
from telemetry.session_meta import OTLP_NAMES, from_otlp
from telemetry.usage import FLAG_OTEL_INPUT_EXCLUSIVE, normalize_usage

REPO = Path(__file__).resolve().parents[3]
T0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z in ns


def span(
    attrs=None,
    *,
    trace="0af7651916cd43dd8448eb211c80319c",
    span_id="b7ad6b7169203331",
    start=T0,
    end=T0 + 2_000_000_000,
    resource=None,
    name="chat",
):
    return Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id="",
        name=name,
        start_ns=start,
        end_ns=end,
        attributes=dict(attrs or {}),
        resource=dict(resource or {}),
    )


GENAI = {
    "gen_ai.conversation.id": "s1",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "gen_ai.usage.input_tokens": 1167,
    "gen_ai.usage.cache_creation.input_tokens": 1163,
    "gen_ai.usage.output_tokens": 50,
}


def log(attrs, *, body=None, resource=None, time_ns=T0):
    return LogRecord(
        time_ns=time_ns,
        observed_ns=time_ns,
        body=body,
        event_name="",
        attributes=dict(attrs),
        resource=dict(resource or {}),
        trace_id="",
        span_id="",
    )


def test_the_mapping_modules_import_no_django():
    code = (
        "import sys, telemetry.otlp.mapping, telemetry.otlp.claude_code, telemetry.otlp.wire; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'compaction')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_genai_span_becomes_a_call_of_its_conversation():
    mapped = map_spans([span(GENAI)])

    (call,) = mapped.calls
    assert call.session_id == "s1"
    assert call.model == "claude-sonnet-4-5"
    assert call.request_id == "0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331"
    assert call.turn_key == "trace:0af7651916cd43dd8448eb211c80319c"
    assert call.at == datetime(2025, 12, 1, 0, 0, 2, tzinfo=UTC)
    usage = normalize_usage(call.usage, provider=call.provider)
    assert (usage.uncached_input, usage.cache_write_5m, usage.output) == (4, 1163, 50)
    assert usage.flags == ()
    assert call.usage["gen_ai.provider.name"] == "anthropic"


def test_response_model_wins_over_request_model_and_openinference_name_is_the_fallback():
    with_response = {**GENAI, "gen_ai.response.model": "claude-sonnet-4-5-20250929"}
    openinference = {
        "session.id": "oi",
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.token_count.prompt": 100,
        "llm.token_count.completion": 7,
        "llm.token_count.prompt_details.cache_read": 60,
    }
    a, b = map_spans([span(with_response), span(openinference, span_id="1" * 16)]).calls
    assert a.model == "claude-sonnet-4-5-20250929"
    assert b.model == "gpt-4o" and b.session_id == "oi"
    usage = normalize_usage(b.usage, provider=b.provider)
    assert (usage.uncached_input, usage.cache_read, usage.output) == (40, 60, 7)


def test_session_falls_back_to_span_session_id_then_resource_then_the_trace():
    base = {k: v for k, v in GENAI.items() if k != "gen_ai.conversation.id"}
    calls = map_spans(
        [
            span({**base, "session.id": "from-span"}, span_id="1" * 16),
            span(base, span_id="2" * 16, resource={"session.id": "from-resource"}),
            span(base, span_id="3" * 16),
        ]
    ).calls
    assert [c.session_id for c in calls] == [
        "from-span",
        "from-resource",
        "0af7651916cd43dd8448eb211c80319c",
    ]


def test_both_cache_write_names_are_read():
    old = {**GENAI}
    new = {k: v for k, v in GENAI.items() if "cache_creation" not in k}
    new["gen_ai.usage.cache_write.input_tokens"] = 1163
    for attrs in (old, new):
        (call,) = map_spans([span(attrs)]).calls
        assert normalize_usage(call.usage, provider="otel").cache_write_5m == 1163


def test_exclusive_counts_are_detected_and_flagged():
    # Anthropic-style: input (4) < read + write: the count cannot include them.
    attrs = {**GENAI, "gen_ai.usage.input_tokens": 4}
    (call,) = map_spans([span(attrs)]).calls
    usage = normalize_usage(call.usage, provider="otel")
    assert usage.context_tokens == 4 + 1163
    assert FLAG_OTEL_INPUT_EXCLUSIVE in usage.flags


def test_int64_as_string_and_integral_doubles_are_counts():
    attrs = {
        **GENAI,
        "gen_ai.usage.input_tokens": "1167",
        "gen_ai.usage.output_tokens": 50.0,
    }
    (call,) = map_spans([span(attrs)]).calls
    assert call.usage["gen_ai.usage.input_tokens"] == 1167
    assert call.usage["gen_ai.usage.output_tokens"] == 50
    assert as_count(12.5) == 12.5  # left for the normaliser to refuse, naming the field
    assert as_count(True) is True


def test_non_genai_spans_are_ignored_and_agent_spans_with_totals_are_not_calls():
    http = span({"http.method": "GET"}, span_id="1" * 16)
    agent = span({**GENAI, "gen_ai.operation.name": "invoke_agent"}, span_id="2" * 16)
    chain = span(
        {"openinference.span.kind": "CHAIN", "llm.token_count.prompt": 5}, span_id="3" * 16
    )
    mapped = map_spans([http, agent, chain])
    assert mapped.calls == [] and mapped.rejected == []
    assert mapped.ignored == 3
    assert not is_llm_call({"gen_ai.request.model": "x"})


def test_missing_model_is_rejected_naming_the_attribute():
    attrs = {k: v for k, v in GENAI.items() if k != "gen_ai.request.model"}
    mapped = map_spans([span(attrs)])
    assert mapped.calls == []
    (rejection,) = mapped.rejected
    assert rejection.field == "gen_ai.request.model"
    assert "item 0" in str(rejection)


def test_a_compacted_call_carries_an_agent_compaction_event():
    mapped = map_spans([span({**GENAI, "gen_ai.conversation.compacted": True})])
    (call,) = mapped.calls
    (event,) = mapped.events
    assert call.compacted
    assert (event.kind, event.origin, event.source) == ("compaction", "agent", "otlp")
    assert event.call_request_id == call.request_id
    assert event.source_key.endswith("/b7ad6b7169203331")


def test_calls_order_by_start_time_within_their_trace():
    late = span(GENAI, span_id="a" * 16, start=T0 + 5)
    early = span(GENAI, span_id="b" * 16, start=T0 + 1)
    calls = sorted(map_spans([late, early]).calls, key=lambda c: c.order)
    assert [c.request_id[-1] for c in calls] == ["b", "a"]


# --- Claude Code -------------------------------------------------------------------------------

CC_REQUEST = {
    "event.name": "api_request",
    "event.timestamp": "2025-12-01T00:00:05.123Z",
    "event.sequence": 7,
    "session.id": "cc-1",
    "prompt.id": "p-1",
    "model": "claude-opus-4-5",
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": "2000",
    "cost_usd": "0.0412",
    "duration_ms": "5300",
    "request_id": "req_011",
    "query_source": "main",
}


def test_claude_code_api_request_is_an_anthropic_call_with_its_own_cost():
    mapped = map_log_records([log(CC_REQUEST, body="claude_code.api_request")])
    (call,) = mapped.calls
    assert (call.session_id, call.turn_key, call.request_id) == ("cc-1", "prompt:p-1", "cc:req_011")
    assert call.at == datetime(2025, 12, 1, 0, 0, 5, 123000, tzinfo=UTC)
    assert call.usage["cost_usd"] == "0.0412"
    usage = normalize_usage(call.usage, provider=call.provider)
    assert (usage.uncached_input, usage.cache_read, usage.cache_write_5m, usage.output) == (
        12,
        40000,
        2000,
        300,
    )


def test_claude_code_event_name_may_come_from_the_body_only():
    attrs = {k: v for k, v in CC_REQUEST.items() if k != "event.name"}
    assert len(map_log_records([log(attrs, body="claude_code.api_request")]).calls) == 1


def test_claude_code_compaction_is_an_agent_side_event_with_pre_and_post_tokens():
    record = log(
        {
            "event.name": "compaction",
            "session.id": "cc-1",
            "prompt.id": "p-2",
            "event.timestamp": "2025-12-01T00:10:00Z",
            "event.sequence": "12",
            "trigger": "auto",
            "success": "true",
            "pre_tokens": "155000",
            "post_tokens": "21000",
            "duration_ms": 41000,
        }
    )
    (event,) = map_log_records([record]).events
    assert (event.kind, event.origin, event.source, event.trigger) == (
        "compaction",
        "agent",
        "claude-code",
        "auto",
    )
    assert (event.tokens_before, event.tokens_after) == (155000, 21000)
    assert event.detail == {"success": True, "duration_ms": 41000}
    assert event.turn_key == "prompt:p-2"


def test_prompt_too_long_error_is_an_overflow_and_other_errors_are_ignored():
    too_long = log(
        {
            "event.name": "api_error",
            "session.id": "cc-1",
            "error": "prompt is too long: 212,959 tokens > 200000 maximum",
            "status_code": "400",
            "model": "claude-sonnet-4-5",
        }
    )
    overloaded = log({"event.name": "api_error", "session.id": "cc-1", "error": "Overloaded"})
    mapped = map_log_records([too_long, overloaded])
    (event,) = mapped.events
    assert (event.kind, event.origin, event.tokens_before) == ("overflow", "provider", 212959)
    assert event.detail["window_tokens"] == 200000
    assert mapped.ignored == 1 and not mapped.unknown_events


def test_unknown_events_are_ignored_and_counted_by_name():
    mapped = map_log_records(
        [
            log({"event.name": "user_prompt", "session.id": "s"}),
            log({"event.name": "brand_new_thing", "session.id": "s"}),
            log({"event.name": "brand_new_thing", "session.id": "s"}),
            log({"some": "app log"}, body="hello"),
        ]
    )
    assert mapped.ignored == 4
    assert mapped.unknown_events == {"brand_new_thing": 2, "hello": 1}


def test_api_request_without_session_or_model_is_rejected_naming_the_field():
    no_session = {k: v for k, v in CC_REQUEST.items() if k != "session.id"}
    no_model = {k: v for k, v in CC_REQUEST.items() if k != "model"}
    mapped = map_log_records([log(no_session), log(no_model)])
    assert [r.field for r in mapped.rejected] == ["session.id", "model"]


# --- properties --------------------------------------------------------------------------------

attr_values = st.one_of(
    st.integers(min_value=0, max_value=10**9),
    st.integers(min_value=0, max_value=10**9).map(str),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
    # OTLP's arrayValue and kvlistValue, as the wire decodes them
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
attr_names = st.sampled_from(
    [
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.request.model",
        "gen_ai.conversation.id",
        "gen_ai.operation.name",
        "llm.token_count.prompt",
        "http.method",
        "gen_ai.conversation.compacted",
    ]
)
spans_strategy = st.lists(
    st.builds(
        span,
        st.dictionaries(attr_names, attr_values, max_size=6),
        span_id=st.text("0123456789abcdef", min_size=16, max_size=16),
        start=st.integers(min_value=0, max_value=2**63),
    ),
    max_size=20,
)


@given(spans_strategy)
def test_every_span_is_exactly_one_call_ignored_or_rejected(spans):
    mapped = map_spans(spans)
    compaction_only = sum(1 for e in mapped.events if e.call_request_id is None)
    assert len(mapped.calls) + mapped.ignored + len(mapped.rejected) + compaction_only == len(spans)


@given(spans_strategy)
def test_mapping_is_deterministic_and_a_span_maps_alike_in_any_export(spans):
    once = map_spans(spans)
    assert map_spans(spans) == once
    # A replayed export (the same spans again) gives the same drafts twice over.
    twice = map_spans([*spans, *spans]).calls
    key = [(c.request_id, c.usage, c.model, c.at, c.turn_key) for c in twice]
    assert key == [(c.request_id, c.usage, c.model, c.at, c.turn_key) for c in once.calls] * 2


@given(
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**7),
    st.integers(min_value=0, max_value=10**6),
)
def test_inclusive_counts_keep_the_input_and_exclusive_ones_add_the_cache(inp, read, write, out):
    attrs = {
        **GENAI,
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.cache_read.input_tokens": str(read),
        "gen_ai.usage.cache_creation.input_tokens": write,
        "gen_ai.usage.output_tokens": out,
    }
    (call,) = map_spans([span(attrs)]).calls
    usage = normalize_usage(call.usage, provider=call.provider)
    if inp >= read + write:
        assert usage.context_tokens == inp and usage.flags == ()
    else:
        assert usage.context_tokens == inp + read + write
        assert usage.flags == (FLAG_OTEL_INPUT_EXCLUSIVE,)


@pytest.mark.parametrize("value", ["12000", " 12000 ", 12000, 12000.0])
def test_claude_code_string_values_are_counts(value):
    (call,) = map_log_records([log({**CC_REQUEST, "input_tokens": value})]).calls
    assert call.usage["input_tokens"] == 12000


def test_cost_difference_ignores_rounding_and_names_real_gaps():
    from decimal import Decimal

    from telemetry.otlp.claude_code import cost_difference

    assert cost_difference(Decimal("0.041200"), Decimal("0.0412")) is None
    assert cost_difference(Decimal("0.0413"), Decimal("0.0412")) is None  # within 1 %
    assert cost_difference(Decimal("0.0500"), Decimal("0.0412")) == Decimal("0.0088")
    assert cost_difference(None, Decimal("0.0412")) is None
    assert cost_difference(Decimal("0.0000004"), Decimal("0")) is None


def test_a_session_id_the_api_cannot_address_is_rejected_naming_the_attribute():
    mapped = map_spans([span({**GENAI, "gen_ai.conversation.id": "a/b"})])
    (rejection,) = mapped.rejected
    assert rejection.field == "gen_ai.conversation.id" and "'/'" in rejection.message
    logged = map_log_records([log({**CC_REQUEST, "session.id": "x" * 201})])
    assert [r.field for r in logged.rejected] == ["session.id"]


def test_an_array_or_map_where_a_name_belongs_is_refused_naming_it_the_rest_kept():
    """OTLP lets any attribute be an arrayValue or kvlistValue; a session, model or request id
    given so is refused naming the attribute, never stored as its Python spelling."""
    cc_span = {**CC_REQUEST, "session.id": "cc-span"}
    mapped = map_spans(
        [
            span({**GENAI, "gen_ai.conversation.id": {"k": "v"}}, span_id="1" * 16),
            span({**GENAI, "gen_ai.request.model": ["claude", "opus"]}, span_id="2" * 16),
            span(
                {k: v for k, v in GENAI.items() if k != "gen_ai.conversation.id"},
                span_id="3" * 16,
                resource={"session.id": ["a"]},
            ),
            span({**cc_span, "session.id": {"id": "x"}}, span_id="4" * 16, name=CLAUDE_CODE_SPAN),
            span(GENAI, span_id="5" * 16),
        ]
    )
    assert [(r.index, r.field, r.message) for r in mapped.rejected] == [
        (0, "gen_ai.conversation.id", NOT_SCALAR),
        (1, "gen_ai.request.model", NOT_SCALAR),
        (2, "session.id", NOT_SCALAR),
        (3, "session.id", NOT_SCALAR),
    ]
    assert [c.session_id for c in mapped.calls] == ["s1"]
    logged = map_log_records(
        [
            log({**CC_REQUEST, "session.id": {"k": "v"}}),
            log({**CC_REQUEST, "model": [1]}),
            log(CC_REQUEST),
        ]
    )
    assert [(r.field, r.message) for r in logged.rejected] == [
        ("session.id", NOT_SCALAR),
        ("model", NOT_SCALAR),
    ]
    assert [c.session_id for c in logged.calls] == ["cc-1"]


_META_NAMES = sorted(OTLP_NAMES) + ["gen_ai.request.model", "other.name"]
_META_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(["", "  ", "alice", " svc "])
)
_META_ATTRS = st.dictionaries(st.sampled_from(_META_NAMES), _META_VALUES, max_size=6)


@given(st.lists(_META_ATTRS, min_size=1, max_size=4), st.lists(_META_ATTRS, max_size=12))
def test_resource_metadata_is_from_otlp(resources, items):
    """The per-export reader gives what `from_otlp` gives for every item, whether its
    attributes name a metadata key (read whole) or not (its resource's, read once)."""
    read = ResourceMetadata()
    for i, attrs in enumerate(items):
        resource = resources[i % len(resources)]
        assert read(resource, attrs) == from_otlp(resource, attrs)


_TOKEN_NAMES = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.",
    "gen_ai.usage",
    "llm.token_count.prompt",
    "llm.token_count.",
    "llm.token_count",
    "gen_ai.request.model",
    "",
]
_TOKEN_ATTRS = st.dictionaries(
    st.one_of(st.sampled_from(_TOKEN_NAMES), st.text(max_size=20)),
    st.one_of(st.integers(), st.text(max_size=5), st.floats(allow_nan=False), st.booleans()),
    max_size=8,
)


@given(st.lists(_TOKEN_ATTRS, max_size=6))
def test_the_token_kinds_kept_across_an_export_read_what_each_span_alone_reads(exports):
    """`_token_attributes` with the names' kinds kept across the spans of an export (as
    `map_spans` keeps them) reads each span's usage and OpenInference flag as it reads the span
    alone, by the prefix tests of `_token_kind`."""
    kinds: dict[str, int] = {}
    for attributes in exports:
        assert _token_attributes(attributes, kinds) == _token_attributes(attributes)
    assert all(kind == _token_kind(name) for name, kind in kinds.items())


_LATEST = datetime(2025, 12, 1, 0, 0, 5, tzinfo=UTC)
_LATEST_NS = T0 + 5_000_000_000
# times on both sides of `_LATEST` at its microsecond (what `time_of` keeps), absent (0), and wide
_TIMES = st.one_of(
    st.sampled_from(
        [0, 1, T0, _LATEST_NS - 1_000, _LATEST_NS, _LATEST_NS + 999, _LATEST_NS + 1_000, 2**64 - 1]
    ),
    st.integers(min_value=0, max_value=2**64 - 1),
)


@given(_TIMES, _TIMES, st.booleans())
def test_a_call_or_compaction_past_latest_is_rejected_naming_its_first_late_time(start, end, call):
    """A call (or a compaction span) is rejected when its end, else its start, is past `latest`
    as `time_of` reads them (`too_late`), whichever of the two comes first; its time is its end,
    else its start."""
    attrs = (
        GENAI if call else {"gen_ai.conversation.compacted": True, "gen_ai.conversation.id": "s"}
    )
    mapped = map_spans([span(attrs, start=start, end=end)], latest=_LATEST)
    times = (("endTimeUnixNano", time_of(end)), ("startTimeUnixNano", time_of(start)))
    late = [name for name, at in times if at is not None and at > _LATEST]
    if late:
        assert [r.field for r in mapped.rejected] == late[:1]
        assert not mapped.calls and not mapped.events
        return
    assert not mapped.rejected
    if call:
        (draft,) = mapped.calls
        assert draft.at == (time_of(end) or time_of(start))
    else:
        assert len(mapped.events) == 1


def test_each_span_is_reported_by_its_own_resource_service():
    """The reporter is read once for the spans of a resource, and again for another's."""
    platform, sdk = {"service.name": " claude-platform "}, {"service.name": "app"}
    spans = [
        span(GENAI, span_id=f"{i:016x}", resource=resource)
        for i, resource in enumerate([platform, platform, sdk, dict(platform), sdk, {}])
    ]
    reporters = [c.reporter for c in map_spans(spans).calls]
    assert reporters == ["platform-span"] * 2 + ["sdk-span", "platform-span"] + ["sdk-span"] * 2


# --- NUL anywhere in an attribute's value; what the partial-success message echoes -------------

# (keys without '.' or control characters: the named path leads back to the value)
_KEYS = st.text(st.sampled_from("ab_-:é"), min_size=1, max_size=3)
_LEAVES = st.one_of(
    st.text(st.sampled_from("ab\x00"), max_size=3),
    st.binary(max_size=3),
    st.integers(),
    st.booleans(),
    st.none(),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


def _holds_nul(value):
    if isinstance(value, str | bytes):
        return "\x00" in value if isinstance(value, str) else b"\x00" in value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(_holds_nul(item) for item in items)


def _at(value, steps):
    for step in steps:
        value = value[int(step)] if isinstance(value, list) else value[step]
    return value


@given(st.dictionaries(_KEYS, _VALUES, max_size=4), st.dictionaries(_KEYS, _VALUES, max_size=2))
@example({"a": ["b", {"c": b"\x00"}]}, {})
@example({"a": 1, "b": ["x"]}, {"r": {"s": ["", "\x00"]}})
def test_an_item_is_refused_exactly_when_a_nul_is_somewhere_in_its_values_naming_where(
    attributes, resource
):
    found = nul_attribute(7, attributes, resource)
    if not _holds_nul(list(attributes.values()) + list(resource.values())):
        assert found is None
        return
    assert found is not None and (found.index, found.message) == (7, NUL_MESSAGE)
    in_resource = found.field.startswith("resource.")
    source = resource if in_resource else attributes
    name, *steps = found.field.removeprefix("resource." if in_resource else "").split(".")
    value = _at(source[name], steps)
    assert isinstance(value, str | bytes) and _holds_nul(value)
    # the item's own attributes are read before its resource's
    assert source is attributes or not _holds_nul(list(attributes.values()))


@given(st.text(max_size=2 * SHOWN_CHARS))
@example("x\x00y\x1b[31m\r\n\x7f\x9f")
@example("a" * SHOWN_CHARS)
@example("a" * (SHOWN_CHARS + 1))
def test_what_the_message_echoes_holds_no_control_character_and_is_cut(text):
    echoed = shown(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in echoed)
    assert echoed.endswith("…") == (len(text) > SHOWN_CHARS)
    kept = echoed.removesuffix("…") if len(text) > SHOWN_CHARS else echoed
    if all(0x20 <= ord(c) < 0x7F or ord(c) > 0x9F for c in text[:SHOWN_CHARS]):
        assert kept == text[:SHOWN_CHARS]


def test_an_unknown_event_is_counted_under_its_name_as_the_message_shows_it():
    mapped = map_log_records(
        [log({"event.name": "odd\x00one", "session.id": "s"}), log({"event.name": "x" * 500})]
    )
    assert mapped.unknown_events == {"odd\\x00one": 1, f"{'x' * SHOWN_CHARS}…": 1}


def test_a_call_span_whose_name_holds_a_nul_is_refused_naming_it():
    mapped = map_spans([span({**GENAI, "gen_ai.conversation.compacted": True}, name="c\x00")])
    assert (mapped.calls, mapped.events, [str(r) for r in mapped.rejected]) == (
        [],
        [],
        ["item 0: name: must not contain NUL characters"],
    )
