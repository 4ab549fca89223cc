"""What a provider's context-length error says about the window (D4, the window in force).

Anthropic: "prompt is too long: 210345 tokens > 200000 maximum". OpenAI Chat: "This model's
maximum context length is 128000 tokens. However, your messages resulted in 130601 tokens";
the Responses API says "...context window of N tokens". The console learns a session's window
this way; so does the client, which bounds its own requests to it while the console is away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# No provider offers more than this; anything larger is a typo (an extra zero), not a window.
MAX_WINDOW: Final = 2**31 - 1

# A number as providers write it ("210,345", "1_000_000"), at most this many digits: a larger one
# is no token count, and `int` of thousands of digits is refused (or slow) anyway.
MAX_DIGITS: Final = 18
# The lookbehind lets a number start only where its run of digits starts. Without it a search
# retried from every digit of a long run and rescanned the rest of it: quadratic in the run.
_NUMBER: Final = r"(?<![\d,_])(\d[\d,_]*)"
_ANTHROPIC_LIMIT: Final = re.compile(_NUMBER + r"\s*tokens?\s*>\s*(\d[\d,_]*)\s*maximum", re.I)
_OPENAI_LIMIT: Final = re.compile(
    r"maximum context (?:length|window) (?:is|of)\s*(\d[\d,_]*)\s*tokens?", re.I
)
_CONTEXT_WINDOW_OF: Final = re.compile(r"context window of\s*(\d[\d,_]*)\s*tokens?", re.I)
_RESULTED_IN: Final = re.compile(r"resulted in\s*(\d[\d,_]*)\s*tokens?", re.I)
# Every pattern that reads an overflow text: each is linear in the text (the console's
# tests/unit/test_client_text_patterns.py runs each against a megabyte of adversarial input).
OVERFLOW_PATTERNS: Final = (_ANTHROPIC_LIMIT, _OPENAI_LIMIT, _CONTEXT_WINDOW_OF, _RESULTED_IN)


class OverflowNumberError(ValueError):
    """An overflow text states a number of more than MAX_DIGITS digits: no token count."""

    def __init__(self, digits: int) -> None:
        super().__init__(
            f"states a number of {digits} digits; a token count has at most {MAX_DIGITS}"
        )
        self.digits = digits


@dataclass(frozen=True, slots=True)
class OverflowLimit:
    """What a provider's context-length error says: the limit and, when stated, the size sent."""

    limit: int
    requested: int | None


def valid_window(value: object) -> bool:
    """A window figure a provider could mean: an int in (0, MAX_WINDOW]."""
    return type(value) is int and 0 < value <= MAX_WINDOW


def parse_overflow_limit(text: str) -> OverflowLimit | None:
    """The window a provider's overflow error states, or None when the text names none.

    Reads Anthropic's "N tokens > M maximum" and OpenAI's "maximum context length is M tokens"
    (and "context window of M tokens"). Limits outside (0, MAX_WINDOW] are ignored. Linear in
    `text`; a stated number of more than MAX_DIGITS digits raises OverflowNumberError.
    """
    found = _ANTHROPIC_LIMIT.search(text)
    if found is not None:
        limit = _number(found[2])
        return OverflowLimit(limit, _number(found[1])) if valid_window(limit) else None
    found = _OPENAI_LIMIT.search(text) or _CONTEXT_WINDOW_OF.search(text)
    if found is not None:
        limit = _number(found[1])
        requested = _RESULTED_IN.search(text)
        return (
            OverflowLimit(limit, _number(requested[1]) if requested else None)
            if valid_window(limit)
            else None
        )
    return None


def _number(text: str) -> int:
    digits = text.replace(",", "").replace("_", "")
    if len(digits) > MAX_DIGITS:
        raise OverflowNumberError(len(digits))
    return int(digits)
