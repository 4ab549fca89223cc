"""D6 estimates (pure): the surface fit, tokens per character by kind, the post-compaction
estimate and the overhead a compaction removes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import parse_anthropic, parse_openai
from context_core.estimates import (
    MIN_RATE_STEPS,
    SANE_RATE,
    KindChars,
    TokenRates,
    appended_after_reply,
    drops_head,
    estimate_error,
    fit_surface,
    fit_token_rates,
    kind_chars,
    message_kind_chars,
    overhead_removed,
    post_compaction_estimate,
    step_tokens,
    tokens_per_char,
)
from context_core.tokens import estimate_tokens


def synthetic(
    overhead: int, ratio: float, sizes: list[int], wobble: float = 0.0
) -> list[tuple[int, int]]:
    """Calls whose measured context is overhead + ratio × surface chars, ± a deterministic
    wobble (alternating sign) standing for tokenizer noise."""
    return [
        (chars, round((overhead + ratio * chars) * (1 + (wobble if i % 2 else -wobble))))
        for i, chars in enumerate(sizes)
    ]


def test_golden_the_fit_recovers_a_known_overhead_and_ratio_within_5_percent():
    # 18,000 tokens of system prompt and tools; code-heavy text at 2.5 chars per token.
    points = synthetic(18_000, 0.4, [40_000, 90_000, 150_000, 220_000, 300_000, 380_000], 0.01)
    fit = fit_surface(points)
    assert fit.fitted
    assert fit.overhead == pytest.approx(18_000, rel=0.05)
    assert tokens_per_char(fit) == pytest.approx(0.4, rel=0.05)


def test_too_few_calls_or_no_spread_fall_back_to_the_rule():
    assert not fit_surface([(1_000, 500)] * 3).fitted
    assert not fit_surface([(1_000, 500)] * 8).fitted
    assert tokens_per_char(fit_surface([])) == 0.25


def test_errors_are_signed():
    assert estimate_error(110, 100) == pytest.approx(0.10)
    assert estimate_error(90, 100) == pytest.approx(-0.10)
    assert estimate_error(5, 0) is None


@given(
    overhead=st.integers(0, 60_000),
    ratio=st.floats(0.15, 0.45),
    sizes=st.lists(st.integers(5_000, 800_000), min_size=4, max_size=40, unique=True),
)
def test_any_exact_affine_session_is_recovered(overhead, ratio, sizes):
    sizes = sorted(sizes)
    if sizes[-1] - sizes[0] < 20_000:
        return  # no spread: nothing to fit on
    fit = fit_surface(synthetic(overhead, ratio, sizes))
    assert fit.fitted
    assert tokens_per_char(fit) == pytest.approx(ratio, rel=0.05)
    assert fit.overhead == pytest.approx(overhead, abs=max(0.05 * overhead, 50))
    # and the estimate of any new surface is then within 5 % of the truth
    chars = sizes[0] // 2
    assert fit.estimate(chars) == pytest.approx(overhead + ratio * chars, rel=0.05, abs=50)


# --- characters by kind ------------------------------------------------------------------------

ANTHROPIC = [
    {"seq": 1, "role": "user", "content": "Why does the build fail?"},
    {
        "seq": 2,
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}},
        ],
    },
    {
        "seq": 3,
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "error: missing dep"},
            {"type": "text", "text": "and?"},
        ],
    },
]
OPENAI = [
    {"seq": 1, "role": "user", "content": "fix the tests"},
    {
        "seq": 2,
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        ],
    },
    {"seq": 3, "role": "tool", "tool_call_id": "c1", "content": "1 failed"},
]


def test_tool_results_are_the_tool_kind_and_everything_else_prose():
    prompt, call, results = parse_anthropic(ANTHROPIC)
    assert message_kind_chars(prompt) == KindChars(0, prompt.chars)
    assert message_kind_chars(call) == KindChars(0, call.chars)
    assert message_kind_chars(results) == KindChars(len("error: missing dep"), len("and?"))
    _, _, tool = parse_openai(OPENAI)
    assert message_kind_chars(tool) == KindChars(len("1 failed"), 0)
    both = kind_chars(parse_anthropic(ANTHROPIC))
    assert both.total == sum(m.chars for m in parse_anthropic(ANTHROPIC))


@given(st.lists(st.text(max_size=40), min_size=1, max_size=6), st.booleans())
def test_the_kinds_always_sum_to_the_message_chars(texts, openai):
    if openai:
        items = [{"seq": 1, "role": "user", "content": texts[0]}]
        items.append(
            {
                "seq": 2,
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                    for i in range(len(texts))
                ],
            }
        )
        items += [
            {"seq": 3 + i, "role": "tool", "tool_call_id": f"c{i}", "content": text}
            for i, text in enumerate(texts)
        ]
        parsed = parse_openai(items)
    else:
        calls = [
            {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}} for i in range(len(texts))
        ]
        results = [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": text}
            for i, text in enumerate(texts)
        ]
        parsed = parse_anthropic(
            [
                {"seq": 1, "role": "user", "content": texts[0] or "go"},
                {"seq": 2, "role": "assistant", "content": calls},
                {"seq": 3, "role": "user", "content": [*results, {"type": "text", "text": "ok"}]},
            ]
        )
    for message in parsed:
        chars = message_kind_chars(message)
        assert chars.tool >= 0 and chars.prose >= 0 and chars.total == message.chars
    assert kind_chars(parsed).tool == sum(len(t) for t in texts)


def test_what_a_request_adds_is_everything_after_the_reply():
    rows = [("assistant", 50, None), ("user", 1_000, 900), ("user", 30, None)]
    assert appended_after_reply(rows) == KindChars(900, 130)
    # the rows start at the request's log length: nothing before the reply counts
    assert appended_after_reply([("user", 7, 7), *rows]) == KindChars(900, 130)
    assert appended_after_reply([("user", 7, 7)]) == KindChars()  # no reply yet
    assert appended_after_reply([("assistant", 5, None), ("user", 10, 99)]) == KindChars(10, 0)


# --- learned rates -----------------------------------------------------------------------------


def steps_for(tool_rate: float, prose_rate: float, mixes: list[tuple[int, int]]):
    return [(KindChars(t, p), round(tool_rate * t + prose_rate * p)) for t, p in mixes]


@given(
    tool_rate=st.floats(0.2, 0.5),
    prose_rate=st.floats(0.15, 0.35),
    mixes=st.lists(
        st.tuples(st.integers(2_000, 60_000), st.integers(0, 4_000)), min_size=3, max_size=30
    ),
)
def test_two_rates_are_recovered_when_the_steps_mix_the_kinds_differently(
    tool_rate, prose_rate, mixes
):
    mixes = [*mixes, (0, 3_000), (40_000, 0)]  # one step of each kind alone: never collinear
    rates = fit_token_rates(steps_for(tool_rate, prose_rate, mixes))
    assert rates.fitted and rates.reason == "two rates"
    assert rates.tool == pytest.approx(tool_rate, rel=0.01)
    assert rates.prose == pytest.approx(prose_rate, rel=0.05)


def test_one_kind_learns_its_rate_and_the_other_keeps_a_quarter():
    rates = fit_token_rates(steps_for(1 / 3, 0, [(30_000, 0), (12_000, 0), (3_000, 0)]))
    assert (rates.reason, rates.prose) == ("tool results only", 0.25)
    assert rates.tool == pytest.approx(1 / 3, rel=1e-3)
    assert rates.tokens(KindChars(3_000, 400)) == 1_000 + 100
    rates = fit_token_rates(steps_for(0, 0.3, [(0, 1_000), (0, 2_000), (0, 500)]))
    assert (rates.reason, rates.tool) == ("prose only", 0.25)


def test_kinds_mixed_alike_in_every_step_share_one_rate():
    rates = fit_token_rates(steps_for(0.3, 0.3, [(10_000, 1_000), (20_000, 2_000), (5_000, 500)]))
    assert rates.reason == "one rate" and rates.tool == rates.prose == pytest.approx(0.3, rel=1e-3)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=8))
def test_unfitted_rates_are_chars_over_four_exactly(mixes):
    rates = fit_token_rates([(KindChars(t, p), 0) for t, p in mixes])  # 0 tokens: never sane
    assert not rates.fitted
    for t, p in mixes:
        assert rates.tokens(KindChars(t, p)) == estimate_tokens(t + p)


def test_too_few_or_insane_steps_fall_back_and_say_why():
    few = fit_token_rates(steps_for(0.3, 0.25, [(1_000, 10)] * (MIN_RATE_STEPS - 1)))
    assert not few.fitted and "needed" in few.reason
    # a compaction between two calls makes a step negative: left out, not fitted on
    shrunk = [(KindChars(5_000, 0), -40_000)] * 5
    assert not fit_token_rates(shrunk).fitted
    assert SANE_RATE[0] > 0 and not fit_token_rates([(KindChars(10, 0), 100)] * 5).fitted


@given(
    context=st.integers(0, 10**7),
    output=st.integers(0, 10**5),
    reasoning=st.none() | st.integers(0, 10**5),
    appended=st.integers(0, 10**6),
)
def test_a_step_is_the_projection_read_backwards(context, output, reasoning, appended):
    from telemetry.pressure import projected_next_request

    if reasoning is not None and reasoning > output:
        reasoning = output
    projected = projected_next_request(
        context_tokens=context, output=output, reasoning_output=reasoning, appended_tokens=appended
    )
    assert (
        step_tokens(
            context_tokens=context,
            output=output,
            reasoning_output=reasoning,
            next_context_tokens=projected,
        )
        == appended
    )


# --- the post-compaction estimate --------------------------------------------------------------


def test_the_estimate_takes_what_left_and_adds_what_came_at_the_learned_rates():
    rates = TokenRates(1 / 3, 1 / 4, 10, True, "two rates")
    # 60,000 tool chars pruned to 3,000 of stubs; 8,000 prose chars summarized into 1,000
    estimate = post_compaction_estimate(
        rates,
        tokens_before=100_000,
        before=KindChars(70_000, 12_000),
        after=KindChars(13_000, 5_000),
    )
    assert (estimate.tokens, estimate.method) == (100_000 - 19_000 - 1_750, "fit")
    removed = post_compaction_estimate(
        rates,
        tokens_before=100_000,
        before=KindChars(70_000, 12_000),
        after=KindChars(13_000, 5_000),
        removed_overhead=9_000,
    )
    assert removed.tokens == estimate.tokens - 9_000


def test_without_rates_the_estimate_is_the_net_chars_over_four():
    rule = post_compaction_estimate(
        TokenRates(),
        tokens_before=170_000,
        before=KindChars(300_000, 80_000),
        after=KindChars(40_000, 5_000),
    )
    assert (rule.tokens, rule.method) == (170_000 - 335_000 // 4, "rule")
    zero = post_compaction_estimate(
        TokenRates(), tokens_before=10, before=KindChars(1_000, 0), after=KindChars()
    )
    assert zero.tokens == 0


@given(
    tokens=st.integers(0, 10**7),
    before=st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)),
    after=st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)),
    overhead=st.integers(-(10**5), 10**6),
    fitted=st.booleans(),
    tool=st.floats(0.1, 1.5),
    prose=st.floats(0.1, 1.5),
)
def test_the_estimate_is_never_negative_and_never_grows_when_nothing_grew(
    tokens, before, after, overhead, fitted, tool, prose
):
    rates = TokenRates(tool, prose, 5, True, "two rates") if fitted else TokenRates()
    b, a = KindChars(*before), KindChars(*after)
    estimate = post_compaction_estimate(
        rates, tokens_before=tokens, before=b, after=a, removed_overhead=overhead
    )
    assert estimate.tokens >= 0
    assert estimate.method == ("fit" if fitted else "rule")
    if a.tool <= b.tool and a.prose <= b.prose:
        assert estimate.tokens <= tokens
    if a == b and overhead <= 0:
        assert estimate.tokens == tokens


def test_only_a_compaction_that_drops_the_first_conversation_message_drops_the_head():
    log = parse_anthropic(ANTHROPIC, system="You are terse.")
    assert not drops_head(log, log)
    assert not drops_head(log, [log[0], log[1]])  # the tail went, the head stayed
    assert drops_head(log, [log[0], log[2], log[3]])
    assert drops_head(log, [log[0]])
    assert not drops_head([log[0]], [])  # no conversation: nothing to drop


def test_the_overhead_removed_is_what_calls_after_a_head_drop_no_longer_carried():
    assert overhead_removed([23_000], [14_100, 13_900, 14_000]) == 9_000
    assert overhead_removed([14_000], [14_500]) == 0  # never negative
    assert overhead_removed([23_000], []) is None  # nothing known removed
    assert overhead_removed([], [14_000]) is None
