"""Per-key request rate limit: a fixed one-minute window counted in Django's cache.

One key's burst cannot starve the others: each key has its own budget. With the default
in-process cache the budget is per web process; set `CACHE_URL=redis://…` so every process
shares one count.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache


class RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limit exceeded; retry after {retry_after}s")
        self.retry_after = retry_after


def check_rate(key_id: int, *, limit: int | None = None, now: float | None = None) -> None:
    """Count one request of `key_id`; raise `RateLimited` once the minute's budget is spent."""
    budget = limit if limit is not None else settings.API_RATE_LIMIT_PER_MINUTE
    moment = time.time() if now is None else now
    window = int(moment // 60)
    cache_key = f"ratelimit:{key_id}:{window}"
    # add() is atomic: only the first request of a window creates the counter.
    if cache.add(cache_key, 1, timeout=120):
        count = 1
    else:
        try:
            count = cache.incr(cache_key)
        except ValueError:  # the counter expired between add() and incr()
            cache.set(cache_key, 1, timeout=120)
            count = 1
    if count > budget:
        raise RateLimited(retry_after=max(1, 60 - int(moment % 60)))
