from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.policy_rules import DEFAULT_POLICY, default_policy_for, merge_policy, validate_policy


def test_defaults_are_valid():
    validate_policy(DEFAULT_POLICY)


def test_fleet_and_desktop_get_the_one_hour_tier_and_others_five_minutes():
    assert default_policy_for("fleet").cache_ttl == "1h"
    assert default_policy_for("desktop").cache_ttl == "1h"
    assert default_policy_for("default").cache_ttl == "5m"


def test_merge_ignores_none_and_refuses_unknown_fields():
    assert merge_policy(DEFAULT_POLICY, {"keep_rounds": None}) == DEFAULT_POLICY
    with pytest.raises(FieldError) as caught:
        merge_policy(DEFAULT_POLICY, {"keep_round": 3})
    assert caught.value.field == "keep_round"


@given(prune=st.floats(0.01, 1.0), summarize=st.floats(0.01, 1.0))
def test_summarize_below_prune_is_always_refused(prune, summarize):
    candidate = replace(DEFAULT_POLICY, prune_threshold=prune, summarize_threshold=summarize)
    if summarize < prune:
        with pytest.raises(FieldError) as caught:
            validate_policy(candidate)
        assert caught.value.field == "summarize_threshold"
    else:
        validate_policy(candidate)


def test_booleans_are_not_integers():
    with pytest.raises(FieldError) as caught:
        validate_policy(replace(DEFAULT_POLICY, keep_rounds=True))
    assert caught.value.field == "keep_rounds"


def test_relief_policy_defaults_are_the_policy_defaults():
    """core/src/context_core cannot import telemetry, so the planner's defaults are a copy: held equal."""
    from dataclasses import fields

    from context_core import ReliefPolicy
    from telemetry.policy_rules import DEFAULT_POLICY

    relief = ReliefPolicy()
    shared = {f.name for f in fields(ReliefPolicy)} & {f.name for f in fields(DEFAULT_POLICY)}
    assert "keep_rounds" in shared
    differing = {
        name: (getattr(relief, name), getattr(DEFAULT_POLICY, name))
        for name in shared
        if getattr(relief, name) != getattr(DEFAULT_POLICY, name)
        and not (
            name == "prune_exclude_tools"
            and set(getattr(relief, name)) == set(getattr(DEFAULT_POLICY, name))
        )
    }
    assert differing == {}


@pytest.mark.parametrize("value", [-0.01, 1.01, True, "0.1"])
def test_a_relief_hysteresis_outside_0_to_1_is_refused_naming_it(value):
    with pytest.raises(FieldError) as caught:
        validate_policy(replace(DEFAULT_POLICY, relief_hysteresis=value))
    assert caught.value.field == "relief_hysteresis"


@pytest.mark.parametrize("value", [0, 0.0, 0.15, 1.0])
def test_a_relief_hysteresis_from_0_to_1_is_accepted(value):
    validate_policy(replace(DEFAULT_POLICY, relief_hysteresis=value))
