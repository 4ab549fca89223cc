"""Issue 38, item 1 in Chromium: a failing and a given-up automatic relief are seen on the
overview (a count with links), on the sessions list (a flag and the relief filter) and on the
session's page (a notice linked to the failed run's anchor), at 1440 and at 390 px. Captured
into var/screenshots/relief-*.png."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import expect

from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from tests.browser.conftest import Console, sign_in
from tests.db.conftest import Agent
from tests.db.test_compaction_worker import session_over_threshold
from tests.db.test_relief_retry import DOWN, latest_auto_run, run_relief_job

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

DESKTOP = (1440, 900)
PHONE = (390, 844)
WIDER_THAN_VIEWPORT = "document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture
def troubled(console_data: Console, settings: Any) -> dict[str, AgentSession]:
    """Beside the console's fleet: one session whose relief failed once (failing) and one whose
    relief failed at the cap (given up); the summarizer is down for both."""
    settings.COMPACTION_AUTO_ENQUEUE = False  # the test runs the relief jobs
    settings.COMPACTION_SUMMARIZER_URL = DOWN
    settings.RELIEF_RETRY_MAX_ATTEMPTS = 2
    issued = create_agent_key(profile_name="default", name="relief agent")
    agent = Agent(key=issued.key, plaintext=issued.plaintext, client=Client())
    failing = session_over_threshold(agent, "support-bot-41")
    given_up = session_over_threshold(agent, "nightly-triage-9")
    assert run_relief_job(failing.pk).status == "failed"
    for _ in range(2):
        assert run_relief_job(given_up.pk).status == "failed"
    return {"failing": failing, "given_up": given_up}


def test_relief_in_trouble_is_seen_on_the_overview_the_list_and_the_session_page(
    open_page: Any, troubled: dict[str, AgentSession]
) -> None:
    failing = troubled["failing"]
    failed_run = latest_auto_run(failing).pk
    tracked = open_page(*DESKTOP)
    sign_in(tracked, "watcher", start="/")
    page = tracked.page
    relief = page.locator("#relief")
    assert relief.is_visible()
    line = relief.locator(".relief-line").inner_text()
    assert "2 sessions" in line and "1 relief failing" in line and "1 given up" in line
    assert relief.locator(".relief-worst li").count() == 2
    tracked.screenshot("relief-overview-desktop")

    # the count opens the filtered list; the flag there opens the failed run
    page.click("#relief-failing")
    page.wait_for_url(re.compile(r".*/sessions/\?relief=failing$"))
    rows = page.locator("#sessions tbody tr")
    assert rows.count() == 1
    assert "support-bot-41" in rows.first.inner_text()
    assert page.locator("select[name=relief]").input_value() == "failing"
    flag = rows.first.locator("a.relief-failing")
    assert flag.inner_text() == "relief failing"
    tracked.screenshot("relief-list-desktop")
    page.select_option("select[name=relief]", "any-trouble")
    page.wait_for_url(re.compile(r".*relief=any-trouble.*"))
    # locator waits: the page's Content-Security-Policy forbids the eval wait_for_function uses
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    assert page.locator("#sessions a.relief-given_up").inner_text() == "relief given up"
    page.select_option("select[name=relief]", "failing")
    expect(page.locator("#sessions tbody tr")).to_have_count(1)

    page.locator("#sessions a.relief-failing").click()
    page.wait_for_url(re.compile(rf".*/sessions/{failing.pk}/#run-{failed_run}$"))
    run_row = page.locator(f"#run-{failed_run}")
    assert run_row.is_visible() and "failed" in run_row.inner_text()
    notice = page.locator("#relief-state").inner_text()
    assert "relief failing" in notice and "failed 1 time in a row" in notice
    tracked.screenshot("relief-session-desktop")


def test_relief_in_trouble_fits_a_phone(open_page: Any, troubled: dict[str, AgentSession]) -> None:
    tracked = open_page(*PHONE)
    sign_in(tracked, "watcher", start="/")
    page = tracked.page
    relief = page.locator("#relief")
    assert relief.is_visible()
    assert "1 relief failing" in relief.inner_text()
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    box = page.locator("#relief-failing").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE[0]
    tracked.screenshot("relief-overview-phone")

    page.click("#relief-given-up")
    page.wait_for_url(re.compile(r".*/sessions/\?relief=given_up$"))
    flag = page.locator("#sessions a.relief-given_up")
    assert flag.inner_text() == "relief given up"
    # the pressure column, and the flag in it, is in view without scrolling the table
    box = flag.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE[0]
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot("relief-list-phone")
    flag.click()
    page.wait_for_selector("#relief-state")
    assert "given up" in page.locator("#relief-state").inner_text()
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot("relief-session-phone")
