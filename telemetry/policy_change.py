"""A change of policy or of a profile's windows, before and after it is saved.

Before: what it would do to every session it reaches (`preview`, the pure rules of
`telemetry.policy_effects` over the stored rows), and the refusal of a reserve that leaves no
room in a window the profile uses (`refuse_tight_reserve`). After: the stored window and
pressure of the reached profiles' sessions are recomputed off the request path, in batches, by
the `telemetry.recompute_pressure` job (`schedule_recompute`; the write itself is
`telemetry.session_state.recompute_pressure_batch`), so a session left "pressure unknown" by a
too-large reserve recovers when the reserve is put back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import Q

from telemetry.catalogue import CatalogueWindows
from telemetry.errors import FieldError
from telemetry.models import AgentProfile, AgentSession, Policy
from telemetry.policy_effects import (
    PolicyEffects,
    ProfileSetting,
    SessionFacts,
    proposal_digest,
    refuse_reserve_beyond_windows,
    session_change,
    summarize_changes,
    windows_in_use,
)
from telemetry.policy_rules import DEFAULT_POLICY, merge_policy
from telemetry.policy_store import layered_policy, row_overrides
from telemetry.windows import LearnedWindow

logger = logging.getLogger(__name__)

RECOMPUTE_TASK = "telemetry.recompute_pressure"

_FACT_COLUMNS = (
    "pk",
    "profile_id",
    "model",
    "projected_tokens",
    "window_tokens",
    "window_source",
    "learned_window_model",
    "learned_window_tokens",
    "pressure",
    "surface_version",
    "calls_count",
    "external_id",
    "agent_name",
)
# what the window in force of a session depends on
_WINDOW_COLUMNS = (
    "profile_id",
    "model",
    "window_tokens",
    "window_source",
    "learned_window_model",
    "learned_window_tokens",
)


def facts_of(row: Mapping[str, Any]) -> SessionFacts:
    """A row of `_FACT_COLUMNS` (`.values()`) as the pure facts."""
    learned = (
        None
        if row["learned_window_tokens"] is None
        else LearnedWindow(row["learned_window_model"], row["learned_window_tokens"])
    )
    return SessionFacts(
        session_id=row["pk"],
        profile_id=row["profile_id"],
        model=row["model"],
        projected_tokens=row["projected_tokens"],
        window_tokens=row["window_tokens"],
        window_source=row["window_source"],
        learned=learned,
        pressure=row["pressure"],
        has_transcript=row["surface_version"] > 0,
        has_calls=row["calls_count"] > 0,
        external_id=row["external_id"],
        agent=row["agent_name"],
    )


def session_facts(profile_ids: list[int]) -> Iterator[SessionFacts]:
    """The facts of every session of `profile_ids`, streamed."""
    rows = (
        AgentSession.objects.filter(profile_id__in=profile_ids)
        .order_by("pk")
        .values(*_FACT_COLUMNS)
    )
    for row in rows.iterator(chunk_size=2000):
        yield facts_of(row)


@dataclass(frozen=True)
class Proposal:
    """Proposed values for one target (a profile, or the global policy reaching every profile):
    each reached profile's setting now and after the change."""

    target: str
    values: Mapping[str, object]
    settings: dict[int, tuple[ProfileSetting, ProfileSetting]]
    names: dict[int, str]
    state: str

    def pressure_profiles(self) -> list[int]:
        """Profiles whose stored figures the change can move (reserve or windows differ)."""
        return sorted(
            pk
            for pk, (before, after) in self.settings.items()
            if before.policy.reserved_output_tokens != after.policy.reserved_output_tokens
            or dict(before.windows) != dict(after.windows)
        )

    @property
    def digest(self) -> str:
        return proposal_digest(self.target, self.values, self.state)


def _state(rows: list[Policy], profiles: list[AgentProfile]) -> str:
    """What the stored policy and windows are now (a confirm is bound to it)."""
    stamps = [f"p{row.pk}:{row.updated_at.isoformat()}" for row in rows]
    stamps += [
        f"w{profile.pk}:{sorted((profile.window_overrides or {}).items())}" for profile in profiles
    ]
    return ",".join(stamps)


