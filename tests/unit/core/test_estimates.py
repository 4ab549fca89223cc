"""Post-compaction estimates: the least-squares fit and the fallback rule (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core.estimates import (
    estimate_error,
    fit_surface,
    post_compaction_estimate,
    tokens_per_char,
)


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


def test_golden_the_post_compaction_estimate_is_within_15_percent_where_the_old_rule_is_2x_off():
    points = synthetic(18_000, 0.4, [40_000, 90_000, 150_000, 220_000, 300_000, 380_000], 0.01)
    before_chars, after_chars = 380_000, 45_000
    measured_before = 18_000 + round(0.4 * before_chars)  # 170,000
    truth = 18_000 + round(0.4 * after_chars)  # 36,000
    rule = post_compaction_estimate(
        fit_surface(points[:2]),  # too few calls: today's rule
        chars_after=after_chars,
        tokens_before=measured_before,
        freed_chars=before_chars - after_chars,
    )
    assert (rule.method, rule.tokens) == ("rule", 170_000 - 335_000 // 4)  # 86,250
    assert rule.tokens / truth > 2
    fitted = post_compaction_estimate(
        fit_surface(points),
        chars_after=after_chars,
        tokens_before=measured_before,
        freed_chars=before_chars - after_chars,
    )
    assert fitted.method == "fit"
    error = estimate_error(fitted.tokens, truth)
    assert error is not None and abs(error) <= 0.15


def test_too_few_calls_or_no_spread_fall_back_to_the_rule():
    assert not fit_surface([(1_000, 500)] * 3).fitted
    assert not fit_surface([(1_000, 500)] * 8).fitted
    assert tokens_per_char(fit_surface([])) == 0.25


def test_the_rule_never_goes_negative_and_errors_are_signed():
    rule = post_compaction_estimate(
        fit_surface([]), chars_after=0, tokens_before=10, freed_chars=1_000
    )
    assert rule.tokens == 0
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
    estimate = post_compaction_estimate(fit, chars_after=chars, tokens_before=0, freed_chars=0)
    assert estimate.tokens == pytest.approx(overhead + ratio * chars, rel=0.05, abs=50)
