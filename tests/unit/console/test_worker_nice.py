"""Celery pool processes start `WORKER_NICE` nicer than they were (`console.celery`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_PROBE = """
import os, django
django.setup()
from console.celery import _nicer
before = os.nice(0)
_nicer()
print(os.nice(0) - before)
"""


def _step(value: str) -> int:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "WORKER_NICE": value,
        "DJANGO_SECRET_KEY": "x" * 60,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


def test_a_pool_process_yields_the_cpu_by_worker_nice() -> None:
    assert os.nice(0) + 3 <= 19  # room to be nicer
    assert _step("3") == 3
    assert _step("0") == 0
