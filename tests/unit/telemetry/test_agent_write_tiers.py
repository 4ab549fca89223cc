"""Untiered cache writes are billed at the tier the agent is known to write with (issue 38,
case 4): Claude Code's flat `cache_creation_tokens` are 5-minute writes whatever the profile's
`cache_ttl`, unless its record splits them by tier."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from telemetry.pricing import SEED_CATALOGUE, call_cost, find_price
from telemetry.usage import (
    AGENT_WRITE_TIERS,
    CLAUDE_CODE,
    CacheTTL,
    normalize_usage,
    untiered_write_tier,
)

TTLS: tuple[CacheTTL, ...] = ("5m", "1h")
ttls = st.sampled_from(TTLS)
counts = st.integers(min_value=0, max_value=10**9)


@given(ttls)
def test_without_an_agent_untiered_writes_take_the_profiles_tier(profile_ttl: CacheTTL) -> None:
    assert untiered_write_tier(None, profile_ttl) == profile_ttl


@given(ttls, st.sampled_from(sorted(AGENT_WRITE_TIERS)), st.sampled_from(["", " ", "\t"]))
def test_a_known_agent_writes_at_its_own_tier_whatever_the_profile_says(
    profile_ttl: CacheTTL, agent: str, space: str
) -> None:
    spelled = f"{space}{agent.upper()}{space}"
    assert untiered_write_tier(spelled, profile_ttl) == AGENT_WRITE_TIERS[agent]


@given(ttls, st.text(max_size=30).filter(lambda a: a.strip().lower() not in AGENT_WRITE_TIERS))
def test_an_unknown_agent_keeps_the_profiles_tier(profile_ttl: CacheTTL, agent: str) -> None:
    assert untiered_write_tier(agent, profile_ttl) == profile_ttl


def test_claude_code_writes_five_minute_entries() -> None:
    assert untiered_write_tier(CLAUDE_CODE, "1h") == "5m"
    assert untiered_write_tier(CLAUDE_CODE, "5m") == "5m"


@given(ttls, counts, counts, counts, counts)
def test_claude_codes_flat_writes_land_in_the_five_minute_bucket(
    profile_ttl: CacheTTL, uncached: int, read: int, write: int, output: int
) -> None:
    usage = normalize_usage(
        {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": output,
        },
        provider="anthropic",
        cache_ttl=untiered_write_tier(CLAUDE_CODE, profile_ttl),
    )
    assert (usage.cache_write_5m, usage.cache_write_1h) == (write, 0)
    assert usage.context_tokens == uncached + read + write


@given(ttls, counts, counts)
def test_a_record_that_splits_its_writes_keeps_its_split(
    profile_ttl: CacheTTL, five: int, hour: int
) -> None:
    usage = normalize_usage(
        {
            "input_tokens": 1,
            "cache_creation_input_tokens": five + hour,
            "cache_creation": {
                "ephemeral_5m_input_tokens": five,
                "ephemeral_1h_input_tokens": hour,
            },
            "output_tokens": 1,
        },
        provider="anthropic",
        cache_ttl=untiered_write_tier(CLAUDE_CODE, profile_ttl),
    )
    assert (usage.cache_write_5m, usage.cache_write_1h) == (five, hour)


def test_the_issues_call_costs_what_claude_code_says_under_a_one_hour_profile() -> None:
    """Claude Code prices this call at $0.027141 (5-minute writes); billed at the 1h profile's
    tier it came to $0.033864 (+25 %)."""
    price = find_price("claude-sonnet-4-5-20250929", SEED_CATALOGUE)
    assert price is not None
    raw = {
        "input_tokens": 0,
        "cache_read_input_tokens": 26_120,
        "cache_creation_input_tokens": 2_988,
        "output_tokens": 540,
    }
    ours = normalize_usage(raw, cache_ttl=untiered_write_tier(CLAUDE_CODE, "1h"))
    profiles = normalize_usage(raw, cache_ttl="1h")
    assert call_cost(ours, price).total == Decimal("0.027141")
    assert call_cost(profiles, price).total == Decimal("0.033864")
