"""The one read and write path of policy rows (global defaults and per-profile overrides)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from django.db import transaction
from django.db.models import Q

from telemetry.errors import FieldError
from telemetry.models import AgentProfile, Policy
from telemetry.policy_rules import DEFAULT_POLICY, POLICY_FIELDS, PolicyValues, merge_policy
from telemetry.recent import Recent

# Each process remembers the effective policy an agent key's requests get this long (beside the
# key check, `telemetry.keys`): ingest skips a query per request, and a policy changed anywhere
# applies within this long on every process (at once in the process that changed it: saving or
# deleting a Policy row calls `forget_policies`). A key seen for the first time reads it afresh.
POLICY_CACHE_SECONDS: Final = 1.0
_by_key: Recent[int, PolicyValues] = Recent(POLICY_CACHE_SECONDS, entries=1_000)


def forget_policies() -> None:
    """Drop every remembered effective policy of this process (a Policy row changed; tests)."""
    _by_key.clear()


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


def key_policy(
    key_id: int, profile: AgentProfile, *, clock: Callable[[], float] = time.monotonic
) -> PolicyValues:
    """`effective_policy(profile)` for the requests of agent key `key_id` (bound to `profile`),
    remembered per process for `POLICY_CACHE_SECONDS` (PolicyValues is immutable)."""
    now = clock()
    remembered = _by_key.get(key_id, now)
    if remembered is None:
        remembered = effective_policy(profile)
        _by_key.put(key_id, remembered, now)
    return remembered


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
    result of every profile is validated first; nothing is written when any would be invalid,
    nor when the reserve leaves no room in a window a reached profile uses. A saved change of
    the reserve has the reached profiles' stored pressure recomputed by the worker
    (`telemetry.policy_change`).
    """
    unknown = sorted(set(values) - set(POLICY_FIELDS))
    if unknown:
        raise FieldError(unknown[0], "is not a policy field")
    if profile is None and any(value is None for value in values.values()):
        field = next(name for name, value in values.items() if value is None)
        raise FieldError(field, "the global policy needs a value")
    # policy_change builds on this module's merge order; imported here, where it is needed
    from telemetry import policy_change

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
                except FieldError as exc:
                    raise FieldError(
                        exc.field, f"{exc.message} (in profile {override.profile})"
                    ) from None
            result = new_global
        else:
            result = merge_policy(global_policy(), candidate)
        proposal = policy_change.policy_proposal(profile, values)
        # A reserve no window in use leaves room for would leave sessions "pressure unknown".
        policy_change.refuse_tight_reserve(proposal)
        for name, value in values.items():
            if name == "prune_exclude_tools" and value is not None:
                value = list(result.prune_exclude_tools)
            setattr(row, name, value)
        row.save()
        # The stored figures follow a changed reserve at once, off the request path.
        policy_change.schedule_recompute(proposal.pressure_profiles())
    return result if profile is None else effective_policy(profile)
