"""Issue 39 item 2 in Chromium at 1440 and 390 px: an operator tags a session in place (a bad
tag is refused in place, naming the field), the list shows the tag and filters by it and by a
cost range, and a saved view of that list opens it again."""

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


@pytest.fixture
def fleet(transactional_db: None) -> None:
    seed_catalogue()
    make_user("tagger", "operator")
    key = create_agent_key(profile_name="default").key
    now = datetime.now(UTC)
    for offset, (sid, turns) in enumerate((("short-run", 1), ("long-run", 6), ("mid-run", 3))):
        report(key, working_session(sid, turns, start=now - timedelta(minutes=40 + offset)))


def _fits(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


@pytest.mark.parametrize("width", WIDTHS)
def test_tag_a_session_filter_the_list_by_tag_and_cost_and_save_the_view(
    open_page: Any, fleet: None, width: int
) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "tagger")
    long_run = AgentSession.objects.get(external_id="long-run")

    # on the session page: a bad tag is refused in place, naming the field; a good one is added
    page.goto(f"/sessions/{long_run.pk}/")
    tags = page.locator("#session-tags")
    page.fill("#tag-input", "-bad")
    tags.get_by_role("button", name="Add").click()
    expect(page.locator("#tag-error")).to_contain_text("tags:")
    assert page.locator("#tag-input").get_attribute("aria-invalid") == "true"
    page.fill("#tag-input", "Needs Review, billing")
    page.locator("#session-tags").get_by_role("button", name="Add").click()
    expect(page.locator("#session-tags a.tag")).to_have_count(2)
    expect(page.locator("#tag-error")).to_have_count(0)
    assert _fits(page)
    tracked.screenshot(f"issue39-session-tags-{width}")
    page.get_by_role("button", name="Remove tag billing").click()
    expect(page.locator("#session-tags a.tag")).to_have_count(1)

    # the tag links to the list filtered by it; the row shows the tag
    page.locator("#session-tags a.tag", has_text="needs-review").click()
    page.wait_for_url("**/sessions/?tag=needs-review")
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    assert "needs-review" in page.locator("#sessions tbody tr").inner_text()

    # a cost range from the form narrows the list and stays in the URL
    page.goto("/sessions/")
    expect(page.locator("#sessions tbody tr")).to_have_count(3)
    costs = sorted(s.cost_usd for s in AgentSession.objects.all() if s.cost_usd is not None)
    page.fill("input[name=cost_min]", str(costs[1]))
    page.locator("input[name=cost_min]").dispatch_event("change")
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    assert parse_qs(urlsplit(page.url).query)["cost_min"] == [str(costs[1])]
    assert "short-run" not in page.locator("#sessions").inner_text()

    # save it as a view; it is listed and opens the same list
    page.fill(".view-save input[name=name]", "Costly runs")
    page.get_by_role("button", name="Save view").click()
    expect(page.locator(".saved-views a.view-link", has_text="Costly runs")).to_have_count(1)
    assert _fits(page)
    tracked.screenshot(f"issue39-saved-view-{width}")
    page.goto("/sessions/")
    page.locator(".saved-views a.view-link", has_text="Costly runs").click()
    page.wait_for_url("**cost_min=*")
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
