"""When a failed automatic relief is tried again (D4; D5: loud), as a pure rule.

The sweeper applies it to each session whose latest automatic runs failed in a row
(`compaction.relief_state`): wait out an exponential backoff, retry, and at the cap give up.
"""

from __future__ import annotations

from typing import Literal

RetryDecision = Literal["wait", "retry", "give_up"]


def retry_backoff_seconds(failures: int, *, base_seconds: int) -> int:
    """How long after its latest failure a session is tried again: `base_seconds` doubled per
    failure in a row after the first (1 → base, 2 → 2 × base, 3 → 4 × base, …).

    Requires failures ≥ 1 and base_seconds ≥ 1. Strictly increasing in `failures`.
    """
    if failures < 1:
        raise ValueError(f"a retry follows a failure, got {failures} failures")
    if base_seconds < 1:
        raise ValueError(f"the base delay must be at least one second, got {base_seconds}")
    return base_seconds << (failures - 1)


def retry_decision(
    failures: int, *, elapsed_seconds: float, base_seconds: int, max_attempts: int
) -> RetryDecision:
    """What the sweeper does with a session whose last `failures` automatic reliefs failed,
    `elapsed_seconds` after the latest of them finished.

    "give_up" once `failures` reaches `max_attempts` (whatever the time: no retry past the cap);
    else "retry" once the backoff has passed (`elapsed_seconds ≥ retry_backoff_seconds`), else
    "wait". Requires failures ≥ 1 and max_attempts ≥ 1.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    backoff = retry_backoff_seconds(failures, base_seconds=base_seconds)
    if failures >= max_attempts:
        return "give_up"
    return "retry" if elapsed_seconds >= backoff else "wait"


def retry_wait_seconds(
    failures: int, *, elapsed_seconds: float, base_seconds: int, max_attempts: int
) -> float | None:
    """How long until `retry_decision` says "retry": 0 once it does, None when it never will
    (the cap is reached: "give_up"). What the session page shows as the next try."""
    decision = retry_decision(
        failures,
        elapsed_seconds=elapsed_seconds,
        base_seconds=base_seconds,
        max_attempts=max_attempts,
    )
    if decision == "give_up":
        return None
    return max(
        float(retry_backoff_seconds(failures, base_seconds=base_seconds)) - elapsed_seconds, 0.0
    )
