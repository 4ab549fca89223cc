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
