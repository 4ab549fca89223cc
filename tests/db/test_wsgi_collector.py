"""`console.wsgi` tunes the garbage collector as `WEB_GC_THRESHOLD` says (`console.collector`):
checked in a fresh interpreter that loads the WSGI application as gunicorn does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.db.conftest import ROOT

_PROBE = "import gc, console.wsgi; print(gc.get_threshold()[0], gc.get_freeze_count() > 0)"


@pytest.mark.parametrize(("value", "expected"), [(None, "50000 True"), ("0", "700 False")])
def test_the_wsgi_application_tunes_the_collector(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "WEB_GC_THRESHOLD"}
    if value is not None:
        env["WEB_GC_THRESHOLD"] = value
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == expected


def test_a_bad_threshold_stops_the_process_naming_the_variable():
    env = {**os.environ, "WEB_GC_THRESHOLD": "lots"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "WEB_GC_THRESHOLD must be an integer" in out.stderr


_WARM_PROBE = (
    "import sys, console.wsgi; from django.urls import get_resolver; "
    "print(get_resolver()._populated, 'telemetry.api' in sys.modules)"
)


def test_the_wsgi_application_loads_the_routes_before_its_first_request():
    """Django loads the URL configuration on the first request; a worker does it as it starts
    (`console.warmup`), so no user's request waits for it."""
    out = subprocess.run(
        [sys.executable, "-c", _WARM_PROBE],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True True"
