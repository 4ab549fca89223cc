import pytest

from telemetry.errors import FieldError
from telemetry.models import AgentProfile, Policy
from telemetry.policy_rules import DEFAULT_POLICY
from telemetry.policy_store import effective_policy, update_policy

pytestmark = pytest.mark.django_db


def test_policy_api_returns_the_profiles_effective_policy(agent):
    response = agent.get("/api/v1/policy")
    assert response.status_code == 200
    body = response.json()
    assert body["profile"] == "default"
    assert body["cache_ttl"] == "5m"
    assert body["prune_threshold"] == 0.60
    assert body["summarize_threshold"] == 0.80
    assert body["max_result_chars"] == 50_000


@pytest.mark.parametrize("profile", ["fleet", "desktop"])
def test_fleet_and_desktop_profiles_default_to_the_one_hour_cache_tier(make_agent, profile):
    assert make_agent(profile).get("/api/v1/policy").json()["cache_ttl"] == "1h"


def test_a_new_profile_inherits_the_global_policy(make_agent):
    update_policy(profile=None, values={"keep_rounds": 7})
    body = make_agent("brand-new").get("/api/v1/policy").json()
    assert body["keep_rounds"] == 7
    assert body["cache_ttl"] == "5m"


def test_profile_override_wins_and_clearing_it_inherits_again(agent):
    profile = agent.key.profile
    update_policy(profile=profile, values={"prune_threshold": 0.5})
    assert agent.get("/api/v1/policy").json()["prune_threshold"] == 0.5
    update_policy(profile=profile, values={"prune_threshold": None})
    assert agent.get("/api/v1/policy").json()["prune_threshold"] == DEFAULT_POLICY.prune_threshold


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"summarize_threshold": 0.5, "prune_threshold": 0.6}, "summarize_threshold"),
        ({"keep_rounds": -1}, "keep_rounds"),
        ({"stub_head_chars": -5}, "stub_head_chars"),
        ({"max_result_chars": 0}, "max_result_chars"),
        ({"prune_threshold": 1.5}, "prune_threshold"),
        ({"round_soft_limit": 500, "round_hard_cap": 100}, "round_soft_limit"),
        ({"cache_ttl": "2h"}, "cache_ttl"),
        ({"nudge_text": "   "}, "nudge_text"),
        ({"stub_head_chars": 40_000, "stub_tail_chars": 20_000}, "max_result_chars"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
def test_invalid_policy_is_refused_naming_the_field_and_nothing_changes(values, field):
    profile = AgentProfile.objects.get(name="default")
    before = effective_policy(profile)
    rows_before = list(Policy.objects.values())
    with pytest.raises(FieldError) as caught:
        update_policy(profile=profile, values=values)
    assert caught.value.field == field
    assert effective_policy(profile) == before
    assert list(Policy.objects.values()) == rows_before


def test_a_global_change_that_would_break_a_profile_override_is_refused():
    fleet = AgentProfile.objects.get(name="fleet")
    update_policy(profile=fleet, values={"summarize_threshold": 0.7})
    with pytest.raises(FieldError, match="fleet") as caught:
        update_policy(profile=None, values={"prune_threshold": 0.75})
    assert caught.value.field == "summarize_threshold"
    assert Policy.objects.get(is_global=True).prune_threshold == 0.60


def test_the_global_policy_cannot_have_empty_fields():
    with pytest.raises(FieldError) as caught:
        update_policy(profile=None, values={"keep_rounds": None})
    assert caught.value.field == "keep_rounds"


def test_prune_exclude_tools_is_normalised_to_sorted_unique_names(agent):
    update_policy(profile=agent.key.profile, values={"prune_exclude_tools": "grep, read_file,grep"})
    assert agent.get("/api/v1/policy").json()["prune_exclude_tools"] == ["grep", "read_file"]
