"""Bounding: one head + omission marker + tail convention for every oversized text (D3).

The same marker serves write-time bounding (`bound_text`, cap = `max_result_chars`) and pruning
stubs (`pruning.make_stub`), so a reader — human or model — learns one convention.
"""

from __future__ import annotations

from dataclasses import dataclass

# D3: one fixed marker, saying how much was omitted. `{omitted}` is a plain decimal count.
OMISSION_MARKER = "\n[... {omitted} chars omitted ...]\n"

# A cap below this cannot keep both the first and the last character.
MIN_BOUND_CAP = 2

# The fallback marker used when the cap is too small for OMISSION_MARKER (a sane degradation:
# the count does not fit, the fact of an omission still does).
SHORT_OMISSION_MARKER = "\u2026"


def omission_marker(omitted: int) -> str:
    """Return the omission marker stating that `omitted` characters were left out."""
    return OMISSION_MARKER.format(omitted=omitted)


@dataclass(frozen=True, slots=True)
class BoundSpec:
    """The write-time bound in force when a message was appended (D3: `max_result_chars`).

    Recorded on each log message (`Message.bound`), so a later policy change never re-derives the
    surface of messages appended under the old cap.
    """

    max_result_chars: int

    def __post_init__(self) -> None:
        if self.max_result_chars < MIN_BOUND_CAP:
            raise ValueError(
                f"max_result_chars must be at least {MIN_BOUND_CAP}, got {self.max_result_chars}"
            )

    def to_dict(self) -> dict[str, int]:
        return {"max_result_chars": self.max_result_chars}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> BoundSpec:
        return cls(max_result_chars=int(data["max_result_chars"]))


def bound_text(text: str, cap: int) -> str:
    """Bound `text` to at most `cap` characters as head + omission marker + tail.

    Invariants: a text at or under `cap` is returned unchanged; the result never exceeds `cap`;
    the first and last characters are kept; bounding is idempotent. When `cap` is too small for
    the full marker, the one-character SHORT_OMISSION_MARKER stands in (and for `cap == 2` only the
    first and last characters remain). `cap < MIN_BOUND_CAP` raises ValueError: no result could
    keep both ends.
    """
    if cap < MIN_BOUND_CAP:
        raise ValueError(f"cap must be at least {MIN_BOUND_CAP}, got {cap}")
    length = len(text)
    if length <= cap:
        return text
    # Size the marker with the widest count it can need; the real count has no more digits, so
    # the result can only come out shorter than `cap`, never longer.
    marker_len = len(omission_marker(length))
    if cap - marker_len >= 2:
        keep = cap - marker_len
        marker = omission_marker(length - keep)
    elif cap >= 2 + len(SHORT_OMISSION_MARKER):
        keep = cap - len(SHORT_OMISSION_MARKER)
        marker = SHORT_OMISSION_MARKER
    else:
        keep = cap
        marker = ""
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker + text[length - tail :]
