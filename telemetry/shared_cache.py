"""The shared cache (`CACHE_URL=redis://…`) and what its counters do while it is unreachable.

Rate-limit counts (`telemetry.ratelimit`) live in the shared cache so that every web process sees
one count (sign-in failures are counted in the database, `console.limits`). When it cannot be
reached they must not fail the request (a 500): each operation falls back to this process's own
in-memory cache, the outage is logged once as an error when it starts and once when it ends,
and while it lasts the shared cache is tried again at most every `RETRY_SECONDS`, so only that
one request waits for the connect/socket timeout set in `console.settings` (CACHES OPTIONS),
never every request.
With no shared cache configured (the in-process default) nothing here changes anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.core.cache import cache
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

T = TypeVar("T")

# While the shared cache is down, one request in this many seconds tries it again.
RETRY_SECONDS = 2.0

# This process's stand-in for the shared cache during an outage.
local: BaseCache = LocMemCache("shared-cache-fallback", {})

_lock = threading.Lock()
_down_since: float | None = None
_retry_at = 0.0


def is_down() -> bool:
    """Whether the last attempt to reach the shared cache failed (and it has not come back)."""
    return _down_since is not None


def with_fallback(operation: Callable[[BaseCache], T], fallback: Callable[[BaseCache], T]) -> T:
    """`operation(cache)`; while the shared cache is unreachable, `fallback(local)` instead."""
    global _down_since, _retry_at
    now = time.monotonic()
    if _down_since is None or now >= _retry_at:
        try:
            result = operation(cache)
        except (RedisError, OSError) as exc:
            with _lock:
                if _down_since is None:
                    _down_since = now
                    log.error(
                        "the shared cache (CACHE_URL) is unreachable: %s; rate limits count per "
                        "process until it is back",
                        exc,
                    )
                _retry_at = now + RETRY_SECONDS
        else:
            with _lock:
                if _down_since is not None:
                    log.warning(
                        "the shared cache (CACHE_URL) is reachable again after %.0fs; counts are "
                        "shared again",
                        now - _down_since,
                    )
                    _down_since = None
            return result
    return fallback(local)
