"""After a large OTLP export the worker gives freed memory back; small exports pay nothing."""

from __future__ import annotations

from telemetry.otlp.heap import LARGE_BYTES, release_after


def test_only_an_export_inflated_past_the_threshold_is_followed_by_a_release():
    assert release_after(0) is False
    assert release_after(LARGE_BYTES - 1) is False
    assert release_after(LARGE_BYTES) is True
