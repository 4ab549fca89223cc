"""What a policy or window change would do now, shown before an admin saves: sessions that
would change band (and to which), whose usable window or billing tier would change, and a
refusal when the reserve leaves no room in a window in use, the raw turns and calls a
shorter call retention would remove (`telemetry.retention`), and the transcript messages whose
text a shorter log retention would remove (`compaction.log_retention`). The figures are
`telemetry.policy_change.preview`'s (the rules ingest applies); a save that changes anything
asks to confirm, and the confirm carries the digest of the previewed values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.utils import timezone

from compaction import log_retention
from compaction.log_retention import expiring_texts
from telemetry.errors import FieldError
from telemetry.models import AgentProfile
from telemetry.policy_change import (
    Proposal,
    policy_proposal,
    preview,
    refuse_tight_reserve,
    windows_proposal,
)
from telemetry.policy_effects import PolicyEffects
from telemetry.retention import cutoffs, expired_turns, expiring


@dataclass(frozen=True)
class PolicyImpact:
    proposal: Proposal
    effects: PolicyEffects
    refused: str = ""
    # raw turns and calls the new call retention removes that the current one keeps
    expiring_turns: int = 0
    expiring_calls: int = 0
    # log messages (in sessions) whose text the new log retention removes and the current keeps
    expiring_texts: int = 0
    expiring_text_sessions: int = 0
    # the preview walked only the first candidate sessions: the two figures are a floor
    expiring_texts_more: bool = False

    @property
    def changes_anything(self) -> bool:
        return (
            self.effects.changes_anything
            or bool(self.expiring_turns)
            or bool(self.expiring_texts)
            or self.expiring_texts_more
        )

    @property
    def preview_sessions(self) -> int:
        """How many candidate sessions the log retention preview walks at most."""
        return log_retention.PREVIEW_SESSIONS

    @property
    def digest(self) -> str:
        return self.proposal.digest

    @property
    def ttl_changes(self) -> list[tuple[str, str, str]]:
        """(profile, TTL now, TTL after) for each reached profile whose cache TTL changes."""
        return [
            (self.proposal.names[pk], before.policy.cache_ttl, after.policy.cache_ttl)
            for pk, (before, after) in sorted(self.proposal.settings.items())
            if before.policy.cache_ttl != after.policy.cache_ttl
        ]

    @property
    def reserve_changes(self) -> list[tuple[str, int, int]]:
        return [
            (
                self.proposal.names[pk],
                before.policy.reserved_output_tokens,
                after.policy.reserved_output_tokens,
            )
            for pk, (before, after) in sorted(self.proposal.settings.items())
            if before.policy.reserved_output_tokens != after.policy.reserved_output_tokens
        ]


def _impact(proposal: Proposal, field: str) -> PolicyImpact:
    refused = ""
    try:
        refuse_tight_reserve(proposal, field=field)
    except FieldError as exc:
        refused = exc.message
    turns, calls = _expiring(proposal)
    now = timezone.now()
    texts = expiring_texts(
        {pk: pair[0].policy for pk, pair in proposal.settings.items()},
        {pk: pair[1].policy for pk, pair in proposal.settings.items()},
        now,
    )
    return PolicyImpact(
        proposal,
        preview(proposal),
        refused,
        turns,
        calls,
        texts.messages,
        texts.sessions,
        texts.more,
    )


def _expiring(proposal: Proposal) -> tuple[int, int]:
    """(turns, calls) the proposal's call retention removes now and the current one keeps."""
    now = timezone.now()
    before = {pk: pair[0].policy for pk, pair in proposal.settings.items()}
    after = {pk: pair[1].policy for pk, pair in proposal.settings.items()}
    reached = cutoffs(after, now)
    newly = expired_turns(reached) & ~expired_turns(cutoffs(before, now))
    # read where the turns are stored, the packed ones from the candidate chunks alone
    return expiring(newly, reached)


def policy_impact(
    profile: AgentProfile | None, values: Mapping[str, object]
) -> PolicyImpact | None:
    """The impact of saving `values` on the global policy (`profile` None) or on `profile`'s
    overrides (None values inherit). None when the values are not a valid policy."""
    try:
        proposal = policy_proposal(profile, values)
    except FieldError:
        return None
    return _impact(proposal, "reserved_output_tokens")


def windows_impact(profile: AgentProfile, overrides: Mapping[str, int]) -> PolicyImpact:
    """The impact of replacing `profile`'s windows with `overrides`."""
    return _impact(windows_proposal(profile, overrides), "window_overrides")
