"""The one write path for agent profiles."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from context_core.overflow_limit import MAX_WINDOW
from telemetry import policy_change
from telemetry.errors import FieldError
from telemetry.models import AgentProfile


def get_or_create_profile(*, name: str, description: str = "") -> AgentProfile:
    """The profile called `name`, created (with a validated name) if it does not exist yet."""
    existing = AgentProfile.objects.filter(name=name).first()
    if existing is not None:
        return existing
    profile = AgentProfile(name=name, description=description)
    try:
        profile.full_clean(validate_unique=False)
    except ValidationError as exc:
        messages = exc.message_dict.get("name") or exc.messages
        raise FieldError("profile", "; ".join(messages)) from None
    try:
        with transaction.atomic():
            profile.save()
    except IntegrityError:
        # Two creators raced; the other one won and the row is what we wanted.
        return AgentProfile.objects.get(name=name)
    return profile


def set_window_overrides(*, profile: AgentProfile, overrides: dict[str, int]) -> AgentProfile:
    """Replace the profile's windows per model (and its default under "*"); the record's own
    window still wins (`telemetry.windows`). Refused when the profile's reserve would leave no
    room in a window it then uses; a saved change has its sessions' stored window and pressure
    recomputed by the worker (`telemetry.policy_change`)."""
    for name, tokens in overrides.items():
        if not name or type(tokens) is not int or not 0 < tokens <= MAX_WINDOW:
            raise FieldError("window_overrides", f"{name!r}: {tokens!r} is not a window")
    with transaction.atomic():
        locked = AgentProfile.objects.select_for_update().get(pk=profile.pk)
        proposal = policy_change.windows_proposal(locked, overrides)
        policy_change.refuse_tight_reserve(proposal, field="window_overrides")
        locked.window_overrides = dict(sorted(overrides.items()))
        locked.save(update_fields=["window_overrides"])
        if proposal.pressure_profiles():
            policy_change.schedule_recompute([locked.pk])
    profile.window_overrides = locked.window_overrides
    return profile
