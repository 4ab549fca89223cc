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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from telemetry.errors import FieldError

WindowSource = Literal["record", "overflow", "profile_model", "profile_default", "catalogue"]

# The profile-wide default in `AgentProfile.window_overrides`; every other key is a model id or
# a catalogue family.
DEFAULT_KEY: Final = "*"

# No provider offers more than this; anything larger is a typo (an extra zero), not a window.
MAX_WINDOW: Final = 2**31 - 1

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
        if name is not None and _valid(overrides.get(name)):
            return WindowInForce(int(overrides[name]), "profile_model")  # type: ignore[call-overload]
    if _valid(overrides.get(DEFAULT_KEY)):
        return WindowInForce(int(overrides[DEFAULT_KEY]), "profile_default")  # type: ignore[call-overload]
    if catalogue_window is not None:
        return WindowInForce(catalogue_window, "catalogue")
    return None


def _valid(value: object) -> bool:
    return type(value) is int and 0 < value <= MAX_WINDOW


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
    return "\n".join(f"{name} = {overrides[name]}" for name in names if _valid(overrides[name]))


# A number as providers write it ("210,345", "1_000_000"), at most this many digits: a larger one
# is no token count, and `int` of thousands of digits is refused (or slow) anyway.
MAX_DIGITS: Final = 18
# The lookbehind lets a number start only where its run of digits starts. Without it a search
# retried from every digit of a long run and rescanned the rest of it: quadratic in the run.
_NUMBER: Final = r"(?<![\d,_])(\d[\d,_]*)"
# Anthropic: "prompt is too long: 210345 tokens > 200000 maximum".
_ANTHROPIC_LIMIT: Final = re.compile(_NUMBER + r"\s*tokens?\s*>\s*(\d[\d,_]*)\s*maximum", re.I)
# OpenAI: "This model's maximum context length is 128000 tokens. However, your messages
# resulted in 130601 tokens" (Chat); the Responses API says "...context window of N tokens".
_OPENAI_LIMIT: Final = re.compile(
    r"maximum context (?:length|window) (?:is|of)\s*(\d[\d,_]*)\s*tokens?", re.I
)
_CONTEXT_WINDOW_OF: Final = re.compile(r"context window of\s*(\d[\d,_]*)\s*tokens?", re.I)
_RESULTED_IN: Final = re.compile(r"resulted in\s*(\d[\d,_]*)\s*tokens?", re.I)
# Every pattern that reads an overflow text (tests/unit/test_client_text_patterns.py runs each
# against adversarial input of a megabyte).
OVERFLOW_PATTERNS: Final = (_ANTHROPIC_LIMIT, _OPENAI_LIMIT, _CONTEXT_WINDOW_OF, _RESULTED_IN)


@dataclass(frozen=True, slots=True)
class OverflowLimit:
    """What a provider's context-length error says: the limit and, when stated, the size sent."""

    limit: int
    requested: int | None


def parse_overflow_limit(text: str, *, field: str = "detail") -> OverflowLimit | None:
    """The window a provider's overflow error states, or None when the text names none.

    Reads Anthropic's "N tokens > M maximum" and OpenAI's "maximum context length is M tokens"
    (and "context window of M tokens"). Limits outside (0, MAX_WINDOW] are ignored. Linear in
    `text`; a stated number of more than MAX_DIGITS digits is a FieldError on `field`.
    """
    found = _ANTHROPIC_LIMIT.search(text)
    if found is not None:
        limit, requested = _number(found[2], field), _number(found[1], field)
        return OverflowLimit(limit, requested) if _valid(limit) else None
    found = _OPENAI_LIMIT.search(text) or _CONTEXT_WINDOW_OF.search(text)
    if found is not None:
        limit = _number(found[1], field)
        stated = _RESULTED_IN.search(text)
        size = _number(stated[1], field) if stated else None
        return OverflowLimit(limit, size) if _valid(limit) else None
    return None


def _number(text: str, field: str) -> int:
    digits = text.replace(",", "").replace("_", "")
    if len(digits) > MAX_DIGITS:
        raise FieldError(
            field,
            f"states a number of {len(digits)} digits; a token count has at most {MAX_DIGITS}",
        )
    return int(digits)
