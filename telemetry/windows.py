"""The window in force for a session's next request, and where that figure came from.

Standard library only. A model's catalogue window is what it *can* take; the window a call runs
in is, in order:

1. the record's own `window_tokens` (the agent knows what it configured: Codex sends
   `model_context_window`);
2. the limit the provider stated in an overflow error for this session's model ("prompt is too
   long: 210345 tokens > 200000 maximum"): a fact about this session, stronger than any setting;
3. the profile's setting for the model (by id, then by catalogue family), then the profile's
   default (`"*"`): admins know which agents opt in to a 1M beta;
4. the catalogue's *standard* window (opt-in maxima such as 1M are kept apart, never assumed).

Unknown (no record, no setting, model not in the catalogue) stays unknown: pressure is then
shown as unknown, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

# The overflow rule lives in the core (the client reads provider errors too); the names the
# API's callers and tests use are re-exported here.
from context_core.overflow_limit import MAX_DIGITS as MAX_DIGITS
from context_core.overflow_limit import MAX_WINDOW as MAX_WINDOW
from context_core.overflow_limit import OVERFLOW_PATTERNS as OVERFLOW_PATTERNS
from context_core.overflow_limit import OverflowLimit as OverflowLimit
from context_core.overflow_limit import OverflowNumberError, valid_window
from context_core.overflow_limit import parse_overflow_limit as core_parse_overflow_limit
from telemetry.errors import FieldError

WindowSource = Literal["record", "overflow", "profile_model", "profile_default", "catalogue"]

# The profile-wide default in `AgentProfile.window_overrides`; every other key is a model id or
# a catalogue family.
DEFAULT_KEY: Final = "*"


SOURCE_LABELS: Final[Mapping[WindowSource, str]] = {
    "record": "reported by the agent with the call",
    "overflow": "learned from the provider's overflow error",
    "profile_model": "the profile's setting for this model",
    "profile_default": "the profile's default window",
    "catalogue": "the catalogue's standard window",
}


@dataclass(frozen=True, slots=True)
class WindowInForce:
    tokens: int
    source: WindowSource

    @property
    def label(self) -> str:
        return SOURCE_LABELS[self.source]


@dataclass(frozen=True, slots=True)
class LearnedWindow:
    """A limit a provider stated for one model in this session."""

    model: str
    tokens: int


def window_in_force(
    *,
    model: str,
    record_window: int | None,
    learned: LearnedWindow | None,
    overrides: Mapping[str, object],
    family: str | None,
    catalogue_window: int | None,
) -> WindowInForce | None:
    """The first of: record, overflow-learned (same model), profile per model (id, then
    `family`), profile default, catalogue standard window. None when none is known.

    `overrides` is the profile's stored JSON; entries that are not positive ints are ignored
    here (the write path refuses them, see `parse_window_overrides`).
    """
    if record_window is not None:
        return WindowInForce(record_window, "record")
    if learned is not None and learned.model == model:
        return WindowInForce(learned.tokens, "overflow")
    for name in (model, family):
        if name is not None and valid_window(overrides.get(name)):
            return WindowInForce(int(overrides[name]), "profile_model")  # type: ignore[call-overload]
    if valid_window(overrides.get(DEFAULT_KEY)):
        return WindowInForce(int(overrides[DEFAULT_KEY]), "profile_default")  # type: ignore[call-overload]
    if catalogue_window is not None:
        return WindowInForce(catalogue_window, "catalogue")
    return None


def parse_window_overrides(text: str) -> dict[str, int]:
    """Parse the admin's one-per-line `model = tokens` list (`* = tokens` for the default).

    Blank lines and `#` comments are skipped; `_` and `,` in numbers are allowed (200_000,
    200,000). Raises FieldError naming the line for anything else: a missing `=`,
    an empty name, a count that is not a positive integer, a duplicate name.
    """
    parsed: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip().replace("_", "").replace(",", "")
        where = f"line {number}"
        if not sep or not name:
            raise FieldError(where, "write `model = tokens` (or `* = tokens`)")
        if not value.isdigit() or not 0 < int(value) <= MAX_WINDOW:
            raise FieldError(where, f"{value!r} is not a positive number of tokens")
        if name in parsed:
            raise FieldError(where, f"{name!r} is set twice")
        parsed[name] = int(value)
    return parsed


def format_window_overrides(overrides: Mapping[str, object]) -> str:
    """The stored JSON as the editable text `parse_window_overrides` reads back (default first)."""
    names = sorted(overrides, key=lambda name: (name != DEFAULT_KEY, name))
    return "\n".join(
        f"{name} = {overrides[name]}" for name in names if valid_window(overrides[name])
    )


def parse_overflow_limit(text: str, *, field: str = "detail") -> OverflowLimit | None:
    """`context_core.overflow_limit.parse_overflow_limit` for the API: a stated number of more
    than MAX_DIGITS digits is a FieldError on `field` (a 4xx naming it), never a 500."""
    try:
        return core_parse_overflow_limit(text)
    except OverflowNumberError as exc:
        raise FieldError(field, str(exc)) from exc
