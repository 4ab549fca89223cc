"""The garbage collector of a web process, tuned for serving requests (pure: standard library only).

CPython collects its youngest generation after every 700 net new container objects, and every
collection of an older generation walks every object still alive there: Django's settings,
URL patterns, templates, models, pydantic's schemas, the modules of the whole stack. A 1,000-record
ingest batch allocates a few hundred thousand objects (records, pydantic models, rows), so the
collector ran hundreds of times per request and spent a tenth to a fifth of its CPU walking
objects that live as long as the process (make bench P1, in process; docs/performance.md).

`tune_collector` is called once the application is loaded (`console.wsgi`): it moves everything
alive then out of the collector's reach for good (`gc.freeze`; nothing of it is garbage) and
collects the youngest generation after `threshold` allocations instead of 700. Garbage cycles
are still collected, later; objects that are not in cycles are freed at once as always.
"""

from __future__ import annotations

import gc

# The older generations: collected after 20 and 10 collections of the one below.
OLDER_THRESHOLDS = (20, 10)


def tune_collector(threshold: int) -> tuple[int, int, int]:
    """Freeze what is alive and set the youngest generation's `threshold` (0: leave CPython's
    defaults and freeze nothing). Returns the thresholds in force."""
    if threshold > 0:
        gc.freeze()
        gc.set_threshold(threshold, *OLDER_THRESHOLDS)
    return gc.get_threshold()
