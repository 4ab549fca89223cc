"""What a policy or window change would do to each session, worked out before it is saved (pure).

Every field that moves a session's pressure or its bill is covered: the thresholds (the band),
the reserved output tokens and the profile's windows (the usable window, hence the pressure) and
the cache TTL (the tier cache writes without one are billed at). The figures are computed with
the rules ingest applies — the window in force (`telemetry.windows.window_in_force`), pressure
over the usable window (`telemetry.pressure.pressure_or_unknown`) and the band
(`telemetry.pressure.pressure_band`) — so what the preview promises is what the next report, or
the recompute after the save (`telemetry.session_state.recompute_pressure_batch`), stores.

Standard library and the pure telemetry modules only: no Django, no clock.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from telemetry.errors import FieldError
from telemetry.policy_rules import PolicyValues
from telemetry.pressure import PressureBand, pressure_band, pressure_or_unknown
from telemetry.usage import untiered_write_tier
from telemetry.windows import DEFAULT_KEY, LearnedWindow, WindowInForce, window_in_force

# Bands from least to most pressing; "unknown" ranks below "ok" (nothing is known to press).
BAND_ORDER: Final[tuple[PressureBand, ...]] = ("unknown", "ok", "prune", "compact", "over")
_AT_PRUNE: Final = frozenset({"prune", "compact", "over"})
_AT_COMPACT: Final = frozenset({"compact", "over"})
EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What a session's stored row says (the figures of its latest report)."""

    session_id: int
    profile_id: int
    model: str
    projected_tokens: int | None
    window_tokens: int | None
    window_source: str
    learned: LearnedWindow | None
    pressure: float | None
    has_transcript: bool = False
    has_calls: bool = True
    external_id: str = ""
    # the agent the session's doors named (`AgentSession.agent_name`), "" when none did: its
    # untiered cache writes are billed at the tier `telemetry.usage.untiered_write_tier` gives
    agent: str = ""


@dataclass(frozen=True, slots=True)
class CatalogueWindow:
    """A model's catalogue family and standard window (None: not in the catalogue)."""

    family: str | None
    window_tokens: int | None


UNKNOWN_MODEL: Final = CatalogueWindow(None, None)


@dataclass(frozen=True, slots=True)
class ProfileSetting:
    """What a profile's sessions are figured with: its effective policy and its windows."""

    policy: PolicyValues
    windows: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Figures:
    window: WindowInForce | None
    pressure: float | None
    band: PressureBand
    usable: int | None


def _figures(window: WindowInForce | None, pressure: float | None, policy: PolicyValues) -> Figures:
    tokens = window.tokens if window is not None else None
    usable = None if tokens is None else tokens - policy.reserved_output_tokens
    return Figures(
        window=window,
        pressure=pressure,
        band=pressure_band(pressure, policy.prune_threshold, policy.summarize_threshold),
        usable=usable if usable is not None and usable > 0 else None,
    )


def stored_figures(facts: SessionFacts, setting: ProfileSetting) -> Figures:
    """The figures the console shows now: the stored window and pressure, banded by `setting`."""
    window = (
        WindowInForce(facts.window_tokens, facts.window_source)  # type: ignore[arg-type]
        if facts.window_tokens is not None and facts.window_source
        else None
    )
    return _figures(window, facts.pressure, setting.policy)


def resolved_window(
    facts: SessionFacts, setting: ProfileSetting, catalogue: CatalogueWindow
) -> WindowInForce | None:
    """The window ingest would put in force for the session under `setting`. A window the agent
    reported with its call stays (it is stored as the "record" source); a learned overflow limit
    and the catalogue are read as ingest reads them."""
    record = facts.window_tokens if facts.window_source == "record" else None
    return window_in_force(
        model=facts.model,
        record_window=record,
        learned=facts.learned,
        overrides=setting.windows,
        family=catalogue.family,
        catalogue_window=catalogue.window_tokens,
    )


