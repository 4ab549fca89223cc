"""The shared cache unreachable (issue 41 item 4): rate limits count a per-process share of the
budget and sign-in keeps working and throttling (its counts are in the database); never a 500,
never a long wait.
The live version against a frozen redis-server under load is in test_faults."""

from __future__ import annotations

import logging
import time

import pytest
from django.test import Client

from telemetry import shared_cache
from telemetry.ratelimit import RateLimited, check_rate
from tests.db.test_login_throttle import PASSWORD, sign_in
from tests.live import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache_down(settings):
    """CACHE_URL at a port nobody listens on, with the settings' timeouts."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    shared_cache.local.clear()
    yield
    shared_cache.local.clear()
    shared_cache._down_since = None
    shared_cache._retry_at = 0.0


def _admitted(key_id: int, budget: int, attempts: int) -> int:
    admitted = 0
    for _ in range(attempts):
        try:
            check_rate(key_id, limit=budget, now=60.0 * 1000 + 1)
        except RateLimited:
            continue
        admitted += 1
    return admitted


@pytest.mark.parametrize("budget", [100, 6000])
def test_with_the_cache_down_a_process_admits_its_share_of_the_budget(
    cache_down, settings, caplog, budget
):
    settings.WEB_PROCESSES = 4
    with caplog.at_level(logging.ERROR, logger="telemetry.shared_cache"):
        admitted = _admitted(7, budget, budget)
    share = budget // 4
    assert share - budget // 500 <= admitted <= share + budget // 500
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "CACHE_URL" in caplog.records[0].message and len(caplog.records) == 1


def test_with_the_cache_down_requests_never_wait_for_it_more_than_once_per_retry(cache_down):
    started = time.monotonic()
    _admitted(8, 6000, 2000)
    assert time.monotonic() - started < shared_cache.RETRY_SECONDS + 1


def test_with_the_cache_down_the_api_answers_and_refuses_with_429_past_the_share(
    cache_down, agent, settings
):
    settings.WEB_PROCESSES = 2
    settings.API_RATE_LIMIT_PER_MINUTE = 6
    codes = [agent.get("/api/v1/policy").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]


def test_with_the_cache_down_sign_in_works_and_still_throttles(cache_down, settings):
    from django.contrib.auth import get_user_model

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    get_user_model().objects.create_user("ops", "ops@example.com", PASSWORD)
    client = Client()
    assert sign_in(client, "/accounts/login/", "ops", PASSWORD).status_code == 302
    wrong = [sign_in(Client(), "/accounts/login/", "ops", "wrong").status_code for _ in range(5)]
    assert wrong == [200, 200, 200, 200, 429]  # counted in the database, not the cache
    refused = sign_in(Client(), "/accounts/login/", "ops", PASSWORD)
    assert refused.status_code == 429 and b"Too many failed sign-ins" in refused.content
    admin = sign_in(Client(), "/admin/login/", "ops", PASSWORD, address="10.0.0.2")
    assert admin.status_code in (200, 302)  # ops is no staff: the form again, never a 500
