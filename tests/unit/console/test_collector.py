"""`console.collector.tune_collector`: freezes what is alive and sets the thresholds; 0 leaves
CPython's defaults. The interpreter's own collector, restored after each test."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from console.collector import OLDER_THRESHOLDS, tune_collector


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*saved)


def test_a_threshold_freezes_what_is_alive_and_is_in_force():
    gc.unfreeze()
    alive = {"loaded": ["at start-up"]}
    assert any(o is alive for o in gc.get_objects())  # walked by every full collection
    assert tune_collector(50_000) == (50_000, *OLDER_THRESHOLDS)
    assert gc.get_threshold() == (50_000, *OLDER_THRESHOLDS)
    assert gc.get_freeze_count() > 0
    assert not any(o is alive for o in gc.get_objects())  # frozen: walked no more


def test_zero_keeps_the_defaults_and_freezes_nothing():
    gc.unfreeze()
    before = gc.get_threshold()
    assert tune_collector(0) == before
    assert gc.get_freeze_count() == 0


def test_cycles_are_still_collected_after_tuning():
    tune_collector(50_000)

    class Node:
        other: object

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
