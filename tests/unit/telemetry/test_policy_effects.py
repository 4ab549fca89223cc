"""What a policy or window change would do to sessions (telemetry.policy_effects), pure."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.policy_effects import (
    CatalogueWindow,
    ProfileSetting,
    SessionFacts,
    WindowUse,
    billing_moves,
    configured_windows,
    proposal_digest,
    recomputed_figures,
    refuse_reserve_beyond_windows,
    session_change,
    summarize_changes,
    windows_in_use,
)
from telemetry.policy_rules import DEFAULT_POLICY
from telemetry.pressure import pressure, pressure_band, pressure_or_unknown
from telemetry.usage import untiered_write_tier
from telemetry.windows import LearnedWindow, window_in_force

SONNET = CatalogueWindow("claude-sonnet-4-5", 200_000)
SMALL = CatalogueWindow("small-model", 60_000)
DEFAULT = ProfileSetting(DEFAULT_POLICY)


def stored(
    projected: int,
    *,
    window: int | None = 200_000,
    source: str = "catalogue",
    setting: ProfileSetting = DEFAULT,
    session_id: int = 1,
    model: str = "claude-sonnet-4-5",
    **extra: object,
) -> SessionFacts:
    """A session whose stored figures are what ingest computed under `setting`."""
    reserve = setting.policy.reserved_output_tokens
    return SessionFacts(
        session_id=session_id,
        profile_id=1,
        model=model,
        projected_tokens=projected,
        window_tokens=window,
        window_source=source if window is not None else "",
        learned=None,
        pressure=pressure_or_unknown(projected, window, reserve),
        **extra,  # type: ignore[arg-type]
    )


def with_reserve(reserve: int) -> ProfileSetting:
    return ProfileSetting(replace(DEFAULT_POLICY, reserved_output_tokens=reserve))


def test_case_2_a_reserve_of_120000_moves_a_45_percent_session_over_its_window():
    facts = stored(82_800)  # 45 % of 184,000 usable
    change = session_change(facts, DEFAULT, with_reserve(120_000), SONNET)
    assert (change.before.band, change.after.band) == ("ok", "over")
    assert (change.before.usable, change.after.usable) == (184_000, 80_000)
    assert change.after.pressure == pytest.approx(82_800 / 80_000)
    effects = summarize_changes([change])
    assert effects.moves == (("ok", "over", 1),)
    assert (effects.prune_new, effects.compact_new, effects.usable_moves) == (1, 1, 1)
    assert effects.changes_anything


def test_case_3_reverting_the_reserve_recovers_a_pressure_left_unknown():
    # stored while the reserve was 120,000: the 60,000 window left no room, pressure unknown
    facts = stored(26_400, window=60_000, source="record", setting=with_reserve(120_000))
    assert facts.pressure is None
    change = session_change(facts, with_reserve(120_000), DEFAULT, SONNET)
    assert change.after.pressure == pytest.approx(26_400 / 44_000)  # 60,000 − 16,000 reserved
    assert (change.before.band, change.after.band) == ("unknown", "prune")
    assert change.after.window is not None and change.after.window.source == "record"
    effects = summarize_changes([change])
    assert (effects.recovered, effects.lost, effects.rewrites) == (1, 0, 1)


def test_a_profile_window_moves_usable_and_pressure_but_never_a_window_the_agent_reported():
    windows = ProfileSetting(DEFAULT_POLICY, {"*": 100_000})
    catalogue_session = stored(50_000, session_id=1)
    record_session = stored(50_000, source="record", session_id=2)
    moved = session_change(catalogue_session, DEFAULT, windows, SONNET)
    kept = session_change(record_session, DEFAULT, windows, SONNET)
    assert moved.after.window is not None and moved.after.window.source == "profile_default"
    assert (moved.after.usable, moved.after.band) == (84_000, "ok")
    assert moved.usable_moves and not moved.band_moves
    assert not kept.changes_anything and not kept.rewrites_figures


def test_a_learned_overflow_limit_outranks_the_profiles_window():
    facts = replace(
        stored(50_000, window=150_000, source="overflow"),
        learned=LearnedWindow("claude-sonnet-4-5", 150_000),
    )
    change = session_change(facts, DEFAULT, ProfileSetting(DEFAULT_POLICY, {"*": 90_000}), SONNET)
    assert not change.changes_anything


def test_a_ttl_change_moves_the_billing_of_sessions_that_report_calls_only():
    one_hour = ProfileSetting(replace(DEFAULT_POLICY, cache_ttl="1h"))
    with_calls = session_change(stored(1_000), DEFAULT, one_hour, SONNET)
    without = session_change(stored(1_000, has_calls=False), DEFAULT, one_hour, SONNET)
    assert with_calls.billing and not with_calls.band_moves and with_calls.changes_anything
    assert not without.billing
    assert summarize_changes([with_calls, without]).billing == 1


@pytest.mark.parametrize(
    ("agent", "moves"),
    [
        ("claude-code", False),  # writes at 5 minutes whatever the profile's TTL
        ("Claude-Code ", False),  # the agent is named as `untiered_write_tier` reads it
        ("codex", True),  # an agent without a tier of its own follows the profile
        ("", True),  # no door named the agent: the profile's TTL
    ],
)
def test_a_ttl_change_moves_billing_only_where_the_agents_tier_follows_the_profile(agent, moves):
    one_hour = ProfileSetting(replace(DEFAULT_POLICY, cache_ttl="1h"))
    for before, after in ((DEFAULT, one_hour), (one_hour, DEFAULT)):
        change = session_change(stored(1_000, agent=agent), before, after, SONNET)
        assert change.billing is moves
        assert change.billing is (
            untiered_write_tier(agent or None, before.policy.cache_ttl)
            != untiered_write_tier(agent or None, after.policy.cache_ttl)
        )


@given(
    agent=st.sampled_from(["", "claude-code", "codex", "CLAUDE-CODE"]),
    ttls=st.tuples(*[st.sampled_from(["5m", "1h"])] * 2),
)
def test_billing_moves_exactly_when_the_untiered_tier_does(agent, ttls):
    before, after = (ProfileSetting(replace(DEFAULT_POLICY, cache_ttl=ttl)) for ttl in ttls)
    tiers = {untiered_write_tier(agent or None, ttl) for ttl in ttls}
    assert billing_moves(agent, before, after) is (len(tiers) == 2)


def test_lower_thresholds_count_newly_at_prune_and_which_have_a_transcript():
    lower = ProfileSetting(replace(DEFAULT_POLICY, prune_threshold=0.05, summarize_threshold=0.1))
    calm = stored(18_400, session_id=1, has_transcript=True)  # 10 %
    hot = stored(165_600, session_id=2)  # 90 %, already at compact
    effects = summarize_changes(session_change(f, DEFAULT, lower, SONNET) for f in (calm, hot))
    assert (effects.prune_now, effects.prune_new, effects.compact_now, effects.compact_new) == (
        2,
        1,
        2,
        1,
    )
    assert effects.relief_new == 1
    assert effects.moves == (("ok", "compact", 1),)
    assert [move.session_id for move in effects.examples] == [1]


def test_no_change_changes_nothing():
    effects = summarize_changes(
        session_change(stored(p), DEFAULT, DEFAULT, SONNET) for p in (0, 92_000, 184_000, 200_000)
    )
    assert effects.sessions == 4 and not effects.changes_anything and effects.rewrites == 0


def test_the_refusal_names_the_reserve_and_the_smallest_window_in_use():
    uses = [WindowUse(200_000, "model a"), WindowUse(60_000, "model X"), WindowUse(90_000, "b")]
    with pytest.raises(FieldError) as refused:
        refuse_reserve_beyond_windows(120_000, uses)
    assert refused.value.field == "reserved_output_tokens"
    assert "reserve 120,000 ≥ window 60,000 of model X" in refused.value.message
    # at the window exactly: refused; one below: fine
    with pytest.raises(FieldError):
        refuse_reserve_beyond_windows(60_000, [WindowUse(60_000, "model X")])
    refuse_reserve_beyond_windows(59_999, [WindowUse(60_000, "model X")])


def test_windows_in_use_are_the_configured_ones_and_those_sessions_resolve():
    setting = ProfileSetting(DEFAULT_POLICY, {"*": 150_000, "small-model": 60_000, "bad": 0})
    assert configured_windows(setting.windows) == [
        WindowUse(150_000, "the profile's default window (*)"),
        WindowUse(60_000, "model small-model"),
    ]
    reported = stored(10_000, window=32_000, source="record", model="tiny")
    uses = windows_in_use(setting, [reported], {"tiny": CatalogueWindow(None, None)})
    assert WindowUse(32_000, "model tiny") in uses


def test_the_digest_binds_target_values_and_stored_state():
    base = proposal_digest("policy:default", {"a": 1, "b": None}, "p1")
    assert base == proposal_digest("policy:default", {"b": None, "a": 1}, "p1")
    assert base != proposal_digest("policy:default", {"a": 2, "b": None}, "p1")
    assert base != proposal_digest("policy:fleet", {"a": 1, "b": None}, "p1")
    assert base != proposal_digest("policy:default", {"a": 1, "b": None}, "p2")


# --- properties --------------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=2_000_000)
windows = st.one_of(st.none(), st.integers(min_value=1, max_value=2_000_000))
reserves = st.integers(min_value=0, max_value=300_000)
sources = st.sampled_from(["record", "catalogue", "profile_default", "profile_model"])
overrides = st.dictionaries(
    st.sampled_from(["*", "claude-sonnet-4-5", "small-model"]),
    st.integers(min_value=1, max_value=1_000_000),
    max_size=2,
)


@given(projected=st.one_of(st.none(), counts), window=windows, reserve=reserves, source=sources)
def test_recomputed_figures_are_ingests_rules(projected, window, reserve, source):
    setting = with_reserve(reserve)
    facts = SessionFacts(1, 1, "claude-sonnet-4-5", projected, window, source, None, None)
    figures = recomputed_figures(facts, setting, SONNET)
    expected_window = window_in_force(
        model="claude-sonnet-4-5",
        record_window=window if source == "record" else None,
        learned=None,
        overrides={},
        family=SONNET.family,
        catalogue_window=SONNET.window_tokens,
    )
    assert figures.window == expected_window
    assert expected_window is not None
    usable = expected_window.tokens - reserve
    assert figures.usable == (usable if usable > 0 else None)
    if projected is None or usable <= 0:
        assert figures.pressure is None and figures.band == "unknown"
    else:
        assert figures.pressure == pressure(projected, expected_window.tokens, reserve)
        assert figures.band == pressure_band(figures.pressure, 0.6, 0.8)


@given(
    projected=counts,
    reserve=reserves,
    windows_before=overrides,
    windows_after=overrides,
    new_reserve=reserves,
)
def test_a_change_and_its_revert_land_back_on_the_stored_figures(
    projected, reserve, windows_before, windows_after, new_reserve
):
    before = ProfileSetting(replace(DEFAULT_POLICY, reserved_output_tokens=reserve), windows_before)
    after = ProfileSetting(
        replace(DEFAULT_POLICY, reserved_output_tokens=new_reserve), windows_after
    )
    blank = SessionFacts(1, 1, "claude-sonnet-4-5", projected, None, "", None, None)
    now = recomputed_figures(blank, before, SONNET)
    assert now.window is not None
    facts = replace(
        blank,
        window_tokens=now.window.tokens,
        window_source=now.window.source,
        pressure=now.pressure,
    )
    # unchanged: nothing moves; the change and back: the figures return exactly
    assert not session_change(facts, before, before, SONNET).changes_anything
    moved = session_change(facts, before, after, SONNET).after
    assert moved.window is not None
    changed = replace(
        facts,
        window_tokens=moved.window.tokens,
        window_source=moved.window.source,
        pressure=moved.pressure,
    )
    back = session_change(changed, after, before, SONNET)
    assert (back.after.window, back.after.pressure, back.after.band) == (
        now.window,
        now.pressure,
        now.band,
    )


@given(window=st.integers(min_value=1, max_value=2_000_000), reserve=reserves)
def test_the_refusal_is_exactly_where_pressure_would_be_unknown(window, reserve):
    refused = False
    try:
        refuse_reserve_beyond_windows(reserve, [WindowUse(window, "model m")])
    except FieldError:
        refused = True
    assert refused == (pressure_or_unknown(0, window, reserve) is None)


@given(st.lists(st.tuples(counts, reserves, reserves), max_size=20))
def test_the_summary_counts_hold_together(rows):
    changes = [
        session_change(stored(p, session_id=i), with_reserve(a), with_reserve(b), SONNET)
        for i, (p, a, b) in enumerate(rows)
    ]
    effects = summarize_changes(changes)
    assert effects.sessions == len(changes)
    assert effects.band_moves == sum(c.band_moves for c in changes)
    assert effects.prune_new <= effects.prune_now and effects.compact_new <= effects.compact_now
    assert effects.compact_now <= effects.prune_now
    assert effects.changes_anything == any(c.changes_anything for c in changes)
    assert len(effects.examples) == min(effects.band_moves, 5)
