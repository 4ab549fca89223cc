"""Issue 16 item 4 on either backend: a database that refuses connections answers 503 JSON with
Retry-After on the API and a page in the console, and the next request after it is back works.

The outage is real, not mocked: the connection is pointed at a port nothing listens on
(PostgreSQL) or a file that cannot be opened (SQLite). tests/db/test_faults.py stops a real
PostgreSQL cluster under load.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client

from tests.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def database_away() -> Iterator[None]:
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-dir/console.sqlite3"
    else:
        connection.settings_dict["HOST"] = "127.0.0.1"
        connection.settings_dict["PORT"] = str(free_port())
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def test_api_and_console_answer_503_while_the_database_is_away_then_recover(agent):
    client = Client(raise_request_exception=False)
    headers = agent.headers()
    with database_away():
        api = client.get("/api/v1/policy", headers=headers)
        page = client.get("/", HTTP_COOKIE="sessionid=" + "a" * 32)
        ingest = client.post(
            "/api/v1/telemetry", "{}", content_type="application/json", headers=headers
        )
    assert api.status_code == 503 and api["Retry-After"].isdigit()
    assert api.json()["retry_after"] > 0
    assert ingest.status_code == 503
    assert page.status_code == 503 and page["Content-Type"].startswith("text/html")
    assert b"cannot reach its database" in page.content
    assert client.get("/api/v1/policy", headers=headers).status_code == 200
