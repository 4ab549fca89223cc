"""Session state has one owner (`telemetry.session_state`): its rules hold the same from every
caller, and the port compaction registers is the one the projection uses."""

from __future__ import annotations

import pytest

from compaction.transcripts import tokens_appended_after_reply
from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_store import effective_policy
from telemetry.session_state import (
    claim_relief,
    mark_relief_tried,
    needing_relief,
    needs_relief,
    registered_log_appended_tokens,
    release_relief,
    session_pressure,
)

pytestmark = pytest.mark.django_db


def test_compaction_registers_the_log_port_when_its_app_is_ready():
    assert registered_log_appended_tokens() is tokens_appended_after_reply


def test_needs_relief_and_its_query_form_agree_on_every_case(agent):
    profile = AgentProfile.objects.get(name=agent.profile)
    policy = effective_policy(profile)
    threshold = policy.prune_threshold
    cases = [
        # (pressure, surface_version, relief_tried_version)
        (None, 3, None),
        (threshold - 0.01, 3, None),
        (threshold, 3, None),
        (threshold + 0.2, 0, None),
        (threshold + 0.2, 3, 3),
        (threshold + 0.2, 3, 2),
        (1.5, 1, None),
    ]
    for index, (pressure, version, tried) in enumerate(cases):
        AgentSession.objects.create(
            profile=profile,
            external_id=f"case-{index}",
            pressure=pressure,
            surface_version=version,
            relief_tried_version=tried,
        )
    sessions = AgentSession.objects.filter(profile=profile)
    by_rule = {s.external_id for s in sessions if needs_relief(s, policy)}
    by_query = set(sessions.filter(needing_relief(threshold)).values_list("external_id", flat=True))
    assert by_rule == by_query == {"case-2", "case-5", "case-6"}


def test_relief_is_claimed_once_until_released_and_tried_versions_stop_it(agent):
    profile = AgentProfile.objects.get(name=agent.profile)
    policy = effective_policy(profile)
    session = AgentSession.objects.create(
        profile=profile, external_id="s", pressure=0.99, surface_version=2
    )
    assert claim_relief(session.pk) is True
    assert claim_relief(session.pk) is False
    release_relief([session.pk])
    assert claim_relief(session.pk) is True
    mark_relief_tried(session.pk, 2)
    session.refresh_from_db()
    assert needs_relief(session, policy) is False


def test_pressure_is_unknown_without_a_usable_window(agent):
    policy = effective_policy(AgentProfile.objects.get(name=agent.profile))
    reserved = policy.reserved_output_tokens
    assert session_pressure(1000, None, policy) is None
    assert session_pressure(1000, reserved, policy) is None
    assert session_pressure(1000, reserved + 2000, policy) == 0.5


def test_store_records_stores_normalised_records_for_a_profile_without_a_key(agent):
    profile = AgentProfile.objects.get(name=agent.profile)
    item = {
        "session_id": "imported",
        "turn": 0,
        "model": "claude-sonnet-4-5-20250929",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    first = store_records(profile=profile, raw_items=[item])
    again = store_records(profile=profile, raw_items=[item])
    assert [i.status for i in first.items] == ["created"]
    assert [i.status for i in again.items] == ["duplicate"]
    assert AgentSession.objects.get(profile=profile, external_id="imported").calls_count == 1
