"""The read replica's router (`console.routers`, `console.replica`): read-only pages read from
the replica alias, writes and read-your-writes pages from the primary.

The replica alias here is a second connection to the test database (a TEST mirror), as
`DATABASE_REPLICA_URL` makes one in production: the queries each connection ran say which
database a page read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import AnonymousUser
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.replica import reads_from_replica, replica_reads_allowed
from console.routers import ReplicaRouter
from telemetry.models import AgentSession
from tests.db.conftest import PASSWORD, make_user
from tests.db.test_console_views import make_session

ALIAS = "replica"


@pytest.fixture(scope="module", autouse=True)
def _replica_alias(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """A second alias on the test database, as settings make one from DATABASE_REPLICA_URL."""
    added = ALIAS not in django_settings.DATABASES
    if added:
        primary = connections["default"].settings_dict
        mirror = {**primary, "TEST": {**primary["TEST"], "MIRROR": "default"}}
        django_settings.DATABASES[ALIAS] = mirror
        connections.settings[ALIAS] = mirror
    yield
    if added:
        connections[ALIAS].close()
        del connections[ALIAS]
        connections.settings.pop(ALIAS, None)  # may be the same dict as DATABASES
        django_settings.DATABASES.pop(ALIAS, None)


@pytest.fixture
def routed(settings: Any) -> None:
    settings.REPLICA_DATABASE = ALIAS


@pytest.fixture
def viewer(make_agent: Any) -> tuple[Client, AgentSession]:
    agent = make_agent("default")
    session = make_session(agent.key, "replica-1")
    make_user("replica-viewer", "superuser")
    client = Client()
    assert client.login(username="replica-viewer", password=PASSWORD)
    return client, session


def _sql(queries: CaptureQueriesContext) -> str:
    return " ".join(query["sql"] for query in queries.captured_queries)


def _page(client: Client, path: str) -> tuple[str, str]:
    """The SQL a GET of `path` ran on the primary and on the replica."""
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections[ALIAS]) as replica,
    ):
        response = client.get(path)
    assert response.status_code == 200, response.content[:500]
    return _sql(primary), _sql(replica)


pytestmark = pytest.mark.django_db(transaction=True, databases=["default", ALIAS])


@pytest.mark.usefixtures("routed")
@pytest.mark.parametrize("name", ["overview", "sessions", "cache", "archives"])
def test_read_only_pages_read_the_replica_and_the_user_from_the_primary(
    viewer: tuple[Client, AgentSession], name: str
) -> None:
    client, _ = viewer
    primary, replica = _page(client, reverse(name))
    assert replica, "the page read nothing from the replica"
    # the sign-in is read where it was written, and nothing else is
    assert "django_session" in primary and "django_session" not in replica
    assert "telemetry_" not in primary and "compaction_" not in primary, primary


@pytest.mark.usefixtures("routed")
def test_the_session_page_reads_its_own_writes_from_the_primary(
    viewer: tuple[Client, AgentSession],
) -> None:
    client, session = viewer
    primary, replica = _page(client, reverse("session", args=[session.pk]))
    assert replica == ""
    assert "telemetry_agentsession" in primary


def test_without_a_replica_every_page_reads_the_primary(
    viewer: tuple[Client, AgentSession],
) -> None:
    client, _ = viewer
    primary, replica = _page(client, reverse("sessions"))
    assert replica == ""
    assert "telemetry_agentsession" in primary


@pytest.mark.usefixtures("routed")
def test_writes_posts_and_transactions_stay_on_the_primary() -> None:
    router = ReplicaRouter()

    seen: list[tuple[bool, str | None, str | None, str | None]] = []

    @reads_from_replica
    def page(request: HttpRequest) -> HttpResponse:
        reads = router.db_for_read(AgentSession)
        with transaction.atomic():
            in_transaction = router.db_for_read(AgentSession)
        writes = router.db_for_write(AgentSession)
        seen.append((replica_reads_allowed(), reads, writes, in_transaction))
        return HttpResponse()

    request = HttpRequest()
    request.method = "GET"
    request.user = AnonymousUser()
    page(request)
    assert seen.pop() == (True, ALIAS, "default", None)
    assert not replica_reads_allowed()
    assert router.db_for_read(AgentSession) is None  # outside a read-only page
    request.method = "POST"
    page(request)
    assert seen.pop() == (False, None, "default", None)
    assert router.allow_migrate(ALIAS, "telemetry") is False
    assert router.allow_migrate("default", "telemetry") is None
