"""Issue 39 item 2 in Chromium at 1440 and 390 px: sessions carry their titles and ids on the
list, the list's search finds a title, several users chosen at once filter the list and stay in
the URL, and the session page heads with its title and links its metadata to the list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from tests.browser.conftest import make_user, report, sign_in, working_session

WIDTHS = (1440, 390)
NAMED = {
    "7f0c1a52-0e6b-4f55-9c1e-3a1d2b4c5d6e": {
        "title": "Checkout coupons",
        "user": "ana",
        "repository": "git@github.com:acme/shop.git",
        "branch": "feature/checkout",
        "agent": "claude-code",
        "agent_version": "2.0.31",
    },
    "rollout-billing-retries": {
        "title": "Billing retries after a failed card",
        "user": "bob",
        "repository": "git@github.com:acme/billing.git",
        "branch": "main",
        "agent": "codex",
    },
    "search-ranking-7": {
        "title": "Search ranking for long queries",
        "user": "cy",
        "repository": "git@github.com:acme/search.git",
        "branch": "main",
        "agent": "claude-code",
    },
}


@pytest.fixture
def named(transactional_db: None) -> None:
    seed_catalogue()
    make_user("watcher", "viewer")
    key = create_agent_key(profile_name="default").key
    now = datetime.now(UTC)
    for offset, (sid, meta) in enumerate(NAMED.items()):
        records = working_session(sid, 3, start=now - timedelta(minutes=30 + offset))
        records[0] = {**records[0], "metadata": meta}
        report(key, records)


def _fits(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


@pytest.mark.parametrize("width", WIDTHS)
def test_titles_search_multi_select_filters_and_the_named_session_page(
    open_page: Any, named: None, width: int
) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "watcher")
    rows = page.locator("#sessions tbody tr")
    assert rows.count() == 3
    first = page.locator("tr", has_text="Checkout coupons")
    assert "7f0c1a52-0e6b-4f55-9c1e-3a1d2b4c5d6e" in first.inner_text()  # the id beside it
    assert _fits(page)
    tracked.screenshot(f"issue39-session-titles-{width}")

    # several users at once: the list narrows and the URL keeps both
    page.select_option("select[name=user]", ["ana", "cy"])
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    assert sorted(parse_qs(urlsplit(page.url).query)["user"]) == ["ana", "cy"]
    assert "Billing retries" not in page.locator("#sessions").inner_text()
    tracked.screenshot(f"issue39-session-filters-{width}")
    page.reload()
    assert page.locator("#sessions tbody tr").count() == 2  # kept in the URL
    assert page.locator("select[name=user] option[value=cy]").evaluate("o => o.selected")

    # the search matches titles
    page.goto("/sessions/")
    page.fill("#id_q", "billing retr")
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    assert "Billing retries" in page.locator("#sessions").inner_text()

    # the session page: its title, its id, its metadata linked to the filtered list
    session = AgentSession.objects.get(external_id="7f0c1a52-0e6b-4f55-9c1e-3a1d2b4c5d6e")
    page.goto(f"/sessions/{session.pk}/")
    heading = page.locator("h1")
    assert "Checkout coupons" in heading.inner_text()
    assert session.external_id in heading.inner_text()
    meta = page.locator(".session-meta")
    assert "feature/checkout" in meta.inner_text() and "2.0.31" in meta.inner_text()
    assert _fits(page)
    tracked.screenshot(f"issue39-session-page-title-{width}")
    meta.get_by_role("link", name="ana").click()
    page.wait_for_url("**/sessions/?user=ana")
    assert page.locator("#sessions tbody tr").count() == 1
