"""The bench's Celery worker: the product's app plus a no-op task and start/end timestamps.

Run as `celery -A bench.celery_app worker`. `task_prerun`/`task_postrun` append
`<event> <task id> <task name> <unix time>` lines to `BENCH_EVENTS_FILE`, so the harness sees
when a job started and ended in the worker whatever the task (P6, P8). The no-op task is P8's
baseline: the broker and pool round trip with no work.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery.signals import task_postrun, task_prerun

from console.celery import app

NOOP_TASK = "bench.noop"
_EVENTS = os.environ.get("BENCH_EVENTS_FILE", "")

__all__ = ["NOOP_TASK", "app"]


@app.task(name=NOOP_TASK, ignore_result=True)
def noop() -> None:
    """Does nothing: the baseline of enqueue → start."""


def _record(event: str, task_id: str | None, name: str) -> None:
    if not _EVENTS:
        return
    stamp = time.time()
    with open(_EVENTS, "a", encoding="utf-8") as out:  # noqa: PTH123 (one short append)
        out.write(f"{event} {task_id} {name} {stamp:.6f} {os.getpid()}\n")


@task_prerun.connect
def _started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    _record("start", task_id, getattr(task, "name", "?"))


@task_postrun.connect
def _ended(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    _record("end", task_id, getattr(task, "name", "?"))
