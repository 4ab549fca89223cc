"""Post-compaction estimates (D6): how big the next request will be once the surface shrank.

Standard library only. The old rule took the measured request and subtracted chars // 4 of what
the compaction removed: everything chars/4 did not explain was assumed to be fixed overhead
that survives, so a session whose text runs at 2.5 characters per token was estimated at about
twice its real size after a compaction. Here the session's own calls fit

    measured context tokens ≈ overhead + tokens_per_char × surface chars

by least squares (the surface each call used is known exactly, so its characters are too), and
the new surface is estimated with the fit. Too few calls, no spread in size or an insane fit
fall back to the old rule, and the estimate says which it used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from context_core.tokens import CHARS_PER_TOKEN, Calibration

EstimateMethod = Literal["fit", "rule"]

# A fit needs this many calls on distinct surfaces; fewer describe the noise, not the session.
MIN_FIT_CALLS = 4


def fit_surface(
    points: Sequence[tuple[int, int]], *, min_points: int = MIN_FIT_CALLS
) -> Calibration:
    """Least squares over (surface chars the call used, measured context tokens).

    The same affine fit as `Calibration.fit` (tokens ≈ slope · chars/4 + overhead, slope =
    4 × tokens per char), trusted with at least `min_points` points, a spread in size, a slope
    in the sane range and a non-negative overhead; otherwise `fitted` is False.
    """
    return Calibration.fit(points, min_points=min_points)


def tokens_per_char(calibration: Calibration) -> float:
    """The fitted tokens per character (1/4 when not fitted: the chars // 4 rule)."""
    return calibration.slope / CHARS_PER_TOKEN if calibration.fitted else 1 / CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class PostCompactionEstimate:
    tokens: int
    method: EstimateMethod


def post_compaction_estimate(
    calibration: Calibration, *, chars_after: int, tokens_before: int, freed_chars: int
) -> PostCompactionEstimate:
    """The next request's size after a compaction that left `chars_after` characters of surface.

    With a fitted calibration: overhead + tokens_per_char × chars_after ("fit"). Otherwise the
    old rule: `tokens_before` − `freed_chars` // 4, never below 0 ("rule"). Never negative.
    """
    if calibration.fitted:
        return PostCompactionEstimate(max(calibration.estimate(chars_after), 0), "fit")
    freed = max(freed_chars, 0) // CHARS_PER_TOKEN
    return PostCompactionEstimate(max(tokens_before - freed, 0), "rule")


def estimate_error(estimate: int, measured: int) -> float | None:
    """(estimate − measured) / measured: +0.10 means 10 % too high. None when measured is 0."""
    if measured <= 0:
        return None
    return (estimate - measured) / measured
