"""compaction's refusals: what a compaction answers instead of applying (D4, D5).

The services raise them; `console.api` maps every one to HTTP in one handler: 409 with
`error` (the class's code) and `detail`, followed by the run that refused when the refusal has
one (`compaction.api.conflict_payload`, documented as `CompactConflictOut` / `ConflictOut`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # for annotations only: the models module imports nothing from here
    from compaction.models import CompactionRun


class CompactionConflict(Exception):
    """Nothing was applied, for the reason `error` names; `run` records it when there is one."""

    error: ClassVar[str]
    run: CompactionRun | None = None


class CompactionRefused(CompactionConflict):
    """The manual path refused (D5: never lossy); `run` records why."""

    error = "archive_failed"
    run: CompactionRun

    def __init__(self, run: CompactionRun, message: str) -> None:
        super().__init__(message)
        self.run = run


class CompactionBusy(CompactionConflict):
    """Another compaction of the session holds its lock, or the surface moved past the version
    the caller expected; `run` is the superseded run that says so."""

    error = "compaction_busy"
    run: CompactionRun

    def __init__(self, run: CompactionRun) -> None:
        super().__init__(run.reason)
        self.run = run


class OverflowBusy(CompactionConflict):
    """An overflow was reported while another compaction of the session ran: the overflow's
    answer names no run (its 409 is `ConflictOut`), only that compaction was busy."""

    error = "compaction_busy"


class OverflowUnrecoverable(CompactionConflict):
    """A second overflow on a surface version that was already relieved once (D4)."""

    error = "overflow_unrecoverable"