def recomputed_figures(
    facts: SessionFacts, setting: ProfileSetting, catalogue: CatalogueWindow
) -> Figures:
    """The window, pressure and band the session gets under `setting` (its projection is kept:
    the projected next request does not depend on the policy)."""
    window = resolved_window(facts, setting, catalogue)
    pressure = pressure_or_unknown(
        facts.projected_tokens,
        window.tokens if window else None,
        setting.policy.reserved_output_tokens,
    )
    return _figures(window, pressure, setting.policy)


@dataclass(frozen=True, slots=True)
class SessionChange:
    facts: SessionFacts
    before: Figures
    after: Figures
    billing: bool

    @property
    def band_moves(self) -> bool:
        return self.before.band != self.after.band

    @property
    def usable_moves(self) -> bool:
        return self.before.usable != self.after.usable

    @property
    def rewrites_figures(self) -> bool:
        """The stored window or pressure would change (the recompute after the save writes it)."""
        return (
            self.before.window != self.after.window or self.before.pressure != self.after.pressure
        )

    @property
    def changes_anything(self) -> bool:
        return self.band_moves or self.usable_moves or self.billing


def session_change(
    facts: SessionFacts,
    before: ProfileSetting,
    after: ProfileSetting,
    catalogue: CatalogueWindow,
) -> SessionChange:
    """The session now (stored figures under `before`) against the session under `after`.

    Billing moves when a session that reports calls would have its untiered cache writes billed
    at another tier: the tier `telemetry.usage.untiered_write_tier` gives its agent under each
    TTL (a Claude Code session writes at 5 minutes whatever the profile's TTL says)."""
    return SessionChange(
        facts=facts,
        before=stored_figures(facts, before),
        after=recomputed_figures(facts, after, catalogue),
        billing=facts.has_calls and billing_moves(facts.agent, before, after),
    )


def billing_moves(agent: str, before: ProfileSetting, after: ProfileSetting) -> bool:
    """Whether `agent`'s untiered cache writes are billed at another tier after the change."""
    named = agent or None
    return untiered_write_tier(named, before.policy.cache_ttl) != untiered_write_tier(
        named, after.policy.cache_ttl
    )


@dataclass(frozen=True, slots=True)
class BandMove:
    session_id: int
    external_id: str
    before: PressureBand
    after: PressureBand
    pressure_before: float | None
    pressure_after: float | None


@dataclass(frozen=True, slots=True)
class PolicyEffects:
    """What a change would do, counted over the sessions it reaches.

    `prune_now` / `compact_now`: sessions at or above the prune / summarize threshold after the
    change; `prune_new` / `compact_new`: those of them that are not there now; `relief_new`: the
    newly-at-prune with a transcript (automatic compaction acts on them at their next report).
    `moves`: (band before, band after) → sessions; `usable_moves`: sessions whose usable window
    changes; `billing`: sessions whose tierless cache writes would be billed at another TTL;
    `recovered` / `lost`: pressure becomes known / unknown; `rewrites`: stored figures the
    recompute would change."""

    sessions: int = 0
    prune_now: int = 0
    prune_new: int = 0
    compact_now: int = 0
    compact_new: int = 0
    relief_new: int = 0
    moves: tuple[tuple[PressureBand, PressureBand, int], ...] = ()
    usable_moves: int = 0
    billing: int = 0
    recovered: int = 0
    lost: int = 0
    rewrites: int = 0
    examples: tuple[BandMove, ...] = ()

    @property
    def band_moves(self) -> int:
        return sum(count for _, _, count in self.moves)

    @property
    def changes_anything(self) -> bool:
        """A save with these effects needs the confirm step."""
        return bool(self.band_moves or self.usable_moves or self.billing)


