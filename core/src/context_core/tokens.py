"""Token estimates: chars // 4 in exactly one place (D6), and a per-session affine calibration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# D6: the 4-chars heuristic; precision belongs to provider-reported usage, not a tokenizer.
CHARS_PER_TOKEN = 4

# A calibration needs this many (request_chars, reported_tokens) points before it is trusted.
MIN_CALIBRATION_POINTS = 5

# A fitted slope outside this range means the points do not describe this session's requests
# (mixed models, truncated usage); falling back to chars // 4 is then the honest estimate.
SANE_SLOPE = (0.5, 2.0)


def estimate_tokens(chars: int) -> int:
    """Estimate tokens from characters: `chars // CHARS_PER_TOKEN` (D6). Never negative."""
    return max(chars, 0) // CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class Calibration:
    """An affine per-session fit: tokens ≈ slope · chars/4 + overhead.

    The overhead absorbs what the log does not hold (system prompt, tool schemas). `fitted` is
    False when there were too few points or the fit was not sane; the estimates then fall back to
    `estimate_tokens` exactly, and `reason` says why.
    """

    slope: float = 1.0
    overhead: float = 0.0
    points: int = 0
    fitted: bool = False
    reason: str = "not fitted"

    @classmethod
    def fit(
        cls, points: Sequence[tuple[int, int]], *, min_points: int = MIN_CALIBRATION_POINTS
    ) -> Calibration:
        """Least-squares fit over (request_chars, provider_reported_tokens) points.

        Falls back (fitted=False) with fewer than `min_points` points, no spread in request size,
        a slope outside SANE_SLOPE, or a negative overhead.
        """
        n = len(points)
        if n < min_points:
            return cls(points=n, reason=f"{n} points, {min_points} needed")
        xs = [chars / CHARS_PER_TOKEN for chars, _ in points]
        ys = [float(tokens) for _, tokens in points]
        mean_x = sum(xs) / n
        mean_y = sum(ys) / n
        var_x = sum((x - mean_x) ** 2 for x in xs)
        if var_x == 0.0:
            return cls(points=n, reason="all requests have the same size")
        cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
        slope = cov / var_x
        overhead = mean_y - slope * mean_x
        if not SANE_SLOPE[0] <= slope <= SANE_SLOPE[1]:
            return cls(points=n, reason=f"slope {slope:.3f} outside {SANE_SLOPE}")
        # Measured counts are integers: a true overhead of 0 fits as a hair below it.
        if overhead < -0.01 * mean_y:
            return cls(points=n, reason=f"negative overhead {overhead:.0f}")
        overhead = max(overhead, 0.0)
        return cls(slope=slope, overhead=overhead, points=n, fitted=True, reason="fitted")

    def estimate(self, chars: int) -> int:
        """Tokens of a whole request whose log part has `chars` characters (overhead included)."""
        if not self.fitted:
            return estimate_tokens(chars)
        return round(self.slope * max(chars, 0) / CHARS_PER_TOKEN + self.overhead)

    def delta(self, chars: int) -> int:
        """Tokens of `chars` characters added or removed inside a request (no overhead)."""
        if not self.fitted:
            return estimate_tokens(chars)
        return round(self.slope * max(chars, 0) / CHARS_PER_TOKEN)
