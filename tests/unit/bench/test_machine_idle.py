"""`bench.load._cpu_idle`: the machine's idle and total jiffies, which only grow, idle within all."""

from __future__ import annotations

import time

from bench.load import _cpu_idle


def test_idle_jiffies_grow_and_stay_within_all():
    idle0, all0 = _cpu_idle()
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:  # busy: the total must move
        pass
    idle1, all1 = _cpu_idle()
    assert 0 < idle0 <= all0 and 0 < idle1 <= all1
    assert idle1 >= idle0 and all1 > all0
    assert 0 <= (idle1 - idle0) / (all1 - all0) <= 1