def summarize_changes(changes: Iterable[SessionChange]) -> PolicyEffects:
    """Count `changes` (one per session). Examples: the first band moves, most pressing first."""
    counts: Counter[str] = Counter()
    moves: Counter[tuple[PressureBand, PressureBand]] = Counter()
    examples: list[BandMove] = []
    for change in changes:
        before, after = change.before.band, change.after.band
        counts["sessions"] += 1
        counts["prune_now"] += after in _AT_PRUNE
        counts["compact_now"] += after in _AT_COMPACT
        newly_prune = after in _AT_PRUNE and before not in _AT_PRUNE
        counts["prune_new"] += newly_prune
        counts["compact_new"] += after in _AT_COMPACT and before not in _AT_COMPACT
        counts["relief_new"] += newly_prune and change.facts.has_transcript
        counts["usable_moves"] += change.usable_moves
        counts["billing"] += change.billing
        counts["recovered"] += change.before.pressure is None and change.after.pressure is not None
        counts["lost"] += change.before.pressure is not None and change.after.pressure is None
        counts["rewrites"] += change.rewrites_figures
        if change.band_moves:
            moves[(before, after)] += 1
            examples.append(
                BandMove(
                    change.facts.session_id,
                    change.facts.external_id,
                    before,
                    after,
                    change.before.pressure,
                    change.after.pressure,
                )
            )
    examples.sort(key=lambda move: (-BAND_ORDER.index(move.after), move.session_id))
    return PolicyEffects(
        moves=tuple(
            (before, after, count)
            for (before, after), count in sorted(
                moves.items(), key=lambda item: (BAND_ORDER.index(item[0][1]), item[0])
            )
        ),
        examples=tuple(examples[:EXAMPLES]),
        **counts,
    )


# --- the reserve must leave room in every window the profile uses ----------------------------


@dataclass(frozen=True, slots=True)
class WindowUse:
    """A window a profile uses, and what uses it ("model X", "the profile's default window")."""

    tokens: int
    what: str


def configured_windows(windows: Mapping[str, object]) -> list[WindowUse]:
    """The profile's own window settings (the ones `window_in_force` would read)."""
    found = []
    for name, tokens in windows.items():
        if type(tokens) is int and tokens > 0:
            what = "the profile's default window (*)" if name == DEFAULT_KEY else f"model {name}"
            found.append(WindowUse(tokens, what))
    return found


def windows_in_use(
    setting: ProfileSetting,
    sessions: Iterable[SessionFacts],
    catalogue: Mapping[str, CatalogueWindow],
) -> list[WindowUse]:
    """The profile's configured windows and the windows its sessions resolve under `setting`."""
    found = configured_windows(setting.windows)
    for facts in sessions:
        window = resolved_window(facts, setting, catalogue.get(facts.model, UNKNOWN_MODEL))
        if window is not None:
            found.append(WindowUse(window.tokens, f"model {facts.model or 'unknown'}"))
    return found


def refuse_reserve_beyond_windows(
    reserve: int, windows: Iterable[WindowUse], *, field: str = "reserved_output_tokens"
) -> None:
    """Raise FieldError on `field` when `reserve` leaves no input room in a window in use, naming
    the reserve and the smallest such window: no request of that model could fit (pressure would
    be unknown, `telemetry.pressure.pressure`)."""
    tight = min(
        (use for use in windows if use.tokens <= reserve),
        key=lambda use: (use.tokens, use.what),
        default=None,
    )
    if tight is not None:
        raise FieldError(
            field,
            f"reserve {reserve:,} ≥ window {tight.tokens:,} of {tight.what}: no request would "
            "fit; lower the reserve or raise the window",
        )


# --- the confirm step is bound to what was previewed -------------------------------------------


def proposal_digest(target: str, values: Mapping[str, object], state: str) -> str:
    """A digest of the proposed `values` for `target` (a profile or the global policy) over the
    stored `state` they were previewed against. A confirm carrying another digest is stale: the
    values changed after the preview, or someone else saved meanwhile."""
    canonical = json.dumps(
        {"target": target, "values": dict(values), "state": state},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]
