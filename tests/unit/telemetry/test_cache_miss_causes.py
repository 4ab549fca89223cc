"""Each cause of a cache miss on hand-written calls, word for word: where two prefixes first
differ, the evidence and detail of each cause, which compaction lies between two calls (by
surface version, else by time, each bound exact), and the premium's rates per model and tier."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from telemetry.cache_misses import (
    D2_HINT,
    Break,
    CallObs,
    ContextChange,
    Segment,
    SurfaceChange,
    break_point,
    classify,
    segment_diff,
)
from telemetry.pricing import ModelPrice, Rates

D = Decimal
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)
TOOLS = Segment("tools", "t", 3_000)
SYSTEM = Segment("system", "s1", 1_200, "You are careful.")
M0 = Segment("message 0", "m0", 10_000)
M1 = Segment("message 1", "m1", 20_000)


def call(turn: int, at: datetime = T0, **kw: Any) -> CallObs:
    values: dict[str, Any] = {"uncached_input": 0, "cache_read": 0, "model": "m"}
    return CallObs(turn=turn, call=0, at=at, **(values | kw))


# previous leaves 52,000 cacheable; current reads none of it
PREVIOUS = call(0, cache_read=50_000, cache_write_5m=2_000, surface_version=3)
CURRENT = call(1, T1, uncached_input=53_000, surface_version=4)


def one(calls: list[CallObs], **kw: Any) -> Any:
    misses = classify(calls, prices={}, **kw)
    assert len(misses) == 1, misses
    return misses[0]


# --- where two prefixes differ -----------------------------------------------------------------


def test_tools_seen_on_one_side_only_are_ignored_on_either_side():
    assert break_point([SYSTEM, M0], [TOOLS, SYSTEM, M0]) is None
    assert break_point([TOOLS, SYSTEM, M0], [SYSTEM, M0]) is None
    assert break_point([TOOLS, SYSTEM, M0], [TOOLS, SYSTEM, M0, M1]) is None


def test_a_break_names_its_index_and_the_tokens_before_it():
    changed = Segment("message 1", "other", 20_000)
    assert break_point([TOOLS, SYSTEM, M0, M1], [TOOLS, SYSTEM, M0, changed]) == Break(
        3, "message 1", 3_000 + 1_200 + 10_000, M1, changed
    )
    renamed = Segment("system prompt", "s1", 1_200)
    assert break_point([TOOLS, SYSTEM], [TOOLS, renamed]) == Break(
        1, "system prompt", 3_000, SYSTEM, renamed
    )


def test_a_prefix_that_lost_its_end_breaks_at_the_first_lost_segment():
    assert break_point([TOOLS, SYSTEM, M0, M1], [TOOLS, SYSTEM]) == Break(
        2, "message 0", 4_200, M0, None
    )


def test_a_segments_diff_is_its_changed_lines_only():
    before = "one\ntwo\nthree\nfour\nfive"
    after = "one\nTWO\nthree\nfour\nFIVE"
    assert segment_diff(before, after) == ("-two", "+TWO", "-five", "+FIVE")
    assert segment_diff("a", "a") == ()
    many = "\n".join(str(i) for i in range(20))
    assert segment_diff(many, "") == tuple(f"-{i}" for i in range(12))
    assert segment_diff(many, "", limit=3) == ("-0", "-1", "-2")


# --- the evidence of each cause ----------------------------------------------------------------


def test_a_model_switch_names_both_models():
    miss = one([PREVIOUS, call(1, T1, uncached_input=53_000, model="n")])
    assert miss.cause == "model_switch"
    assert miss.evidence == "model switched from m to n: caches are per model"
    assert miss.detail == {"from_model": "m", "to_model": "n"}


def test_our_compaction_without_versions_is_named_by_its_run():
    run = SurfaceChange(run_id=7, at=T0 + timedelta(seconds=30), mode="auto", action="")
    miss = one([PREVIOUS, CURRENT], surface_changes=[run])
    assert miss.cause == "our_compaction"
    assert miss.evidence == "our auto compaction (run 7) changed the surface"
    assert miss.detail == {"run_id": 7, "mode": "auto", "action": ""}
    half = SurfaceChange(7, T0 + timedelta(seconds=30), "auto", "summary", None, 4)
    assert one([PREVIOUS, CURRENT], surface_changes=[half]).evidence == (
        "our auto summary (run 7) changed the surface"
    )
    full = SurfaceChange(7, T0 + timedelta(seconds=30), "auto", "summary", 3, 4)
    assert one([PREVIOUS, CURRENT], surface_changes=[full]).evidence == (
        "our auto summary (run 7) changed the surface (surface v3 → v4)"
    )


@pytest.mark.parametrize(
    ("before", "after", "ours"),
    [
        (3, 4, True),  # exactly the two calls' versions
        (2, 4, False),  # started before the previous call's surface
        (3, 5, False),  # ended after the current call's surface
        (4, 4, True),
        (3, 3, True),
    ],
)
def test_a_run_is_ours_when_its_versions_lie_between_the_calls(before, after, ours):
    # its time is outside the calls: only the versions decide
    run = SurfaceChange(9, T0 - timedelta(hours=1), "auto", "trim", before, after)
    miss = one([PREVIOUS, CURRENT], surface_changes=[run])
    assert (miss.cause == "our_compaction") is ours


@pytest.mark.parametrize(("seconds", "ours"), [(0, False), (1, True), (60, True), (61, False)])
def test_without_versions_a_run_is_ours_after_the_previous_call_and_up_to_the_current(
    seconds, ours
):
    run = SurfaceChange(9, T0 + timedelta(seconds=seconds), "auto", "trim", None, 4)
    miss = one([PREVIOUS, CURRENT], surface_changes=[run])
    assert (miss.cause == "our_compaction") is ours


def test_a_run_without_a_version_before_is_placed_by_time_even_when_the_calls_have_versions():
    run = SurfaceChange(9, T0 - timedelta(hours=1), "auto", "trim", None, 4)
    assert one([PREVIOUS, CURRENT], surface_changes=[run]).cause == "unexplained"


def _event(**kw: Any) -> ContextChange:
    values: dict[str, Any] = {
        "event_id": 5,
        "at": T0 - timedelta(hours=1),
        "origin": "agent",
        "kind": "auto_compact",
    }
    return ContextChange(**(values | kw))


@pytest.mark.parametrize(
    ("key", "theirs"), [((0, 0), True), ((1, 0), True), ((2, 0), False), ((0, 1), False)]
)
def test_an_event_tied_to_a_call_counts_for_that_call_whatever_its_time(key, theirs):
    miss = one([PREVIOUS, CURRENT], context_changes=[_event(call=key)])
    assert (miss.cause == "agent_compaction") is theirs


@pytest.mark.parametrize(("seconds", "theirs"), [(0, False), (1, True), (60, True), (61, False)])
def test_an_untied_event_counts_after_the_previous_call_and_up_to_the_current(seconds, theirs):
    event = _event(at=T0 + timedelta(seconds=seconds))
    miss = one([PREVIOUS, CURRENT], context_changes=[event])
    assert (miss.cause == "agent_compaction") is theirs


def test_an_agents_compaction_is_told_with_its_trigger_source_and_sizes():
    event = _event(
        call=(1, 0),
        trigger="auto",
        source="hook",
        tokens_before=180_000,
        tokens_after=20_000,
    )
    miss = one([PREVIOUS, CURRENT], context_changes=[event])
    assert miss.evidence == (
        "the agent auto compact (auto), reported via hook, 180,000 → 20,000 tokens"
    )
    assert miss.detail == {"event_id": 5, "origin": "agent", "kind": "auto_compact"}
    bare = one([PREVIOUS, CURRENT], context_changes=[_event(call=(1, 0), tokens_before=9)])
    assert bare.evidence == "the agent auto compact, reported"


# --- a prefix break's evidence -----------------------------------------------------------------


def _broken(before: tuple[Segment, ...], after: tuple[Segment, ...], read: int = 0) -> Any:
    previous = call(0, cache_read=50_000, cache_write_5m=2_000, prefix=before)
    current = call(1, T1, uncached_input=53_000 - read, cache_read=read, prefix=after)
    return one([previous, current])


def test_a_break_says_where_and_how_many_tokens_were_re_sent():
    changed = Segment("message 0", "other", 10_000)
    miss = _broken((TOOLS, SYSTEM, M0), (TOOLS, SYSTEM, changed), read=2_000)
    assert miss.cause == "prefix_break"
    # 53,000 sent − 4,200 before the break − 2,000 read
    assert miss.evidence == (
        "the prefix changed at message 0 (~4,200 tokens in); ~46,800 tokens from there were re-sent"
    )
    assert miss.detail == {"segment": "message 0", "tokens_before": 4_200}


def test_a_changed_system_text_shows_its_diff_and_the_hint_only_when_volatile():
    dated = Segment("system", "s2", 1_200, "You are careful.\nNow: 2026-11-30 12:01")
    miss = _broken((TOOLS, SYSTEM), (TOOLS, dated))
    assert miss.evidence == (
        "the prefix changed at system (~3,000 tokens in); ~50,000 tokens from there were "
        f"re-sent: +Now: 2026-11-30 12:01 — {D2_HINT}"
    )
    assert miss.detail["diff"] == ["+Now: 2026-11-30 12:01"]
    steady = Segment("system", "s3", 1_200, "You are very careful.")
    assert _broken((TOOLS, SYSTEM), (TOOLS, steady)).evidence == (
        "the prefix changed at system (~3,000 tokens in); ~50,000 tokens from there were "
        "re-sent: -You are careful. / +You are very careful."
    )


def test_a_volatile_change_outside_the_system_block_gets_no_hint():
    old = Segment("message 0", "a", 10_000, "at 12:00")
    new = Segment("message 0", "b", 10_000, "at 12:01")
    assert _broken((SYSTEM, old), (SYSTEM, new)).evidence == (
        "the prefix changed at message 0 (~1,200 tokens in); ~51,800 tokens from there were "
        "re-sent: -at 12:00 / +at 12:01"
    )


def test_only_the_first_four_changed_lines_are_quoted():
    old = Segment("message 0", "a", 10_000, "1\n2\n3")
    new = Segment("message 0", "b", 10_000, "x\ny\nz")
    miss = _broken((SYSTEM, old), (SYSTEM, new))
    assert miss.evidence.endswith("re-sent: -1 / -2 / -3 / +x")
    assert miss.detail["diff"] == ["-1", "-2", "-3", "+x", "+y", "+z"]


def test_without_both_texts_the_system_block_still_gets_the_hint_and_others_nothing():
    unknown = Segment("system", "s2", 1_200)
    assert _broken((TOOLS, SYSTEM), (TOOLS, unknown)).evidence == (
        "the prefix changed at system (~3,000 tokens in); ~50,000 tokens from there were "
        f"re-sent — {D2_HINT}"
    )
    bare = Segment("message 0", "other", 10_000)
    miss = _broken((TOOLS, SYSTEM, M0), (TOOLS, SYSTEM, bare))
    assert miss.evidence.endswith("~48,800 tokens from there were re-sent")
    assert "diff" not in miss.detail
    lost = _broken((TOOLS, SYSTEM, M0), (TOOLS,))
    assert lost.evidence == (
        "the prefix changed at system (~3,000 tokens in); ~50,000 tokens from there were "
        f"re-sent — {D2_HINT}"
    )


def test_a_break_past_what_was_read_back_re_sends_nothing_below_zero():
    changed = Segment("message 1", "other", 20_000)
    miss = _broken((TOOLS, SYSTEM, M0, M1), (TOOLS, SYSTEM, M0, changed), read=40_000)
    assert "~0 tokens from there were re-sent" in miss.evidence


# --- the premium's rates -----------------------------------------------------------------------


def _price(model: str, input: str, threshold: int | None = None) -> ModelPrice:
    rate = D(input)
    return ModelPrice(
        model=model,
        provider="anthropic",
        family=model,
        window_tokens=1_000_000,
        input=rate,
        output=rate,
        cache_read=D(0),
        cache_write_5m=None,
        cache_write_1h=None,
        long_context_threshold=threshold,
        long_context=None if threshold is None else Rates(rate * 10, rate, D(0), None, None),
    )


def test_each_miss_is_priced_at_its_own_models_rates_and_tier():
    prices: dict[str, ModelPrice | None] = {
        "a": _price("a", "1", threshold=100_000),
        "b": _price("b", "2"),
    }
    # each call writes its whole prompt; the next reads none of it back
    calls = [
        call(0, cache_write_5m=60_000, model="a"),
        call(1, T1, cache_write_5m=60_000, model="a"),  # 60,000 missed below a's threshold
        call(2, T1 + timedelta(minutes=1), cache_write_5m=160_000, model="a"),  # above it
        call(3, T1 + timedelta(minutes=2), cache_write_5m=170_000, model="b"),
    ]
    by_turn = {m.turn: m.premium_usd for m in classify(calls, prices=prices)}
    assert by_turn == {1: D("0.06"), 2: D("0.6"), 3: D("0.32")}


# --- the unexplained, and the classifier's own bounds --------------------------------------------


def test_without_fingerprints_an_unexplained_miss_gives_the_gap_and_tier():
    miss = one([PREVIOUS, CURRENT])
    assert (miss.cause, miss.model, miss.read_tokens) == ("unexplained", "m", 0)
    assert (miss.expected_tokens, miss.missed_tokens) == (52_000, 52_000)
    assert miss.evidence == (
        "same model, 1m 00s gap within the 5-minute tier, no compaction; "
        "no prefix fingerprints: eviction, or a volatile prefix we cannot see"
    )
    assert miss.detail == {"gap_seconds": 60, "tier": "5m"}


def test_a_break_at_or_past_the_cached_length_is_eviction():
    head = Segment("head", "h", 52_000)
    tail = Segment("tail", "t", 1_000)
    changed = Segment("tail", "other", 1_000)
    previous = call(0, cache_read=50_000, cache_write_5m=2_000, prefix=(head, tail))
    current = call(1, T1, uncached_input=53_000, prefix=(head, changed))
    miss = one([previous, current])
    assert miss.cause == "unexplained"
    assert miss.evidence == (
        "the prefix fingerprints match up to the cached length: evicted by the provider"
    )
    assert miss.detail == {"fingerprints": "match"}


def test_an_event_with_only_its_size_after_states_no_sizes():
    event = _event(call=(1, 0), tokens_after=9)
    assert one([PREVIOUS, CURRENT], context_changes=[event]).evidence == (
        "the agent auto compact, reported"
    )


def test_a_one_token_1h_write_makes_the_prefix_last_an_hour():
    previous = call(0, cache_read=50_000, cache_write_1h=1)
    current = call(1, T0 + timedelta(minutes=23), uncached_input=50_001)
    miss = one([previous, current])
    assert (miss.cause, miss.detail["tier"]) == ("unexplained", "1h")


def test_a_one_token_5m_write_after_a_1h_write_makes_the_prefix_last_5_minutes():
    calls = [
        call(0, cache_write_1h=50_000),
        call(1, T1, cache_read=50_000, cache_write_5m=1),
        call(2, T1 + timedelta(minutes=23), uncached_input=50_001),
    ]
    miss = one(calls)
    assert (miss.turn, miss.cause, miss.detail) == (
        2,
        "expiry",
        {"gap_seconds": 1380, "tier": "5m"},
    )


def test_a_write_names_its_tier_even_on_a_provider_that_caches_on_its_own():
    previous = call(0, cache_read=50_000, cache_write_5m=2_000, automatic=True)
    miss = one([previous, call(1, T0 + timedelta(minutes=23), uncached_input=60_000)])
    assert miss.detail == {"gap_seconds": 1380, "tier": "5m"}
    assert "exceeds the 5-minute tier" in miss.evidence


def test_a_pair_with_a_call_that_reported_no_cache_is_skipped_not_the_rest():
    silent = call(1, T1, uncached_input=53_000, cache_read=50_000, reported_cache=False)
    calls = [
        PREVIOUS,
        silent,
        call(2, T1 + timedelta(minutes=1), uncached_input=53_000),
    ]
    assert [
        m.turn for m in classify(calls, prices={})
    ] == []  # silent expects and is expected nothing
    later = [*calls, call(3, T1 + timedelta(minutes=2), cache_write_5m=60_000),
             call(4, T1 + timedelta(minutes=3), uncached_input=60_000)]  # fmt: skip
    assert [m.turn for m in classify(later, prices={})] == [4]


def test_a_pair_without_a_miss_is_skipped_not_the_rest():
    calls = [
        PREVIOUS,
        call(1, T1, cache_read=52_000, uncached_input=1_000),
        call(2, T1 + timedelta(minutes=1), uncached_input=53_000),
    ]
    assert [m.turn for m in classify(calls, prices={})] == [2]


@pytest.mark.parametrize(
    ("expected", "read", "is_miss"),
    [
        (10_000, 8_976, True),  # 1,024 missed, over 5 %
        (10_000, 8_977, False),
        (100_000, 95_000, True),  # exactly 5 %, over 1,024
        (100_000, 95_001, False),
    ],
)
def test_a_miss_needs_1024_tokens_and_5_percent_each_counted_inclusively(expected, read, is_miss):
    previous = call(0, cache_write_5m=expected)
    current = call(1, T1, cache_read=read, uncached_input=expected - read)
    assert len(classify([previous, current], prices={})) == (1 if is_miss else 0)


def test_a_prefix_only_read_back_falls_to_the_5m_tier_unless_cached_automatically():
    read_only = call(0, cache_read=52_000)
    assert one([read_only, CURRENT]).detail == {"gap_seconds": 60, "tier": "5m"}
    automatic = call(0, uncached_input=2_000, cache_read=50_000, automatic=True)
    assert one([automatic, CURRENT]).detail == {"gap_seconds": 60, "tier": "auto"}
