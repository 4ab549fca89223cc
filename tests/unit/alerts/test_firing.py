"""The pure alerting rules: conditions, fire/resolve/cooldown decisions, signatures, backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alerts.firing import (
    METRICS,
    RuleError,
    SubjectState,
    body_bytes,
    check_rule,
    decide,
    holds,
    median_ratio,
    retry_delay,
    signature,
    verify,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rule(**overrides: Any) -> Any:
    values: dict[str, Any] = {
        "metric": "session_cost",
        "threshold": Decimal(1),
        "window_minutes": 60,
        "cooldown_minutes": 30,
        "channel": "webhook",
    }
    values.update(overrides)
    return check_rule(**values)


def test_a_known_rule_is_accepted_and_names_its_metric():
    assert rule().name == "session_cost"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"metric": "cpu_temperature"}, "metric"),
        ({"threshold": Decimal(-1)}, "threshold"),
        ({"threshold": Decimal("NaN")}, "threshold"),
        ({"window_minutes": -1}, "window_minutes"),
        ({"metric": "overflow_reported", "window_minutes": 0}, "window_minutes"),
        ({"cooldown_minutes": -5}, "cooldown_minutes"),
        ({"channel": "pager"}, "channel"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field(overrides, field):
    with pytest.raises(RuleError) as refused:
        rule(**overrides)
    assert refused.value.field == field


def test_the_threshold_is_inclusive_and_an_unknown_value_never_fires():
    assert holds(Decimal(1), Decimal(1))
    assert not holds(Decimal("0.999999"), Decimal(1))
    assert holds(Decimal("1.000001"), Decimal(1))
    assert not holds(None, Decimal(0))


def test_every_metric_has_a_scope_a_unit_and_a_description():
    for name, metric in METRICS.items():
        assert metric.name == name
        assert metric.scope in ("session", "profile", "key")
        assert metric.unit and metric.description
        # only per-session conditions can be evaluated right after ingest
        assert not metric.on_ingest or metric.scope == "session"


states = st.builds(
    SubjectState,
    open=st.booleans(),
    last_fired_at=st.none() | st.integers(0, 10_000).map(lambda m: T0 + timedelta(minutes=m)),
)


@given(
    state=states, firing=st.booleans(), minutes=st.integers(0, 20_000), cooldown=st.integers(0, 600)
)
def test_decide_fires_only_when_closed_and_cooled_and_resolves_only_when_open(
    state, firing, minutes, cooldown
):
    now = T0 + timedelta(minutes=minutes)
    action = decide(state, firing=firing, now=now, cooldown=timedelta(minutes=cooldown))
    if action == "fire":
        assert firing and not state.open
        assert state.last_fired_at is None or now - state.last_fired_at >= timedelta(
            minutes=cooldown
        )
    elif action == "resolve":
        assert state.open and not firing
    else:
        assert (firing == state.open) or (
            firing
            and state.last_fired_at is not None
            and now - state.last_fired_at < timedelta(minutes=cooldown)
        )


@given(state=states, firing=st.booleans(), minutes=st.integers(0, 20_000))
def test_deciding_again_after_acting_does_nothing(state, firing, minutes):
    """One notification per firing, one per resolve: the state after the action is stable."""
    now = T0 + timedelta(minutes=minutes)
    action = decide(state, firing=firing, now=now, cooldown=timedelta(minutes=30))
    if action == "fire":
        after = SubjectState(open=True, last_fired_at=now)
    elif action == "resolve":
        after = SubjectState(open=False, last_fired_at=state.last_fired_at)
    else:
        after = state
    assert decide(after, firing=firing, now=now, cooldown=timedelta(minutes=30)) == "none"


def test_cooldown_holds_back_a_refiring_until_it_has_passed():
    fired = SubjectState(open=False, last_fired_at=T0)
    cooldown = timedelta(minutes=30)
    assert decide(fired, firing=True, now=T0 + timedelta(minutes=29), cooldown=cooldown) == "none"
    assert decide(fired, firing=True, now=T0 + timedelta(minutes=30), cooldown=cooldown) == "fire"


def test_the_median_ratio_compares_with_the_trailing_median():
    assert median_ratio(Decimal(4), [Decimal(1), Decimal(2), Decimal(100)]) == Decimal(2)
    assert median_ratio(Decimal(3), [Decimal(1), Decimal(2)]) == Decimal(2)
    assert median_ratio(Decimal(3), []) == 0
    assert median_ratio(Decimal(3), [Decimal(0)]) == 0


@given(payload=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=10)))
def test_a_signed_body_verifies_and_a_changed_one_does_not(payload):
    body = body_bytes(payload)
    header = signature("s3cret", body)
    assert header.startswith("sha256=")
    assert verify("s3cret", body, header)
    assert not verify("other", body, header)
    assert not verify("s3cret", body + b" ", header)


def test_backoff_doubles_and_is_capped():
    delays = [retry_delay(n, base_seconds=30, cap_seconds=300) for n in range(1, 7)]
    assert delays == [30, 60, 120, 240, 300, 300]
    with pytest.raises(ValueError):
        retry_delay(0, base_seconds=1, cap_seconds=1)
