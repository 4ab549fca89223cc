"""The health check of a reused PostgreSQL connection (`console.postgres.base`): an idle connection
the server has sent nothing is usable without a round trip; one the server has closed is found
unusable and replaced before the request's first statement; one with something waiting to be
read gets Django's `SELECT 1`, which reads it. Real server, real terminations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql import base as django_base

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's health check"),
]


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    connection.ensure_connection()
    with psycopg.connect(connection.connection.info.dsn, autocommit=True) as other:
        yield other


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the check fell back to Django's own `SELECT 1`."""
    calls: list[int] = []
    original = django_base.DatabaseWrapper.is_usable

    def counted(self: Any) -> bool:
        calls.append(1)
        return bool(original(self))

    monkeypatch.setattr(django_base.DatabaseWrapper, "is_usable", counted)
    return calls


def _checked() -> None:
    """What Django does on a request's first statement with a reused connection."""
    connection.health_check_done = False  # type: ignore[attr-defined]
    connection.close_if_health_check_failed()


def _wait_gone(admin: psycopg.Connection[Any], pid: int) -> None:
    deadline = time.monotonic() + 10
    while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
        assert time.monotonic() < deadline, "the terminated backend did not exit"
        time.sleep(0.02)


def test_an_idle_quiet_connection_is_usable_without_a_round_trip(round_trips):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    pid = connection.connection.info.backend_pid
    for _ in range(3):
        _checked()
    assert connection.connection.info.backend_pid == pid
    assert round_trips == []


def test_a_connection_the_server_terminated_is_replaced_before_the_next_statement(
    admin, round_trips
):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    pid = connection.connection.info.backend_pid
    admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    _wait_gone(admin, pid)
    _checked()  # without the check, the statement below fails: the server has gone
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (new_pid,) = cursor.fetchone()
    assert new_pid != pid
    assert round_trips == [1]  # the socket had the server's goodbye to read


def test_a_connection_with_a_message_waiting_is_asked_and_stays(admin, round_trips):
    with connection.cursor() as cursor:
        cursor.execute("LISTEN health_check_test")
    pid = connection.connection.info.backend_pid
    try:
        admin.execute("NOTIFY health_check_test")
        time.sleep(0.2)  # the notification reaches the idle connection's socket
        _checked()
        assert round_trips == [1]
        assert connection.connection.info.backend_pid == pid
    finally:
        with connection.cursor() as cursor:
            cursor.execute("UNLISTEN *")
