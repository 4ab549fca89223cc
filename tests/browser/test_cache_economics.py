"""Cache economics in Chromium: the session page loads its misses (chart and table) and the
Compact panel's plan and outcome after it renders; the Cache page draws premiums by cause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.browser.conftest import Console, agent_at_work, report, sign_in, working_session

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_the_session_page_loads_its_misses_and_the_compaction_economics(
    open_page, console_data: Console
):
    session = agent_at_work(console_data.key, "cache-econ-1", compact=True)
    tracked = open_page()
    page = tracked.page
    sign_in(tracked, "ops")
    page.goto(f"/sessions/{console_data.long_session.pk}/")
    page.wait_for_selector("#cache-misses table.misses", timeout=15_000)
    assert page.locator("#cache-misses table.misses tbody tr").count() >= 1
    page.wait_for_selector("#chart-misses .scatterlayer .trace", timeout=15_000)
    # the cache chart marks the misses too: its three traces and one per cause
    page.wait_for_function(
        "document.querySelectorAll('#chart-cache .scatterlayer .trace').length === 4"
    )
    assert "miss: unexplained" in (page.locator("#chart-cache .legend").text_content() or "")
    page.locator("#cache-misses").scroll_into_view_if_needed()
    tracked.screenshot("cache-01-misses")

    page.goto(f"/sessions/{session.pk}/")
    page.wait_for_selector("#compact-plan table.plan", timeout=15_000)
    assert "Calls to break even" in page.locator("#compact-plan").inner_text()
    assert page.locator("#compact-plan table.outcomes tbody tr").count() == 1
    page.locator("#compact-plan").scroll_into_view_if_needed()
    tracked.screenshot("cache-02-compact-plan")


def test_the_cache_page_draws_premiums_by_cause(open_page, console_data: Console):
    tracked = open_page()
    page = tracked.page
    sign_in(tracked, "watcher", start="/cache/")
    assert page.get_by_role("link", name="Cache").count() == 1
    tracked.screenshot("cache-03-fleet")
    assert page.locator("h1").inner_text() == "Cache economics"
    page.wait_for_selector("#chart-premiums .barlayer .trace", state="attached", timeout=15_000)
    assert page.get_by_role("link", name="fleet-refactor-7").count() == 1
    tracked.screenshot("cache-03-fleet")


def test_the_cache_pages_profiles_table_fits_1440_px_with_its_ttl_advice(
    open_page, console_data: Console
):
    """The TTL advice is a sentence: it wraps in its cell rather than widen the table past its
    box (the columns after it, and the end of the sentence, were out of view at 1440 px)."""
    records = working_session("idle-then-back", 4, start=datetime.now(UTC) - timedelta(hours=1))
    for record in records[2:]:  # back after 20 minutes: the 5-minute cache has expired
        record["at"] = (datetime.fromisoformat(record["at"]) + timedelta(minutes=20)).isoformat()
    usage = records[2]["usage"]
    records[2]["usage"] = {
        **usage,
        "cache_creation_input_tokens": usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": 0,
    }
    report(console_data.key, records)
    tracked = open_page(1440, 900)
    page = tracked.page
    sign_in(tracked, "watcher", start="/cache/")
    profiles = page.locator("section[aria-label=profiles]")
    assert "expiry misses followed gaps under an hour" in profiles.inner_text()
    box = profiles.locator(".table-wrap")
    assert box.evaluate("el => el.scrollWidth <= el.clientWidth"), box.evaluate(
        "el => [el.scrollWidth, el.clientWidth]"
    )
    profiles.scroll_into_view_if_needed()
    tracked.screenshot("cache-04-profiles-1440")
