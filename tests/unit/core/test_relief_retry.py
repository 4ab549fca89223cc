"""The retry rule for failed automatic relief (`context_core.relief_retry`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import retry_backoff_seconds, retry_decision, retry_wait_seconds

failures = st.integers(min_value=1, max_value=40)
bases = st.integers(min_value=1, max_value=3_600)
caps = st.integers(min_value=1, max_value=40)


def test_the_backoff_doubles_from_the_base():
    assert [retry_backoff_seconds(n, base_seconds=60) for n in (1, 2, 3, 4)] == [60, 120, 240, 480]


@given(failures, bases)
def test_the_backoff_strictly_grows_with_each_failure(n, base):
    assert retry_backoff_seconds(n + 1, base_seconds=base) > retry_backoff_seconds(
        n, base_seconds=base
    )


@given(failures, bases, caps, st.floats(min_value=0, max_value=1e12))
def test_at_the_cap_the_rule_gives_up_whatever_the_time(n, base, cap, elapsed):
    decision = retry_decision(n, elapsed_seconds=elapsed, base_seconds=base, max_attempts=cap)
    assert (decision == "give_up") == (n >= cap)


@given(failures, bases, caps)
def test_below_the_cap_it_retries_exactly_when_the_backoff_has_passed(n, base, cap):
    if n >= cap:
        return
    backoff = retry_backoff_seconds(n, base_seconds=base)
    rule = {"base_seconds": base, "max_attempts": cap}
    assert retry_decision(n, elapsed_seconds=backoff - 1, **rule) == "wait"
    assert retry_decision(n, elapsed_seconds=backoff, **rule) == "retry"
    assert retry_decision(n, elapsed_seconds=backoff + 1, **rule) == "retry"


@pytest.mark.parametrize(("n", "base", "cap"), [(0, 60, 5), (-1, 60, 5), (1, 0, 5), (1, 60, 0)])
def test_a_rule_without_a_failure_a_base_or_a_cap_refuses(n, base, cap):
    with pytest.raises(ValueError):
        retry_decision(n, elapsed_seconds=0, base_seconds=base, max_attempts=cap)


@given(failures, bases, caps, st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_the_wait_is_zero_exactly_when_the_rule_retries_and_none_when_it_gives_up(
    n, base, cap, elapsed
):
    rule = {"elapsed_seconds": elapsed, "base_seconds": base, "max_attempts": cap}
    wait = retry_wait_seconds(n, **rule)
    decision = retry_decision(n, **rule)
    assert (wait is None) == (decision == "give_up")
    assert (wait == 0) == (decision == "retry")
    if wait is not None and wait > 0:
        # waiting that long more (give or take float rounding) makes the rule retry, not less
        assert retry_decision(n, **(rule | {"elapsed_seconds": elapsed + wait + 1e-3})) == "retry"
        assert retry_decision(n, **(rule | {"elapsed_seconds": elapsed + wait / 2})) == "wait"


def test_the_wait_counts_down_the_backoff():
    rule = {"base_seconds": 60, "max_attempts": 5}
    assert retry_wait_seconds(2, elapsed_seconds=20, **rule) == 100
    assert retry_wait_seconds(2, elapsed_seconds=500, **rule) == 0
    assert retry_wait_seconds(5, elapsed_seconds=0, **rule) is None
