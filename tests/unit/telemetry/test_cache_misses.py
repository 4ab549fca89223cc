"""Cache-miss detection and causes (D1, D2): synthetic sessions with known causes, hand-computed
premiums, and properties (arrival order does not matter; never expiry within the tier)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from telemetry.cache_misses import (
    TIER_LIFE,
    CallObs,
    ContextChange,
    Segment,
    SurfaceChange,
    break_point,
    classify,
    is_miss,
    prefix_tier,
    premiums_by_cause,
    system_churn,
)
from telemetry.pricing import SEED_CATALOGUE, find_price

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SONNET = "claude-sonnet-4-5"
PRICES = {
    name: find_price(name, SEED_CATALOGUE)
    for name in (SONNET, "claude-haiku-4-5", "claude-sonnet-5-5", "gpt-5", "my-local-llm")
}


def obs(turn: int, *, call: int = 0, minutes: float = 0.0, model: str = SONNET, **kw) -> CallObs:
    values = {"uncached_input": 100, "cache_read": 0} | kw
    return CallObs(turn=turn, call=call, at=T0 + timedelta(minutes=minutes), model=model, **values)


def warm(turn: int, minutes: float, read: int = 50_000, **kw) -> CallObs:
    """A call that read `read` and wrote 2,000 new tokens (5-minute tier unless told)."""
    return obs(turn, minutes=minutes, cache_read=read, **({"cache_write_5m": 2_000} | kw))


def only(misses):
    assert len(misses) == 1, misses
    return misses[0]


def test_a_warm_session_has_no_miss():
    calls = [warm(0, 0, read=0), warm(1, 1, read=2_000), warm(2, 2, read=4_000)]
    assert classify(calls, prices=PRICES) == []


def test_the_floor_needs_both_1024_tokens_and_5_percent():
    assert not is_miss(100_000, 100_000 - 1_023)
    assert not is_miss(100_000, 100_000 - 4_999)  # 5 % of 100k is 5,000
    assert is_miss(100_000, 95_000)
    assert not is_miss(10_000, 9_000)  # 10 % but under 1,024 tokens
    assert is_miss(10_000, 8_976)


def test_model_switch_is_named_and_priced_at_the_new_models_write_rate():
    # Sonnet left 52,000 tokens cacheable; Haiku 4.5 (input $1) wrote them all at 1.25x.
    calls = [warm(0, 0), obs(1, minutes=1, model="claude-haiku-4-5", cache_write_5m=52_000)]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "model_switch"
    assert "claude-sonnet-4-5 to claude-haiku-4-5" in miss.evidence
    assert miss.expected_tokens == 52_000 and miss.missed_tokens == 52_000
    # 52,000 x (1.25 - 0.10) / 1e6
    assert miss.premium_usd == Decimal("0.0598")


def test_a_gap_beyond_the_5_minute_tier_is_expiry_with_the_gap_and_tier():
    calls = [warm(0, 0), obs(1, minutes=23, cache_write_5m=53_000)]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "expiry"
    assert "23m 00s" in miss.evidence and "5-minute tier" in miss.evidence
    assert miss.detail == {"gap_seconds": 23 * 60, "tier": "5m"}
    # Sonnet 4.5: 52,000 missed x ($3.75 - $0.30) / 1e6
    assert miss.premium_usd == Decimal("0.1794")


def test_the_same_gap_on_the_1_hour_tier_is_never_expiry():
    calls = [
        warm(0, 0, cache_write_5m=0, cache_write_1h=2_000),
        obs(1, minutes=23, cache_write_1h=53_000),
    ]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "unexplained"
    assert "within the 1-hour tier" in miss.evidence
    # 1-hour writes: 52,000 x ($6 - $0.30) / 1e6
    assert miss.premium_usd == Decimal("0.2964")
    beyond = [calls[0], obs(1, minutes=61, cache_write_1h=53_000)]
    assert only(classify(beyond, prices=PRICES)).cause == "expiry"


def test_our_compaction_between_the_calls_is_named_by_surface_version():
    calls = [
        warm(0, 0, surface_version=4),
        obs(1, minutes=1, cache_write_5m=30_000, cache_read=5_000, surface_version=6),
    ]
    run = SurfaceChange(
        run_id=7, at=T0, mode="auto", action="prune", version_before=5, version_after=6
    )
    miss = only(classify(calls, prices=PRICES, surface_changes=[run]))
    assert miss.cause == "our_compaction"
    assert "run 7" in miss.evidence and "v5 → v6" in miss.evidence
    # the request shrank to 35,100 tokens: it could read at most that, so 30,100 were missed
    assert miss.expected_tokens == 35_100 and miss.missed_tokens == 30_100


def test_an_agent_compaction_event_between_the_calls_is_named():
    calls = [warm(0, 0), obs(1, minutes=2, cache_write_5m=20_000)]
    event = ContextChange(
        event_id=3,
        at=T0 + timedelta(minutes=1),
        origin="agent",
        kind="compaction",
        source="claude-code",
        trigger="auto",
        tokens_before=52_000,
        tokens_after=20_000,
    )
    miss = only(classify(calls, prices=PRICES, context_changes=[event]))
    assert miss.cause == "agent_compaction"
    assert "agent compaction (auto)" in miss.evidence and "claude-code" in miss.evidence
    # an event outside the two calls explains nothing
    late = ContextChange(
        event_id=4, at=T0 + timedelta(minutes=5), origin="agent", kind="compaction"
    )
    assert only(classify(calls, prices=PRICES, context_changes=[late])).cause == "unexplained"


def prefix(system: str, *messages: str) -> tuple[Segment, ...]:
    segments = [Segment("tools", "t1", 3_000), Segment("system", str(hash(system)), 1_200, system)]
    segments += [Segment(f"message {i}", f"m{i}-{text}", 10_000) for i, text in enumerate(messages)]
    return tuple(segments)


def test_a_changed_system_block_is_a_prefix_break_with_a_readable_diff_and_the_d2_hint():
    before = prefix("You are careful.\nNow: 2026-11-30 12:00 UTC", "a", "b")
    after = prefix("You are careful.\nNow: 2026-11-30 12:01 UTC", "a", "b", "c")
    calls = [
        warm(0, 0, prefix=before),
        obs(1, minutes=1, cache_read=3_000, cache_write_5m=50_000, prefix=after),
    ]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "prefix_break"
    assert miss.detail["segment"] == "system" and miss.detail["tokens_before"] == 3_000
    assert miss.detail["diff"] == [
        "-Now: 2026-11-30 12:00 UTC",
        "+Now: 2026-11-30 12:01 UTC",
    ]
    assert "move it into the message stream (D2)" in miss.evidence


def test_a_break_at_message_k_is_named():
    calls = [
        warm(0, 0, prefix=prefix("s", "a", "b", "c")),
        obs(
            1,
            minutes=1,
            cache_read=24_000,
            cache_write_5m=30_000,
            prefix=prefix("s", "a", "B", "c"),
        ),
    ]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "prefix_break" and miss.detail["segment"] == "message 1"


def test_matching_fingerprints_leave_eviction_unexplained():
    same = prefix("s", "a")
    calls = [warm(0, 0, prefix=same), obs(1, minutes=1, cache_write_5m=53_000, prefix=same)]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "unexplained" and "evicted" in miss.evidence


def test_growth_at_the_end_is_not_a_break_and_tools_seen_on_one_side_only_are_ignored():
    assert break_point(prefix("s", "a"), prefix("s", "a", "b")) is None
    without_tools = prefix("s", "a")[1:]
    assert break_point(prefix("s", "a"), without_tools) is None
    lost = break_point(prefix("s", "a", "b"), prefix("s", "a"))
    assert lost is not None and lost.name == "message 1" and lost.after is None


def test_openai_automatic_cache_expects_the_whole_previous_prompt():
    # gpt-5: input $1.25, cached $0.125; no write surcharge, so missed tokens paid as input.
    calls = [
        obs(0, model="gpt-5", uncached_input=30_000, automatic=True),
        obs(1, minutes=1, model="gpt-5", uncached_input=31_000, automatic=True),
    ]
    miss = only(classify(calls, prices=PRICES))
    assert miss.expected_tokens == 30_000 and miss.cause == "unexplained"
    assert miss.premium_usd == Decimal("0.03375")  # 30,000 x 1.125 / 1e6
    assert "OpenAI automatic cache" in miss.evidence
    slow = [calls[0], obs(1, minutes=6, model="gpt-5", uncached_input=31_000, automatic=True)]
    assert only(classify(slow, prices=PRICES)).cause == "expiry"
    small = [obs(0, model="gpt-5", uncached_input=900, automatic=True), calls[1]]
    assert classify(small, prices=PRICES) == []


def test_per_model_read_rates_price_the_premium():
    # Sonnet 5.5 reads at $0.10 (not 0.1 x $2 = $0.20): 52,000 x ($2.50 - $0.10) / 1e6
    calls = [
        warm(0, 0, model="claude-sonnet-5-5"),
        obs(1, minutes=30, model="claude-sonnet-5-5", cache_write_5m=53_000),
    ]
    assert only(classify(calls, prices=PRICES)).premium_usd == Decimal("0.1248")


def test_an_unpriced_model_still_gets_a_cause():
    calls = [
        warm(0, 0, model="my-local-llm"),
        obs(1, minutes=30, model="my-local-llm", cache_write_5m=53_000),
    ]
    miss = only(classify(calls, prices=PRICES))
    assert miss.cause == "expiry" and miss.premium_usd is None


def test_calls_without_cache_figures_expect_nothing():
    calls = [warm(0, 0), obs(1, minutes=1, reported_cache=False)]
    assert classify(calls, prices=PRICES) == []


def test_system_churn_flags_d2():
    calls = [obs(t, minutes=t, prefix=prefix(f"now {t}", "a")) for t in range(5)]
    churn = system_churn(calls)
    assert (churn.pairs, churn.changed) == (4, 4) and churn.violates_d2
    steady = system_churn([obs(t, minutes=t, prefix=prefix("same", "a")) for t in range(5)])
    assert steady.changed == 0 and not steady.violates_d2
    assert not system_churn(calls[:3]).violates_d2  # two pairs are too few to judge


def test_premiums_add_up_by_cause():
    calls = [
        warm(0, 0),
        obs(1, minutes=23, cache_write_5m=53_000),
        obs(2, minutes=24, model="claude-haiku-4-5", cache_write_5m=53_000),
    ]
    totals = premiums_by_cause(classify(calls, prices=PRICES))
    assert totals["expiry"] == Decimal("0.1794") and totals["model_switch"] > 0
    assert totals["unexplained"] == 0


# --- properties -------------------------------------------------------------------------------

MODELS = (SONNET, "claude-haiku-4-5", "gpt-5")


@st.composite
def sessions(draw):
    n = draw(st.integers(min_value=0, max_value=25))
    calls, minutes = [], 0.0
    for turn in range(n):
        minutes += draw(st.sampled_from([0.1, 1, 4, 4.9, 5.1, 20, 59, 61, 90]))
        model = draw(st.sampled_from(MODELS))
        tier = draw(st.sampled_from(["5m", "1h"]))
        write = draw(st.integers(0, 60_000))
        calls.append(
            CallObs(
                turn=turn,
                call=draw(st.integers(0, 2)),
                at=T0 + timedelta(minutes=minutes),
                model=model,
                uncached_input=draw(st.integers(0, 40_000)),
                cache_read=draw(st.integers(0, 80_000)),
                cache_write_5m=write if tier == "5m" else 0,
                cache_write_1h=write if tier == "1h" else 0,
                automatic=model == "gpt-5",
                surface_version=draw(st.none() | st.integers(0, 5)),
                prefix=draw(st.none() | st.sampled_from([prefix("a", "x"), prefix("b", "x")])),
            )
        )
    runs = [
        SurfaceChange(
            run_id=i,
            at=T0 + timedelta(minutes=draw(st.floats(0, 300))),
            mode="auto",
            action="prune",
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    events = [
        ContextChange(
            event_id=i,
            at=T0 + timedelta(minutes=draw(st.floats(0, 300))),
            origin="agent",
            kind="compaction",
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    return calls, runs, events


@given(sessions(), st.randoms(use_true_random=False))
def test_classification_is_a_function_of_the_records_not_their_arrival_order(session, rng):
    calls, runs, events = session
    expected = classify(calls, prices=PRICES, surface_changes=runs, context_changes=events)
    shuffled = [list(x) for x in (calls, runs, events)]
    for items in shuffled:
        rng.shuffle(items)
    again = classify(
        shuffled[0], prices=PRICES, surface_changes=shuffled[1], context_changes=shuffled[2]
    )
    assert again == expected


@given(sessions())
def test_never_expiry_within_the_tier(session):
    calls, runs, events = session
    ordered_calls = sorted(calls, key=lambda c: (c.turn, c.call))
    for miss in classify(calls, prices=PRICES, surface_changes=runs, context_changes=events):
        index = next(
            i for i, c in enumerate(ordered_calls) if (c.turn, c.call) == (miss.turn, miss.call)
        )
        history = ordered_calls[:index]
        gap = miss.at - history[-1].at
        within = gap <= TIER_LIFE[prefix_tier(history)]
        if within:
            assert miss.cause != "expiry"
        elif history[-1].model == miss.model:
            assert miss.cause == "expiry"


@given(st.lists(st.sampled_from([0.5, 1, 2, 4.9, 5]), min_size=1, max_size=30))
def test_gaps_within_five_minutes_are_never_expiry(gaps):
    minutes, calls = 0.0, [warm(0, 0)]
    for turn, gap in enumerate(gaps, start=1):
        minutes += gap
        calls.append(
            obs(turn, minutes=minutes, cache_write_5m=random.Random(turn).randint(0, 60_000))
        )
    assert all(m.cause != "expiry" for m in classify(calls, prices=PRICES))


def test_ttl_advice_reads_the_measured_expiry_gaps():
    from telemetry.cache_misses import ttl_advice

    assert ttl_advice("5m", []) is None
    advice = ttl_advice(
        "5m", [(23 * 60, Decimal("0.10")), (40 * 60, Decimal("0.05")), (7200, None)]
    )
    assert advice is not None and advice.startswith("2 of 3 expiry misses") and "$0.1500" in advice
    assert "1 followed gaps over an hour" in advice
    assert "no tier keeps" in (ttl_advice("1h", [(7200, Decimal(1))]) or "")
