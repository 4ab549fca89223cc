"""Seed data that must exist: the global policy, the D7 profiles, the model catalogue.

The migrations seed these once; `ensure_defaults` puts back whatever is missing (a flushed test
database, a restored backup) and never overwrites an admin's edits.
"""

from __future__ import annotations

from telemetry.catalogue import seed_catalogue
from telemetry.models import AgentProfile, Policy
from telemetry.policy_rules import (
    DEFAULT_POLICY,
    ONE_HOUR_TTL_PROFILES,
    POLICY_FIELDS,
    SEEDED_PROFILES,
)


def ensure_defaults() -> None:
    if not Policy.objects.filter(is_global=True).exists():
        values = DEFAULT_POLICY.as_dict()
        Policy.objects.create(is_global=True, **{name: values[name] for name in POLICY_FIELDS})
    for name in SEEDED_PROFILES:
        profile, _ = AgentProfile.objects.get_or_create(name=name)
        if name in ONE_HOUR_TTL_PROFILES and not Policy.objects.filter(profile=profile).exists():
            Policy.objects.create(profile=profile, cache_ttl="1h")
    seed_catalogue()
