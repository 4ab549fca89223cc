"""Per-key request rate limit: a fixed one-minute window, one count shared by every process.

One key's burst cannot starve the others: each key has its own budget. The count lives where
every web process sees it: in the configured cache when it is shared (`CACHE_URL=redis://…`),
else in the database (`RateCount`, one atomic upsert) — never in a per-process memory cache
alone, which would multiply the budget by the number of processes.

Counted in leases: a process takes the next `lease_size(budget)` numbers of a key's minute from
the shared count at once (one upsert adds them all) and hands them to its requests one by one;
a request whose number passes the budget is refused. Numbers are never handed out twice, so no
key ever gets more than its budget; what a process still holds when the minute ends is not
used by anyone, so a key may be refused up to `lease_size - 1` requests early per process
(a 500th of the budget each: at the default 6,000 a minute a process counts 12 at a time, and
a budget under 1,000 is counted one request at a time, exactly as before). At a fleet's rates
this takes the counter's statement and its commit off all but one request in `lease_size`
(make bench P2, docs/performance.md).

While the shared cache is unreachable (`telemetry.shared_cache`) a process counts in its own
memory and each of its requests counts `WEB_PROCESSES` times: every process gets its share of
the budget, so the fleet together still stays within it (never a 500, never an unlimited key).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache.backends.base import BaseCache
from django.db import connection, models

from telemetry import shared_cache
from telemetry.ingest.statements import log_statement, vendor
from telemetry.models import RateCount

# A lease is this fraction of the budget (at least one request).
LEASE_FRACTION = 500


class RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limit exceeded; retry after {retry_after}s")
        self.retry_after = retry_after


@dataclass
class _Lease:
    next: int  # the number the next request takes
    last: int  # the last number this process holds


# (key, window, budget) -> the numbers this process holds; a budget's change starts a new lease.
_leases: dict[tuple[int, int, int], _Lease] = {}
_lock = threading.Lock()


def lease_size(budget: int) -> int:
    return max(1, budget // LEASE_FRACTION)


def check_rate(key_id: int, *, limit: int | None = None, now: float | None = None) -> None:
    """Count one request of `key_id`; raise `RateLimited` once the minute's budget is spent."""
    budget = limit if limit is not None else settings.API_RATE_LIMIT_PER_MINUTE
    moment = time.time() if now is None else now
    window = int(moment // 60)
    if _take_number(key_id, window, budget) > budget:
        raise RateLimited(retry_after=max(1, 60 - int(moment % 60)))


def _take_number(key_id: int, window: int, budget: int) -> int:
    """This request's number in the key's minute: from the process's lease, or a new lease."""
    slot = (key_id, window, budget)
    with _lock:
        lease = _leases.get(slot)
        if lease is not None and lease.next <= lease.last:
            number = lease.next
            lease.next += 1
            return number
    size = lease_size(budget)
    if _cache_is_shared():
        last = shared_cache.with_fallback(
            lambda shared: _count_in_cache(shared, key_id, window, size),
            lambda local: _count_in_cache(local, key_id, window, size) * _processes(),
        )
    else:
        last = _count_in_db(key_id, window, size)
    first = last - size + 1
    if size > 1:
        with _lock:
            for stale in [s for s in _leases if s[1] < window]:
                del _leases[stale]  # a finished minute's leftovers count for nothing
            _leases[slot] = _Lease(next=first + 1, last=last)
    return first


def _cache_is_shared() -> bool:
    backend = str(settings.CACHES["default"]["BACKEND"])
    return not backend.endswith(("LocMemCache", "DummyCache"))


def count_request(model: type[models.Model], key_id: int, window: int, step: int = 1) -> int:
    """Add `step` to the (key, window) counter row and return its new value, atomically.

    `INSERT … ON CONFLICT DO UPDATE … RETURNING` is one statement on PostgreSQL and on SQLite
    (3.35+): two processes counting at once can never read the same value. Raw SQL because the
    ORM has no upsert that returns the new value.

    On PostgreSQL in autocommit (an API request), the statement runs in its own transaction
    with `synchronous_commit` off, all in one round trip: its commit does not wait for the WAL
    to reach the disk (a second flush per request beside the ingest's own, on a slow disk
    longer than the request's own work, make bench P2). What that risks is the last fraction
    of a second of counts if PostgreSQL itself crashes, a budget briefly undercounted; never a
    stored record. Inside a caller's transaction the statement joins it as it is.
    """
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({quote('key_id')}, {quote('window')}, {quote('count')}) "
        f"VALUES (%s, %s, %s) ON CONFLICT ({quote('key_id')}, {quote('window')}) "
        f"DO UPDATE SET {quote('count')} = {table}.{quote('count')} + excluded.{quote('count')} "
        f"RETURNING {quote('count')}"
    )
    if vendor() == "postgresql" and not connection.in_atomic_block and connection.get_autocommit():
        from psycopg.pq import TransactionStatus

        # Literal integers instead of parameters: several statements in one string go by the
        # simple query protocol, which takes no parameters.
        counted = sql.replace("%s", "{}").format(int(key_id), int(window), int(step))
        started = time.monotonic()
        # The raw driver cursor's errors are Django's as for any statement (a database that is
        # away must still answer 503, `console.middleware`).
        with connection.cursor() as cursor, connection.wrap_database_errors:
            raw = cursor.cursor
            try:
                raw.execute(f"BEGIN; SET LOCAL synchronous_commit TO OFF; {counted}; COMMIT")
                found = None
                while True:  # BEGIN, SET, the counter's row, COMMIT
                    if raw.description is not None:
                        found = raw.fetchone()
                    if not raw.nextset():
                        break
            except Exception:
                # A failed statement leaves the explicit transaction open: end it, so the
                # connection is back in autocommit as Django believes it is.
                if raw.connection.info.transaction_status != TransactionStatus.IDLE:
                    raw.connection.execute("ROLLBACK")
                raise
        log_statement(counted, started)
        assert found is not None
        return int(found[0])
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_id, window, step])
        row = cursor.fetchone()
    return int(row[0])


def _count_in_db(key_id: int, window: int, step: int) -> int:
    # One statement in autocommit, atomic on its own: no BEGIN/COMMIT round trips around it
    # (make bench P2), and its row lock ends at once, never held across a request's ingest.
    count = count_request(RateCount, key_id, window, step)
    if count == step:  # the key's first lease this minute: drop its finished windows
        RateCount.objects.filter(key_id=key_id, window__lt=window - 1).delete()
    return count


def _processes() -> int:
    return int(settings.WEB_PROCESSES)


def _count_in_cache(cache: BaseCache, key_id: int, window: int, step: int) -> int:
    cache_key = f"ratelimit:{key_id}:{window}"
    # add() is atomic: only the first lease of a window creates the counter.
    if cache.add(cache_key, step, timeout=120):
        count = step
    else:
        try:
            count = cache.incr(cache_key, step)
        except ValueError:  # the counter expired between add() and incr()
            cache.set(cache_key, step, timeout=120)
            count = step
    return count
