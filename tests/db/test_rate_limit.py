"""The per-key rate limit holds across web processes without a shared cache (issue 17, item 6):
each process has its own in-memory cache, so the count must live in the database."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from telemetry.models import RateCount
from telemetry.ratelimit import RateLimited, check_rate

pytestmark = pytest.mark.django_db


def test_the_budget_is_one_across_processes_whose_caches_are_separate(agent, settings):
    settings.API_RATE_LIMIT_PER_MINUTE = 3
    codes = []
    for _ in range(4):
        cache.clear()  # the next request lands on another process, with a cold cache
        codes.append(agent.get("/api/v1/policy").status_code)
    assert codes == [200, 200, 200, 429]


def test_a_key_keeps_one_counter_row_per_live_window():
    for minute in range(5):
        check_rate(42, limit=10, now=minute * 60.0)
        check_rate(42, limit=10, now=minute * 60.0 + 1)
    windows = sorted(RateCount.objects.filter(key_id=42).values_list("window", "count"))
    assert windows == [(3, 2), (4, 2)]
    with pytest.raises(RateLimited):
        for _ in range(10):
            check_rate(42, limit=10, now=4 * 60.0 + 2)


def _requests_of_processes(monkeypatch, order: list[int], budget: int) -> list[bool]:
    """Run one request per entry of `order` on the simulated process it names (each process
    holds its own leases, as each web process does); True where the request was admitted."""
    from telemetry import ratelimit

    held: dict[int, dict[tuple[int, int, int], object]] = {}
    admitted = []
    for process in order:
        monkeypatch.setattr(ratelimit, "_leases", held.setdefault(process, {}))
        try:
            check_rate(7, limit=budget, now=1_200.0)
        except RateLimited:
            admitted.append(False)
        else:
            admitted.append(True)
    return admitted


def test_leases_never_admit_more_than_the_budget_across_processes(monkeypatch):
    from telemetry.ratelimit import lease_size

    budget = 5_000  # leases of 10 numbers
    size = lease_size(budget)
    assert size == 10
    order = [i % 3 for i in range(6_000)]  # three processes taking turns
    admitted = _requests_of_processes(monkeypatch, order, budget)
    # Never more than the budget; refused early by at most what each process still held.
    assert sum(admitted) <= budget
    assert sum(admitted) >= budget - 3 * (size - 1)
    # One statement a lease: the shared count moved in steps of the lease.
    stored = RateCount.objects.get(key_id=7, window=20).count
    assert stored % size == 0 and stored >= 6_000 - 3 * size


def test_a_lease_is_taken_from_the_shared_count_once_per_lease_size(monkeypatch, settings):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        admitted = _requests_of_processes(monkeypatch, [0] * 25, 5_000)
    assert all(admitted)
    counter = [q for q in ctx.captured_queries if "telemetry_ratecount" in q["sql"]]
    assert 3 <= len(counter) <= 4  # 25 requests in leases of 10 (and one cleanup of old windows)
