"""The band rule's SQL form (`telemetry.band_sql`) agrees with `pressure_band` at every boundary.

Each pressure sits on or beside a threshold of its profile (one below, at, one above, and the
same around 1.0), under two profiles with different thresholds and one the CASE was not built
for (the fallback); the name CASE, the rank CASE and the range filters must all say what the
Python rule says. A `>` made `>=` in any one form fails here.
"""

from __future__ import annotations

import math

import pytest
from django.db.models import CharField

from console.selectors.policies import band_rank, load_policies
from telemetry.band_sql import BAND_OF_RANK, BANDS, band_case, band_ranges
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_store import effective_policy, global_policy, update_policy
from telemetry.pressure import pressure_band
from telemetry.profiles import get_or_create_profile

pytestmark = pytest.mark.django_db


def _around(value: float) -> list[float]:
    return [math.nextafter(value, 0.0), value, math.nextafter(value, 2.0)]


def _fleet() -> tuple[list[AgentProfile], AgentProfile]:
    tight = get_or_create_profile(name="tight")
    update_policy(profile=tight, values={"prune_threshold": 0.3, "summarize_threshold": 0.45})
    loose = get_or_create_profile(name="loose")
    update_policy(profile=loose, values={"prune_threshold": 0.7, "summarize_threshold": 0.9})
    late = get_or_create_profile(name="late")  # created after the CASE's policies were read
    base = global_policy()
    points = {0.0, 2.0}
    for policy in (effective_policy(tight), effective_policy(loose), base):
        points.update(_around(policy.prune_threshold) + _around(policy.summarize_threshold))
    points.update(_around(1.0))
    n = 0
    for profile in (tight, loose, late):
        for pressure in [*sorted(points), None]:
            n += 1
            AgentSession.objects.create(profile=profile, external_id=f"s{n}", pressure=pressure)
    return [tight, loose], late


def _python_band(session: AgentSession) -> str:
    policy = effective_policy(session.profile)
    return pressure_band(session.pressure, policy.prune_threshold, policy.summarize_threshold)


def test_the_band_case_and_ranks_say_what_pressure_band_says_at_every_boundary() -> None:
    known, _late = _fleet()
    policies = {profile.pk: effective_policy(profile) for profile in known}
    named = band_case(policies, fallback=global_policy(), label=str, output_field=CharField())
    ranked = band_rank(known, load_policies())
    sessions = AgentSession.objects.select_related("profile").annotate(band=named, rank=ranked)
    checked = 0
    for session in sessions:
        expected = _python_band(session)
        assert session.band == expected, (session.profile.name, session.pressure)
        assert BAND_OF_RANK[session.rank] == expected, (session.profile.name, session.pressure)
        checked += 1
    assert checked > 40


def test_the_band_ranges_partition_each_profiles_sessions_as_pressure_band_does() -> None:
    known, late = _fleet()
    for profile in [*known, late]:
        policy = effective_policy(profile)
        ranges = band_ranges(policy.prune_threshold, policy.summarize_threshold)
        mine = AgentSession.objects.filter(profile=profile).select_related("profile")
        for band in BANDS:
            got = {s.pk for s in mine.filter(ranges[band])}
            want = {s.pk for s in mine if _python_band(s) == band}
            assert got == want, (profile.name, band)
