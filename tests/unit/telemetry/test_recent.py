"""`telemetry.recent.Recent`: values kept for a fixed time by the caller's clock, bounded in
number, and forgotten on request (the policy, catalogue and known-session memories)."""

from __future__ import annotations

from telemetry.recent import Recent


def test_a_value_lives_for_its_seconds_and_a_clock_gone_back_expires_it() -> None:
    kept: Recent[str, int] = Recent(10.0)
    kept.put("a", 1, now=100.0)
    assert kept.get("a", now=109.9) == 1
    assert kept.get("a", now=110.0) is None
    assert kept.get("a", now=99.0) is None
    assert kept.get("b", now=100.0) is None


def test_discard_forgets_one_key_and_the_bound_starts_afresh() -> None:
    kept: Recent[int, str] = Recent(60.0, entries=3)
    for key in range(3):
        kept.put(key, str(key), now=0.0)
    kept.discard(1)
    kept.discard(7)  # absent: nothing happens
    assert [kept.get(k, now=1.0) for k in range(3)] == ["0", None, "2"]
    kept.put(3, "3", now=1.0)
    kept.put(4, "4", now=1.0)  # a fourth key: the memory starts afresh
    assert [kept.get(k, now=2.0) for k in range(5)] == [None, None, None, None, "4"]
