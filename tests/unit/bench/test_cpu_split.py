"""`bench.inprocess.CpuSplit` (`--split`): inclusive CPU per function, a recursive call counted
once, failures counted too, and the wrapper installed where a module imported the name."""

from __future__ import annotations

import sys
import types

import pytest

from bench.inprocess import CpuSplit


class _Clock:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_recursive_call_is_timed_once_as_part_of_the_outer_one():
    split = CpuSplit(clock=_Clock())

    def countdown(n: int) -> int:
        return 0 if n == 0 else 1 + timed(n - 1)

    timed = split.wrap("countdown", countdown)
    assert timed(3) == 3
    # one outer call: two clock reads, one second apart; the three inner calls add nothing
    assert split.calls == {"countdown": 1} and split.cpu == {"countdown": 1.0}


def test_a_call_that_raises_is_counted_and_the_next_one_timed_again():
    split = CpuSplit(clock=_Clock())

    def fail() -> None:
        raise ValueError("no")

    timed = split.wrap("fail", fail)
    for _ in range(2):
        with pytest.raises(ValueError):
            timed()
    assert split.calls == {"fail": 2} and split.cpu == {"fail": 2.0}
    split.reset()
    assert split.calls == {"fail": 0} and split.cpu == {"fail": 0.0}
    assert "0.000" in split.report(1) and "fail" in split.report(1)


def test_install_patches_the_definition_and_the_modules_that_imported_it():
    home = types.ModuleType("split_home")
    user = types.ModuleType("split_user")

    def step() -> str:
        return "done"

    class Owner:
        def method(self) -> str:
            return "method"

    home.step = step  # type: ignore[attr-defined]
    home.Owner = Owner  # type: ignore[attr-defined]
    user.step = step  # type: ignore[attr-defined]  # `from split_home import step`
    sys.modules.update({"split_home": home, "split_user": user})
    try:
        split = CpuSplit(clock=_Clock())
        split.install([("split_home", "step"), ("split_home", "Owner.method")])
        assert home.step() == "done" and user.step() == "done"
        assert Owner().method() == "method"
        assert split.calls == {"step": 2, "Owner.method": 1}
    finally:
        del sys.modules["split_home"], sys.modules["split_user"]
