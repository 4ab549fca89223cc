"""A full database is reported as such on either backend: 503 with Retry-After saying "no space
left", never the driver's text (PostgreSQL's names its data file), and `/healthz` unhealthy while
it lasts. The refusal is real, not mocked: on PostgreSQL a trigger raises SQLSTATE 53100
(`disk_full`) with the message the server gives when it cannot extend a file, through psycopg's
own error path; on SQLite the connection's `max_page_count` is held at the current size, so a
write that needs a new page fails with SQLITE_FULL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.db.models import Model

from compaction.models import Archive, CompactionRun, LogMessage
from telemetry import database_errors
from telemetry.models import AgentSession
from tests.support import append_body

pytestmark = pytest.mark.django_db(transaction=True)

# What PostgreSQL says when a data file cannot grow: the path must never reach a client.
SERVER_TEXT = 'could not extend file "base/16384/2619": No space left on device'


@pytest.fixture(autouse=True)
def _forget_full() -> Iterator[None]:
    database_errors.forget_full()
    yield
    database_errors.forget_full()


@contextmanager
def database_full(*models: type[Model]) -> Iterator[None]:
    """Writes to `models` (PostgreSQL) or any write needing a new page (SQLite) fail as full."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("VACUUM")  # no free pages left over from earlier tests to fill
            cursor.execute("PRAGMA page_count")
            (pages,) = cursor.fetchone()
            cursor.execute(f"PRAGMA max_page_count = {int(pages)}")
        else:
            cursor.execute(
                "CREATE OR REPLACE FUNCTION test_disk_full() RETURNS trigger AS $$ BEGIN "
                f"RAISE EXCEPTION '{SERVER_TEXT}' USING ERRCODE = 'disk_full'; END $$ "
                "LANGUAGE plpgsql"
            )
            for model in models:
                table = model._meta.db_table
                cursor.execute(
                    f"CREATE TRIGGER test_disk_full BEFORE INSERT OR UPDATE ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION test_disk_full()"
                )
    try:
        yield
    finally:
        connection.close()  # a fresh connection: SQLite's page cap is per connection
        with connection.cursor() as cursor:
            if connection.vendor != "sqlite":
                for model in models:
                    cursor.execute(f"DROP TRIGGER test_disk_full ON {model._meta.db_table}")
                cursor.execute("DROP FUNCTION test_disk_full()")


def _big_append() -> dict[str, object]:
    # 12 results of 20,000 characters: more than SQLite's free space in pages it already has
    return append_body(12)


def _assert_no_server_text(text: str) -> None:
    assert "base/" not in text and "extend file" not in text and ".sqlite3" not in text
    assert "database or disk is full" not in text


def test_a_full_database_answers_503_saying_so_and_healthz_turns_unhealthy(agent, client):
    assert client.get("/healthz").status_code == 200
    with database_full(LogMessage):
        response = agent.post("/api/v1/sessions/full-1/messages", _big_append())
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["error"] == "database_full"
    assert "no space left" in body["detail"]
    assert int(response["Retry-After"]) == database_errors.FULL_RETRY_AFTER_SECONDS
    _assert_no_server_text(response.content.decode())
    assert not LogMessage.objects.exists()

    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.json()["healthy"] is False and "no space left" in health.json()["detail"]
    database_errors.forget_full()  # space was freed
    assert client.get("/healthz").status_code == 200


def test_manual_compact_on_a_full_database_refuses_without_the_servers_text(compactor, client):
    response = compactor.post("/api/v1/sessions/run-1/messages", _big_append())
    assert response.status_code == 201, response.content
    with database_full(Archive):
        response = compactor.post("/api/v1/sessions/run-1/compact")
    assert "no space left" in response.json()["detail"]
    _assert_no_server_text(response.content.decode())
    if connection.vendor == "sqlite" and response.status_code == 503:
        # SQLite's cap holds every table: a write before the archive may be the one refused
        assert response.json()["error"] == "database_full"
    else:
        # D5: the manual path refuses when its archive cannot be written; the run records why
        assert response.status_code == 409, response.content
        assert response.json()["error"] == "archive_failed"
        run = CompactionRun.objects.get()
        _assert_no_server_text(run.reason + run.archive_error)
    assert not Archive.objects.exists()
    assert client.get("/healthz").status_code == 503


def test_an_otlp_export_on_a_full_database_is_told_to_retry_later(make_agent):
    if connection.vendor != "postgresql":
        pytest.skip("the trigger picks the one table the export writes first")
    from tests.db.test_otlp import DONE_WHEN, TRACES, pb_span, pb_traces, post

    agent = make_agent()
    with database_full(AgentSession):
        response = post(agent, TRACES, pb_traces(pb_span(DONE_WHEN)))
    # 503, not 507: OTLP exporters retry a 503 and drop the batch on a 507
    assert response.status_code == 503
    assert response["Retry-After"] == str(database_errors.FULL_RETRY_AFTER_SECONDS)
    assert b"no space left" in response.content and b"base/" not in response.content
