"""Issue 39, item 4 in Chromium at 1440 and 390 px: an admin changes a model's price through the
console, finds the change on the audit page (reached from the header's menu) with their name and
the price before → after, filters it; a viewer has no Audit link; and a turn of a session leads
to its call page (model, request id, tokens, cost, raw usage, cache outcome)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession, CatalogueModel
from tests.browser.conftest import make_user, report, sign_in, working_session

WIDTHS = (1440, 390)


@pytest.fixture
def audited(transactional_db: None) -> AgentSession:
    seed_catalogue()
    make_user("root", "admin")
    make_user("vera", "viewer")
    key = create_agent_key(profile_name="default").key
    now = datetime.now(UTC)
    records = working_session("chat-audit-7", 4, start=now - timedelta(minutes=20))
    report(key, [{**record, "request_id": f"req_{i:03d}"} for i, record in enumerate(records)])
    return AgentSession.objects.get(external_id="chat-audit-7")


def _fits(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def _open_menu(page: Any, width: int) -> None:
    if width < 700 and page.locator(".nav-toggle").is_visible():
        page.click(".nav-toggle")


@pytest.mark.parametrize("width", WIDTHS)
def test_an_admins_price_change_is_on_the_audit_page(
    open_page: Any, audited: AgentSession, width: int
) -> None:
    row = CatalogueModel.objects.get(model="claude-haiku-4-5")
    old = f"{row.input}"
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "root", start=f"/catalogue/{row.pk}/")
    page.fill("#id_input", "1.25")
    page.locator("main button[type=submit]").click()
    page.wait_for_url("**/catalogue/")

    _open_menu(page, width)
    page.get_by_role("link", name="Audit", exact=True).click()
    page.wait_for_url("**/audit/")
    line = page.locator("table.audit tbody tr").first
    text = line.inner_text()
    assert "root" in text and "Model price changed" in text and "claude-haiku-4-5" in text
    change = line.locator("li", has_text="input")
    assert change.locator(".before").inner_text() == old
    assert change.locator(".after").inner_text().startswith("1.25")
    assert _fits(page)
    tracked.screenshot(f"issue39-audit-{width}")

    page.select_option("#id_type", "key")
    page.locator("form.filters button[type=submit]").click()
    page.wait_for_url("**/audit/?*type=key*")
    assert "claude-haiku-4-5" not in page.locator("table.audit").inner_text()
    page.select_option("#id_type", "price")
    page.select_option("#id_period", "24h")
    page.locator("form.filters button[type=submit]").click()
    page.wait_for_url("**/audit/?*type=price*")
    assert "claude-haiku-4-5" in page.locator("table.audit").inner_text()
    assert _fits(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_viewer_has_no_audit_page(open_page: Any, audited: AgentSession, width: int) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "vera")
    _open_menu(page, width)
    assert page.get_by_role("link", name="Audit", exact=True).count() == 0
    # asked outside the page (a refused page would log its 403 as a console error)
    assert page.request.get("/audit/").status == 403


@pytest.mark.parametrize("width", WIDTHS)
def test_a_turn_leads_to_its_call_page(open_page: Any, audited: AgentSession, width: int) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "vera", start=f"/sessions/{audited.pk}/")
    page.locator("#turns tbody tr").first.get_by_role("link", name="3", exact=True).click()
    page.wait_for_url(f"**/sessions/{audited.pk}/calls/**")
    main = page.locator("main").inner_text()
    assert "Call 0 of turn 3" in main
    assert "req_003" in main
    assert "Uncached input" in main and "Raw usage as received" in main
    assert page.locator(".cache-outcome").inner_text() in {"hit", "miss", "no cache to read"}
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
        " > window.innerWidth + 1).map(e => e.tagName + '.' + e.className).slice(0, 5)"
    )
    assert _fits(page), wide
    tracked.screenshot(f"issue39-call-{width}")
