"""What a policy change would do now: how many sessions it would put at or above the prune and
the summarize thresholds, and how many raw turns and calls a shorter call retention would
remove; shown before an admin saves (saving lower thresholds used to compact live sessions
within seconds with "Saved" as the only feedback)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db.models import Count, Q, Sum
from django.utils import timezone

from console.selectors.policies import load_policies
from telemetry.errors import FieldError
from telemetry.models import AgentProfile, AgentSession, Policy, Turn
from telemetry.policy_rules import DEFAULT_POLICY, POLICY_FIELDS, PolicyValues, merge_policy
from telemetry.retention import cutoffs, expired_turns


@dataclass(frozen=True)
class PolicyImpact:
    """Sessions at or above each threshold with the new values, and how many of them are not
    there now (`*_new`). `relief_new`: newly at prune with a transcript, which automatic
    compaction would act on at their next report. `expiring_turns` / `expiring_calls`: raw
    turns and calls the new call retention removes that the current one keeps."""

    prune_now: int
    prune_new: int
    compact_now: int
    compact_new: int
    relief_new: int
    expiring_turns: int = 0
    expiring_calls: int = 0

    @property
    def changes_anything(self) -> bool:
        return bool(self.prune_new or self.compact_new or self.expiring_turns)


def _stored(row: Policy) -> dict[str, object]:
    return {name: getattr(row, name) for name in POLICY_FIELDS}


def policy_impact(
    profile: AgentProfile | None, values: Mapping[str, object]
) -> PolicyImpact | None:
    """The impact of saving `values` on the global policy (`profile` None) or on `profile`'s
    overrides (None values inherit). None when the values are not a valid policy. Two queries
    and one aggregate, whatever the number of sessions."""
    policies = load_policies()
    old: dict[int, PolicyValues] = {}
    new: dict[int, PolicyValues] = {}
    try:
        if profile is None:
            new_global = merge_policy(DEFAULT_POLICY, values)
            overrides = {
                row.profile_id: _stored(row)
                for row in Policy.objects.filter(is_global=False)
                if row.profile_id is not None
            }
            for pk in AgentProfile.objects.values_list("pk", flat=True):
                old[pk] = policies.of(pk)
                new[pk] = merge_policy(new_global, overrides.get(pk, {}))
        else:
            old[profile.pk] = policies.of(profile.pk)
            new[profile.pk] = merge_policy(policies.global_policy, values)
    except FieldError:
        return None

    def at(threshold: str, which: dict[int, PolicyValues]) -> Q:
        condition = Q(pk__in=[])
        for pk, policy in which.items():
            condition |= Q(profile_id=pk, pressure__gte=getattr(policy, threshold))
        return condition

    prune_new = at("prune_threshold", new) & ~at("prune_threshold", old)
    counts = AgentSession.objects.filter(
        pressure__isnull=False, profile_id__in=list(new)
    ).aggregate(
        prune_now=Count("id", filter=at("prune_threshold", new)),
        prune_new=Count("id", filter=prune_new),
        compact_now=Count("id", filter=at("summarize_threshold", new)),
        compact_new=Count(
            "id", filter=at("summarize_threshold", new) & ~at("summarize_threshold", old)
        ),
        relief_new=Count("id", filter=prune_new & Q(surface_version__gt=0)),
    )
    now = timezone.now()
    expiring = expired_turns(cutoffs(new, now)) & ~expired_turns(cutoffs(old, now))
    removed = Turn.objects.filter(expiring).aggregate(turns=Count("id"), calls=Sum("calls"))
    return PolicyImpact(
        **{key: int(value or 0) for key, value in counts.items()},
        expiring_turns=int(removed["turns"] or 0),
        expiring_calls=int(removed["calls"] or 0),
    )
