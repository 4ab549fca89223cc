"""Key checks are remembered per process for at most KEY_CACHE_SECONDS: a busy agent costs one
key query a second, and a key revoked anywhere stops working within a second everywhere."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from telemetry.keys import (
    KEY_CACHE_SECONDS,
    create_agent_key,
    find_active_key,
    forget_key_checks,
    revoke_agent_key,
)
from telemetry.models import AgentKey
from tests.db.conftest import _database_url_for_worker
from tests.live import gunicorn, service_env


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _fresh_checks() -> None:
    forget_key_checks()


@pytest.mark.django_db
def test_a_remembered_check_costs_no_query_and_expires_after_its_age_limit() -> None:
    issued = create_agent_key(profile_name="default")
    clock = Clock()
    assert find_active_key(issued.plaintext, clock=clock) is not None
    # Revoked behind this process's back (as another process would): still remembered ...
    AgentKey.objects.filter(pk=issued.key.pk).update(revoked_at=timezone.now())
    clock.now += KEY_CACHE_SECONDS / 2
    with CaptureQueriesContext(connection) as ctx:
        assert find_active_key(issued.plaintext, clock=clock) is not None
    assert len(ctx.captured_queries) == 0
    # ... but never longer than the age limit.
    clock.now += KEY_CACHE_SECONDS / 2
    assert find_active_key(issued.plaintext, clock=clock) is None


@pytest.mark.django_db
def test_revoking_in_this_process_takes_effect_at_once() -> None:
    issued = create_agent_key(profile_name="default")
    assert find_active_key(issued.plaintext) is not None
    revoke_agent_key(key_id=issued.key.pk)
    assert find_active_key(issued.plaintext) is None


@pytest.mark.django_db
def test_a_wrong_key_is_refused_from_memory_too() -> None:
    issued = create_agent_key(profile_name="default")
    wrong = issued.plaintext[:-2] + ("aa" if not issued.plaintext.endswith("aa") else "bb")
    clock = Clock()
    assert find_active_key(wrong, clock=clock) is None
    with CaptureQueriesContext(connection) as ctx:
        assert find_active_key(wrong, clock=clock) is None
    assert len(ctx.captured_queries) == 0
    assert find_active_key(issued.plaintext, clock=clock) is not None


@pytest.mark.django_db
def test_callers_get_their_own_copy_of_the_key() -> None:
    issued = create_agent_key(profile_name="default")
    first = find_active_key(issued.plaintext)
    assert first is not None
    first.name = "changed by one request"
    second = find_active_key(issued.plaintext)
    assert second is not None and second.name == issued.key.name


def _status(port: int, plaintext: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/policy",
        headers={"Authorization": f"Bearer {plaintext}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_elsewhere_stops_working_within_a_second_on_every_process(
    tmp_path: Path,
) -> None:
    """Two gunicorn worker processes answer in turn; both remember the key, then it is revoked
    by this (third) process: within KEY_CACHE_SECONDS every answer is 401."""
    issued = create_agent_key(profile_name="default")
    env = service_env(
        DATABASE_URL=_database_url_for_worker(), CONSOLE_VAR_DIR=str(settings.VAR_DIR)
    )
    with gunicorn(env, tmp_path / "gunicorn.log", workers=2) as server:
        port = server.port
        # New connections land on either worker: after 30 of them both remember the key.
        assert {_status(port, issued.plaintext) for _ in range(30)} == {200}
        revoke_agent_key(key_id=issued.key.pk)
        revoked = time.monotonic()
        time.sleep(KEY_CACHE_SECONDS + 0.05)
        answers = {_status(port, issued.plaintext) for _ in range(30)}
        assert answers == {401}, answers
        assert time.monotonic() - revoked < 30


@pytest.mark.django_db
def test_a_profile_changed_in_this_process_is_seen_at_once() -> None:
    from telemetry.profiles import set_window_overrides

    issued = create_agent_key(profile_name="windows")
    clock = Clock()
    first = find_active_key(issued.plaintext, clock=clock)
    assert first is not None and first.profile.window_overrides == {}
    set_window_overrides(profile=issued.key.profile, overrides={"*": 200_000})
    again = find_active_key(issued.plaintext, clock=clock)  # same instant: no age expiry
    assert again is not None and again.profile.window_overrides == {"*": 200_000}