def policy_proposal(profile: AgentProfile | None, values: Mapping[str, object]) -> Proposal:
    """Saving `values` on the global row (`profile` None) or on `profile`'s override row, as
    `telemetry.policy_store.update_policy` merges them. Raises FieldError for an invalid policy."""
    rows = list(Policy.objects.order_by("pk"))
    global_row = next((row for row in rows if row.is_global), None)
    by_profile = {row.profile_id: row for row in rows if not row.is_global}
    profiles = list(AgentProfile.objects.all() if profile is None else [profile])
    settings: dict[int, tuple[ProfileSetting, ProfileSetting]] = {}
    old_global = layered_policy(global_row)
    if profile is None:
        new_global = merge_policy(DEFAULT_POLICY, row_overrides(global_row) | dict(values))
    for each in profiles:
        windows = dict(each.window_overrides or {})
        own = by_profile.get(each.pk)
        before = layered_policy(global_row, own)
        if profile is None:
            after = merge_policy(new_global, row_overrides(own))
        else:
            after = merge_policy(old_global, row_overrides(own) | dict(values))
        settings[each.pk] = (ProfileSetting(before, windows), ProfileSetting(after, windows))
    return Proposal(
        target=f"policy:{profile.name if profile else '*'}",
        values=dict(values),
        settings=settings,
        names={each.pk: each.name for each in profiles},
        state=_state(rows, profiles),
    )


def windows_proposal(profile: AgentProfile, overrides: Mapping[str, int]) -> Proposal:
    """Replacing `profile`'s windows with `overrides` (its policy unchanged)."""
    rows = list(Policy.objects.filter(Q(is_global=True) | Q(profile=profile)).order_by("pk"))
    global_row = next((row for row in rows if row.is_global), None)
    own = next((row for row in rows if not row.is_global), None)
    policy = layered_policy(global_row, own)
    before = ProfileSetting(policy, dict(profile.window_overrides or {}))
    return Proposal(
        target=f"windows:{profile.name}",
        values=dict(overrides),
        settings={profile.pk: (before, ProfileSetting(policy, dict(overrides)))},
        names={profile.pk: profile.name},
        state=_state(rows, [profile]),
    )


def preview(proposal: Proposal) -> PolicyEffects:
    """What saving `proposal` would do to every session it reaches, now. One streamed read of
    the sessions and one of the catalogue, whatever their number."""
    catalogue = CatalogueWindows()
    return summarize_changes(
        session_change(
            facts,
            *proposal.settings[facts.profile_id],
            catalogue.of(facts.model),
        )
        for facts in session_facts(list(proposal.settings))
    )


def refuse_tight_reserve(proposal: Proposal, *, field: str = "reserved_output_tokens") -> None:
    """Refuse (FieldError on `field`) a proposal whose reserve leaves no room in a window a
    reached profile uses: its configured windows and the windows its sessions resolve under the
    proposal. The message names the reserve, the window and what uses it."""
    catalogue = CatalogueWindows()
    # a session's window depends on these columns only: one check per distinct combination
    shapes = (
        AgentSession.objects.filter(profile_id__in=list(proposal.settings))
        .exclude(model="")
        .values(*_WINDOW_COLUMNS)
        .order_by()
        .distinct()
    )
    by_profile: dict[int, list[SessionFacts]] = {}
    for row in shapes.iterator(chunk_size=2000):
        facts = facts_of(
            {**row, "pk": 0, "projected_tokens": None, "pressure": None, "surface_version": 0}
            | {"calls_count": 0, "external_id": "", "agent_name": ""}
        )
        by_profile.setdefault(facts.profile_id, []).append(facts)
    for pk, (_, after) in sorted(proposal.settings.items()):
        for facts in by_profile.get(pk, []):
            catalogue.of(facts.model)
        uses = windows_in_use(after, by_profile.get(pk, []), catalogue.known())
        try:
            refuse_reserve_beyond_windows(after.policy.reserved_output_tokens, uses, field=field)
        except FieldError as exc:
            if len(proposal.settings) > 1:
                raise FieldError(
                    exc.field, f"{exc.message} (profile {proposal.names[pk]})"
                ) from None
            raise


def schedule_recompute(profile_ids: list[int]) -> None:
    """After the caller's transaction commits, ask the worker to recompute the stored window and
    pressure of the sessions of `profile_ids` (one job per profile, which re-enqueues itself per
    batch). A broker that refuses is logged: the sessions then catch up with their next report."""

    def send() -> None:
        for pk in profile_ids:
            try:
                current_app.send_task(RECOMPUTE_TASK, args=[pk], retry=True)
            except Exception as exc:  # the save stands; the figures follow with the next report
                logger.warning(
                    "could not enqueue the pressure recompute of profile %s: %s", pk, exc
                )

    if profile_ids:
        transaction.on_commit(send)
