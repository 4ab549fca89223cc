"""The telemetry core stays pure: no Django, no compaction (D6 keeps the two apart)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PURE_MODULES = (
    "telemetry.usage",
    "telemetry.pricing",
    "telemetry.pressure",
    "telemetry.cache_tiers",
    "telemetry.cache_misses",
    "telemetry.cache_diagnostics",
    "telemetry.policy_effects",
    "telemetry.session_meta",
    "telemetry.tag_rules",
    "telemetry.zones",
)


@pytest.mark.parametrize("forbidden", ["django", "compaction"])
def test_the_pure_telemetry_modules_import_neither_django_nor_compaction(forbidden):
    # A fresh interpreter: this test process may already have imported anything.
    code = (
        f"import sys, {', '.join(PURE_MODULES)}; "
        f"loaded = sorted(m for m in sys.modules if m == {forbidden!r} or m.startswith({forbidden + '.'!r})); "
        "print(loaded); sys.exit(1 if loaded else 0)"
    )

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stdout + result.stderr
