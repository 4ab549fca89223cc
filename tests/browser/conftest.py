"""Chromium (Debian's, through Playwright's sync API) against pytest-django's live server.

The data is made through the real ingest service with real keys; the people are Django users
in the console's role groups. Each page records JavaScript errors; a test fails on any.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from bench.pages import CHROMIUM, chromium
from compaction.rawjson import Span
from compaction.services import compact_session
from compaction.transcripts import append_messages
from telemetry.catalogue import seed_catalogue
from telemetry.ingest.pipeline import ingest_records
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession
from telemetry.policy_store import update_policy
from tests.support import tool_transcript

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots"
PASSWORD = "browser-test-password-42"
SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server over plain HTTP.

    SecurityMiddleware reads SECURE_SSL_REDIRECT once, when the server thread builds its
    handler, so the override must wrap the server's start (a per-test `settings` change is too
    late). Cookies must not be Secure-only over http://. Static files come from the finders
    (the live server's static handler cannot resolve manifest-hashed names).
    """
    from django.conf import settings

    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    with override_settings(
        SECURE_SSL_REDIRECT=False,
        SESSION_COOKIE_SECURE=False,
        CSRF_COOKIE_SECURE=False,
        STORAGES=storages,
    ):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def browser(django_db_setup: None) -> Iterator[Any]:
    """One Chromium for the session, started after the test database exists."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":  # CI must run the browser tests, never skip them
            pytest.fail(f"{CHROMIUM} is missing and CI=true (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    # the bench's launch (the flags this machine needs, and the ORM allowed beside Playwright's
    # event loop), so the pages bench and these tests drive the same browser the same way
    with chromium() as launched:
        yield launched


@dataclass
class Page:
    """A Playwright page and the JavaScript errors it logged."""

    page: Any
    errors: list[str] = field(default_factory=list)

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def open_page(browser: Any, live_server: LiveServer) -> Iterator[Callable[[], Page]]:
    contexts: list[Any] = []
    pages: list[Page] = []

    def make(width: int = 1400, height: int = 900) -> Page:
        context = browser.new_context(
            viewport={"width": width, "height": height}, base_url=live_server.url
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        tracked = Page(page)
        page.on("console", lambda m: tracked.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: tracked.errors.append(str(exc)))
        pages.append(tracked)
        return tracked

    yield make
    for context in contexts:
        context.close()
    for tracked in pages:
        assert tracked.errors == [], tracked.errors


def make_user(name: str, role: str) -> User:
    user = User.objects.create_user(name, password=PASSWORD)
    # get_or_create: a transactional test's flush removes the migration's groups
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def sign_in(tracked: Page, username: str, start: str = "/sessions/") -> None:
    """Sign in through the form, landing on `start` (the sessions list unless told)."""
    page = tracked.page
    page.goto(start)
    page.wait_for_url("**/accounts/login/**")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{start}")


def report(key: AgentKey, records: list[dict[str, Any]]) -> None:
    for start in range(0, len(records), 1000):
        ingest_records(key=key, raw_items=records[start : start + 1000], batch=True)


def working_session(
    session_id: str, turns: int, *, start: datetime, prune_at: int = 0, step: int = 1_800
) -> list[dict[str, Any]]:
    """An agent that appends ~`step` tokens a turn and, once its context passes `prune_at`
    tokens, prunes to about half (the whole prefix is written again: a rewrite spike)."""
    records = []
    context = 24_000
    for turn in range(turns):
        if prune_at and context > prune_at:
            context = context // 2
            read, write = 0, context
        else:
            context += step
            read, write = context - step, step
        records.append(
            {
                "session_id": session_id,
                "turn": turn,
                "model": SONNET,
                "usage": {
                    "input_tokens": 350,
                    "cache_creation_input_tokens": write,
                    "cache_read_input_tokens": read,
                    "output_tokens": 700,
                },
                "appended_chars": 6_000,
                "at": (start + timedelta(seconds=40 * turn)).isoformat(),
            }
        )
    return records


@dataclass
class Console:
    key: AgentKey
    fleet_key: AgentKey
    long_session: AgentSession


@pytest.fixture
def console_data(transactional_db: None) -> Console:
    seed_catalogue()
    make_user("ops", "operator")
    make_user("root", "admin")
    make_user("watcher", "viewer")
    key = create_agent_key(profile_name="default").key
    fleet_key = create_agent_key(profile_name="fleet", name="fleet runner").key
    now = datetime.now(UTC)
    # the flush of an earlier transactional test may have removed the seeded D7 override
    update_policy(profile=fleet_key.profile, values={"cache_ttl": "1h"})
    # prune all but 2 rounds, summarize all but 4: a compacted surface shows stubs and a summary
    update_policy(profile=key.profile, values={"keep_rounds": 2, "keep_rounds_verbatim": 4})
    report(
        fleet_key,
        working_session("fleet-refactor-7", 420, start=now - timedelta(hours=5), prune_at=112_000),
    )
    report(key, working_session("chat-support-12", 30, start=now - timedelta(minutes=25)))
    report(
        key, working_session("batch-summaries-3", 8, start=now - timedelta(hours=3), step=12_500)
    )
    local = working_session("local-llama-2", 12, start=now - timedelta(minutes=50))
    report(key, [{**record, "model": "llama-3.3-70b-local"} for record in local])
    long_session = AgentSession.objects.get(external_id="fleet-refactor-7")
    return Console(key=key, fleet_key=fleet_key, long_session=long_session)


def agent_at_work(key: AgentKey, session_id: str, *, compact: bool) -> AgentSession:
    """A session with a transcript, made as an agent makes it: turn 0 reported, then a transcript
    of eight tool rounds appended (surface v1) that turns 1-3 used; with `compact`, a manual
    compaction (v2, archived) that turn 4 used. One user message carries markup that must stay
    text."""
    start = datetime.now(UTC) - timedelta(minutes=10)
    records = working_session(session_id, 5, start=start)
    report(key, records[:1])
    session = AgentSession.objects.get(profile=key.profile, external_id=session_id)
    messages = tool_transcript(8, result_chars=6_000)
    messages[0]["content"] = (
        "The nightly build fails since <script>alert('x')</script> landed in the template. "
        "Find the cause and fix it."
    )
    system = "You are a careful build engineer."
    append_messages(
        session=session,
        fmt="anthropic",
        system=Span(system, f'"{system}"'),
        messages=[Span(m, json.dumps(m)) for m in messages],
    )
    report(key, [{**record, "surface_version": 1} for record in records[1:4]])
    if compact:
        compact_session(session_id=session.pk, mode="manual", requested_by="user:ops")
        after = datetime.now(UTC).isoformat()  # turn 4 starts after the compaction finished
        report(key, [{**records[4], "surface_version": 2, "at": after}])
    session.refresh_from_db()
    return session


def save_confirming(page: Any, button: str, saved: str) -> bool:
    """Click `button`; a change that moves a session's band, window or billing is previewed
    first and asks to confirm ("Save anyway", bound to what was previewed): confirm it, then
    wait for `saved`. True when a confirm was asked."""
    page.click(f"text={button}")
    done = page.locator(f"text={saved}")
    confirm = page.get_by_role("button", name="Save anyway")
    done.or_(confirm).first.wait_for()
    if done.count():
        return False
    confirm.click()
    done.wait_for()
    return True
