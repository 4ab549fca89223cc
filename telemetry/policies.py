"""The one read and write path of policy rows (global defaults and per-profile overrides)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction
from django.db.models import Q

from telemetry.models import AgentProfile, Policy
from telemetry.policy import (
    DEFAULT_POLICY,
    POLICY_FIELDS,
    PolicyError,
    PolicyValues,
    merge_policy,
)


def row_overrides(row: Policy | None) -> dict[str, object]:
    """A policy row's fields (None: inherited)."""
    if row is None:
        return {}
    return {name: getattr(row, name) for name in POLICY_FIELDS}


def layered_policy(global_row: Policy | None, profile_row: Policy | None = None) -> PolicyValues:
    """The defaults, then the global row, then a profile's row: the one merge order."""
    base = merge_policy(DEFAULT_POLICY, row_overrides(global_row))
    return base if profile_row is None else merge_policy(base, row_overrides(profile_row))


def global_policy() -> PolicyValues:
    return layered_policy(Policy.objects.filter(is_global=True).first())


def effective_policy(profile: AgentProfile) -> PolicyValues:
    """What an agent of `profile` gets: the global row, then the profile's non-null overrides."""
    rows = {
        ("global" if row.is_global else "profile"): row
        for row in Policy.objects.filter(Q(is_global=True) | Q(profile=profile))
    }
    return layered_policy(rows.get("global"), rows.get("profile"))


def update_policy(*, profile: AgentProfile | None, values: Mapping[str, object]) -> PolicyValues:
    """Set fields on the global row (`profile=None`) or on a profile's override row.

    A None value on a profile row clears the override (the field inherits again). The merged
    result of every profile is validated first; nothing is written when any would be invalid.
    """
    unknown = sorted(set(values) - set(POLICY_FIELDS))
    if unknown:
        raise PolicyError(unknown[0], "is not a policy field")
    if profile is None and any(value is None for value in values.values()):
        field = next(name for name, value in values.items() if value is None)
        raise PolicyError(field, "the global policy needs a value")
    with transaction.atomic():
        if profile is None:
            row, _ = Policy.objects.select_for_update().get_or_create(is_global=True)
        else:
            row, _ = Policy.objects.select_for_update().get_or_create(profile=profile)
        candidate = row_overrides(row) | dict(values)
        if profile is None:
            new_global = merge_policy(DEFAULT_POLICY, candidate)
            # A global change must keep every profile's merged policy valid too.
            for override in Policy.objects.filter(is_global=False).select_related("profile"):
                try:
                    merge_policy(new_global, row_overrides(override))
                except PolicyError as exc:
                    raise PolicyError(
                        exc.field, f"{exc.message} (in profile {override.profile})"
                    ) from None
            result = new_global
        else:
            result = merge_policy(global_policy(), candidate)
        for name, value in values.items():
            if name == "prune_exclude_tools" and value is not None:
                value = list(result.prune_exclude_tools)
            setattr(row, name, value)
        row.save()
    return result if profile is None else effective_policy(profile)
