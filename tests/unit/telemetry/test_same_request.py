"""Platform and Claude Code spans as calls, and one provider request from several sources (pure)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.otlp.claude_code import map_log_records
from telemetry.otlp.mapping import CallDraft, map_spans
from telemetry.otlp.same_request import REPORTERS, keep_richer, richer, richness
from telemetry.otlp.wire import LogRecord, Span
from telemetry.usage import normalize_usage

REPO = Path(__file__).resolve().parents[3]
T0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z in ns
TRACE = "0af7651916cd43dd8448eb211c80319c"


def span(attrs, *, name="chat", span_id="b7ad6b7169203331", resource=None, start=T0):
    return Span(
        trace_id=TRACE,
        span_id=span_id,
        parent_span_id="",
        name=name,
        start_ns=start,
        end_ns=start + 2_000_000_000,
        attributes=dict(attrs),
        resource=dict(resource or {}),
    )


# A `claude_code.llm_request` span as Claude Code's beta tracing sends it: flat counts as
# strings, the model twice, its durations and the request id.
CC_SPAN = {
    "session.id": "cc-1",
    "model": "claude-sonnet-4-5",
    "gen_ai.system": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "query_source": "repl_main_thread",
    "speed": "normal",
    "llm_request.context": "interaction",
    "duration_ms": "4100",
    "ttft_ms": 900,
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": 2000.0,
    "request_id": "req_011A",
}

# The same request as the Claude platform exports it.
PLATFORM = {
    "gen_ai.conversation.id": "cc-1",
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "anthropic",
    "gen_ai.request.model": "claude-sonnet-4-5",
    "gen_ai.usage.input_tokens": 42012,
    "gen_ai.usage.cache_read.input_tokens": 40000,
    "gen_ai.usage.cache_creation.input_tokens": 2000,
    "gen_ai.usage.output_tokens": 300,
    "anthropic.request.id": "req_011A",
    "anthropic.organization.id": "org",
}


def test_the_same_request_module_imports_no_django():
    code = (
        "import sys, telemetry.otlp.same_request; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'compaction')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_claude_code_llm_request_span_is_a_call_with_anthropic_buckets():
    mapped = map_spans([span(CC_SPAN, name="claude_code.llm_request")])

    (call,) = mapped.calls
    assert (call.session_id, call.model, call.provider) == (
        "cc-1",
        "claude-sonnet-4-5",
        "anthropic",
    )
    assert call.request_id == "cc:req_011A" and call.provider_request == "req_011A"
    assert call.reporter == "claude-code-span"
    assert call.turn_key == f"trace:{TRACE}"  # Claude Code's interaction span is the root
    usage = normalize_usage(call.usage, provider=call.provider)
    assert (usage.uncached_input, usage.cache_read, usage.cache_write_5m, usage.output) == (
        12,
        40000,
        2000,
        300,
    )
    assert (call.usage["duration_ms"], call.usage["ttft_ms"], call.usage["speed"]) == (
        4100,
        900,
        "normal",
    )
    assert call.at == datetime(2025, 12, 1, 0, 0, 2, tzinfo=UTC)


def test_a_claude_code_span_takes_its_prompts_turn_and_the_resources_session():
    attrs = {k: v for k, v in CC_SPAN.items() if k != "session.id"} | {"prompt.id": "p-7"}
    (call,) = map_spans(
        [span(attrs, name="claude_code.llm_request", resource={"session.id": "cc-r"})]
    ).calls
    assert (call.session_id, call.turn_key) == ("cc-r", "prompt:p-7")


def test_a_claude_code_span_without_counts_is_ignored_and_without_session_rejected():
    failed = {k: v for k, v in CC_SPAN.items() if not k.endswith("_tokens")}
    no_session = {k: v for k, v in CC_SPAN.items() if k != "session.id"}
    no_model = {k: v for k, v in CC_SPAN.items() if "model" not in k}
    mapped = map_spans(
        [
            span(failed, name="claude_code.llm_request"),
            span(no_session, name="claude_code.llm_request"),
            span(no_model, name="claude_code.llm_request"),
        ]
    )
    assert (mapped.calls, mapped.ignored) == ([], 1)
    assert [(r.index, r.field) for r in mapped.rejected] == [(1, "session.id"), (2, "model")]


def test_a_claude_code_span_without_request_id_is_identified_by_its_span():
    attrs = {k: v for k, v in CC_SPAN.items() if k != "request_id"}
    (call,) = map_spans([span(attrs, name="claude_code.llm_request")]).calls
    assert call.request_id == f"{TRACE}/b7ad6b7169203331" and call.provider_request == ""


def test_a_platform_span_is_a_call_named_by_its_request_id():
    mapped = map_spans(
        [
            span(
                PLATFORM,
                name="anthropic.messages.create",
                resource={"service.name": "claude-platform"},
            )
        ]
    )
    (call,) = mapped.calls
    assert (call.reporter, call.request_id, call.provider) == (
        "platform-span",
        "cc:req_011A",
        "otel",
    )
    usage = normalize_usage(call.usage, provider=call.provider)
    assert (usage.uncached_input, usage.cache_read, usage.cache_write_5m) == (12, 40000, 2000)
    sdk = map_spans([span(PLATFORM, resource={"service.name": "my-app"})]).calls[0]
    assert (sdk.reporter, sdk.request_id) == ("sdk-span", "cc:req_011A")


@pytest.mark.parametrize(
    ("value", "window"),
    [
        (200000, 200000),
        ("1000000", 1000000),
        (200000.0, 200000),
        (0, None),
        (-5, None),
        ("wide", None),
        (2**31, None),
        (True, None),
    ],
)
def test_gen_ai_context_window_size_is_the_calls_window_when_it_is_one(value, window):
    (call,) = map_spans([span(PLATFORM | {"gen_ai.context.window_size": value})]).calls
    assert call.window_tokens == window
    (cc,) = map_spans(
        [span(CC_SPAN | {"gen_ai.context.window_size": value}, name="claude_code.llm_request")]
    ).calls
    assert cc.window_tokens == window


def _event(**extra):
    attrs = {
        "event.name": "api_request",
        "session.id": "cc-1",
        "prompt.id": "p-1",
        "model": "claude-sonnet-4-5",
        "input_tokens": "12",
        "output_tokens": "300",
        "cache_read_tokens": "40000",
        "cache_creation_tokens": "2000",
        "cost_usd": "0.0291",
        "request_id": "req_011A",
        **extra,
    }
    record = LogRecord(
        time_ns=T0,
        observed_ns=T0,
        body=None,
        event_name="",
        attributes=attrs,
        resource={},
        trace_id="",
        span_id="",
    )
    (call,) = map_log_records([record]).calls
    return call


def test_the_event_the_claude_code_span_and_the_platform_span_of_one_request_keep_the_event():
    event = _event()
    cc_span, platform = map_spans(
        [
            span(CC_SPAN, name="claude_code.llm_request", span_id="1" * 16),
            span(PLATFORM, span_id="2" * 16, resource={"service.name": "claude-platform"}),
        ]
    ).calls
    assert event.request_id == cc_span.request_id == platform.request_id == "cc:req_011A"
    assert event.reporter == "claude-code-event"

    kept, dropped = keep_richer([platform, cc_span, event])

    assert kept == [event]  # cost and prompt turn: the richest
    assert dropped == [platform, cc_span]
    assert richness(event) == 3 and richness(cc_span) == richness(platform) == 1


def test_a_window_on_the_platform_span_makes_it_the_richer_of_two_spans():
    cc_span = map_spans([span(CC_SPAN, name="claude_code.llm_request")]).calls[0]
    platform = map_spans([span(PLATFORM | {"gen_ai.context.window_size": 200000})]).calls[0]
    assert richer(cc_span, platform) is platform
    # without it, the tie goes to the reporter nearer the agent
    bare = replace(platform, window_tokens=None)
    assert richer(cc_span, bare) is cc_span is richer(bare, cc_span)


def test_drafts_without_a_provider_request_id_are_all_kept():
    plain = map_spans([span({**PLATFORM, "anthropic.request.id": ""})]).calls[0]
    twin = replace(plain, index=1)
    assert keep_richer([plain, twin]) == ([plain, twin], [])


# --- properties ------------------------------------------------------------------------------


def _draft(index, reporter, session, request, cost, window, prompt, split, start):
    usage: dict[str, Any] = {"input_tokens": 1, "output_tokens": 1}
    if cost:
        usage["cost_usd"] = "0.01"
    if split:
        usage["cache_creation"] = {"ephemeral_1h_input_tokens": 5}
    return CallDraft(
        index=index,
        session_id=session,
        turn_key="prompt:p" if prompt else "trace:t",
        order=(start, f"{index:04d}"),
        request_id=f"cc:{request}" if request else f"t/{index}",
        model="claude-sonnet-4-5",
        provider="anthropic",
        usage=usage,
        at=None,
        source="otlp",
        window_tokens=200000 if window else None,
        reporter=reporter,
        provider_request=request,
    )


@st.composite
def drafts(draw):
    count = draw(st.integers(0, 12))
    return [
        _draft(
            index,
            draw(st.sampled_from(REPORTERS)),
            draw(st.sampled_from(["s1", "s2"])),
            draw(st.sampled_from(["", "req_a", "req_b"])),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.booleans()),
            draw(st.integers(0, 3)),
        )
        for index in range(count)
    ]


@given(drafts())
def test_keep_richer_keeps_one_richest_report_per_request_and_every_unnamed_draft(items):
    kept, dropped = keep_richer(items)

    assert sorted(d.index for d in kept + dropped) == [d.index for d in items]
    assert [d.index for d in kept] == sorted(d.index for d in kept)  # input order
    named = [(d.session_id, d.request_id) for d in kept if d.provider_request]
    assert len(named) == len(set(named))
    assert [d for d in items if not d.provider_request] == [
        d for d in kept if not d.provider_request
    ]
    for gone in dropped:
        (held,) = [
            k for k in kept if (k.session_id, k.request_id) == (gone.session_id, gone.request_id)
        ]
        assert richness(held) >= richness(gone)


@given(drafts())
def test_which_report_is_kept_never_depends_on_arrival_order(items):
    assert sorted(d.index for d in keep_richer(items)[0]) == sorted(
        d.index for d in keep_richer(list(reversed(items)))[0]
    )


@given(drafts(), drafts())
def test_richer_is_symmetric_and_one_of_the_two(left, right):
    for a in left[:3]:
        for b in right[:3]:
            b = replace(b, index=b.index + 100)
            assert richer(a, b) is richer(b, a)
            assert richer(a, b) in (a, b)
            assert richness(richer(a, b)) == max(richness(a), richness(b))
