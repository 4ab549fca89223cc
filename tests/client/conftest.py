"""The Python client (clients/python) against a live console and a local fake provider.

The console is pytest-django's live server (a real HTTP server on the test database, production
settings with the HTTPS redirect off); the provider is `context_console.fake_provider`, a real
HTTP server speaking the Anthropic and OpenAI wire formats. The real `anthropic`, `openai` and
`langchain` packages talk to it. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from context_console import Console, ReportingOptions
from context_console.fake_provider import FakeProvider
from telemetry.keys import create_agent_key
from telemetry.seeding import ensure_defaults
from tests.db.conftest import celery_worker  # noqa: F401 (a fixture)

# The SDKs warn about model names near end-of-life; the fake provider does not care.
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"anthropic\..*")


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server, started with the HTTPS redirect off (see test_simulate)."""
    with override_settings(SECURE_SSL_REDIRECT=False):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(autouse=True)
def _spool_root(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports the console did not take are spooled in the test's own folder, never the user's
    cache (nor replayed from an earlier run's)."""
    monkeypatch.setenv("CONTEXT_CONSOLE_SPOOL_DIR", str(tmp_path / "spool"))


@pytest.fixture(autouse=True)
def _defaults(settings: Any, transactional_db: None) -> None:
    """Transactional (the live server's thread must see the data), seeded defaults present
    (a flush after an earlier transactional test removes them); relief jobs only where a test
    starts a worker (it turns COMPACTION_AUTO_ENQUEUE back on)."""
    ensure_defaults()
    settings.SECURE_SSL_REDIRECT = False
    settings.COMPACTION_AUTO_ENQUEUE = False


@pytest.fixture
def agent_key(transactional_db: None) -> str:
    """A key of the `default` profile that may also compact."""
    return create_agent_key(profile_name="default", scopes=("compact",), name="client").plaintext


@pytest.fixture
def console(live_server: LiveServer, agent_key: str) -> Iterator[Console]:
    client = Console(live_server.url, agent_key, reporting=ReportingOptions(linger_seconds=0.01))
    yield client
    client.close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def make_provider() -> Iterator[Callable[..., FakeProvider]]:
    started: list[FakeProvider] = []

    def make(**options: Any) -> FakeProvider:
        fake = FakeProvider(**options).start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()
