"""Is a function linear in its text? Measured as a ratio to a linear regex scan of the same text.

No wall-clock bound: the machine may be slow or busy, but it is busy for both measurements. A
quadratic scan of a megabyte runs for hours, so the function runs in a forked child that is
stopped once it has taken `RATIO` times the baseline: the test then fails at once instead of
hanging.
"""

from __future__ import annotations

import multiprocessing
import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

MEGABYTE: Final = 1_000_000
# A linear scan runs 1-5 x this baseline; a quadratic one ~10^5 x on a megabyte.
RATIO: Final = 60
# One regex step per character (the baseline): a class test, then a character never present.
_BASELINE: Final = re.compile(r"[^\W_]\x00")


def seconds(work: Callable[[], Any], *, repeat: int = 3) -> float:
    """The least time of `repeat` runs of `work`."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


@lru_cache(maxsize=16)
def baseline(text: str) -> float:
    """A linear scan of `text` by the regex engine: what a linear pattern costs, roughly."""
    assert "\x00" not in text
    return seconds(lambda: _BASELINE.search(text), repeat=5)


def ratio_to_linear(work: Callable[[str], Any], text: str) -> float:
    """How many times a linear scan of `text` `work(text)` takes (at most RATIO + a bit: a
    slower run is stopped)."""
    linear = baseline(text)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        send.send(seconds(lambda: work(text), repeat=1))

    process = context.Process(target=child)
    process.start()
    finished = receive.poll(RATIO * linear + 0.5)
    taken = receive.recv() if finished else float("inf")
    process.kill()
    process.join()
    return taken / linear
