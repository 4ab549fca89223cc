"""The import benchmark's memory figure is the importing process's own (P11's RSS bar).

Linux carries `getrusage(RUSAGE_SELF).ru_maxrss` across exec from the process that forked the
child: the bench, holding several hundred MB by the time P11 runs, made the import's peak read
as its own. `own_peak_rss_kb` reads the peak of the child's own memory image instead.
"""

from __future__ import annotations

import subprocess
import sys

from bench.services import ROOT

CHILD = "from bench.transcripts import own_peak_rss_kb; print(own_peak_rss_kb())"


def test_a_child_started_by_a_large_process_reports_its_own_peak() -> None:
    ballast = bytearray(300 * 1024 * 1024)  # the parent's memory, touched
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    del ballast
    child_peak_mb = int(done.stdout.strip()) / 1024
    assert child_peak_mb < 150, f"the child reported {child_peak_mb:.0f} MB: its parent's peak"
