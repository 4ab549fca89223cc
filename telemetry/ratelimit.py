"""Per-key request rate limit: a fixed one-minute window, one count shared by every process.

One key's burst cannot starve the others: each key has its own budget. The count lives where
every web process sees it: in the configured cache when it is shared (`CACHE_URL=redis://…`),
else in the database (`RateCount`, one atomic upsert per request) — never in a per-process
memory cache, which would multiply the budget by the number of processes.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache

from telemetry.bulk_sql import count_request
from telemetry.models import RateCount


class RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limit exceeded; retry after {retry_after}s")
        self.retry_after = retry_after


def check_rate(key_id: int, *, limit: int | None = None, now: float | None = None) -> None:
    """Count one request of `key_id`; raise `RateLimited` once the minute's budget is spent."""
    budget = limit if limit is not None else settings.API_RATE_LIMIT_PER_MINUTE
    moment = time.time() if now is None else now
    window = int(moment // 60)
    count = _count_shared(key_id, window) if _cache_is_shared() else _count_in_db(key_id, window)
    if count > budget:
        raise RateLimited(retry_after=max(1, 60 - int(moment % 60)))


def _cache_is_shared() -> bool:
    backend = str(settings.CACHES["default"]["BACKEND"])
    return not backend.endswith(("LocMemCache", "DummyCache"))


def _count_in_db(key_id: int, window: int) -> int:
    # One statement in autocommit, atomic on its own: no BEGIN/COMMIT round trips around it
    # (make bench P2), and its row lock ends at once, never held across a request's ingest.
    count = count_request(RateCount, key_id, window)
    if count == 1:  # the key's first request this minute: drop its finished windows
        RateCount.objects.filter(key_id=key_id, window__lt=window - 1).delete()
    return count


def _count_shared(key_id: int, window: int) -> int:
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
    return count
