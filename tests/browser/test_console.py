"""The console in Chromium: sign in, the sessions list, a session's charts and live figures, the
admin pages. Screenshots of each page go to var/screenshots/."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from tests.browser.conftest import Console, report, sign_in, working_session

pytestmark = [
    pytest.mark.browser,
    # the live server's thread must see the data; restore the seeded rows after each flush
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_an_operator_signs_in_and_sees_the_sessions_list(open_page, console_data: Console):
    tracked = open_page()
    page = tracked.page
    page.goto("/")
    page.wait_for_url("**/accounts/login/**")
    tracked.screenshot("01-sign-in")
    sign_in(tracked, "ops")
    rows = page.locator("#sessions tbody tr")
    assert rows.count() == 4
    assert page.locator("#sessions .badge").count() == 4
    assert page.locator("#sessions .badge.band-unknown").count() == 1  # the local model
    assert page.get_by_role("link", name="Policy").count() == 0  # admins only
    tracked.screenshot("02-sessions")

    # search narrows the table in place (htmx), and the URL follows
    page.fill("#id_q", "chat")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 1")
    assert "q=chat" in page.url
    assert page.locator("#sessions tbody tr a").inner_text() == "chat-support-12"


def test_the_list_refreshes_itself_when_an_agent_reports(open_page, console_data: Console):
    tracked = open_page()
    sign_in(tracked, "watcher")
    page = tracked.page
    assert page.locator("#sessions tbody tr").count() == 4
    with page.expect_response(
        lambda r: r.request.headers.get("hx-request") == "true" and r.status == 304,
        timeout=15_000,
    ):
        pass  # an unchanged table is answered 304 and left alone
    report(console_data.key, working_session("new-arrival", 2, start=datetime.now(UTC)))
    page.wait_for_selector("text=new-arrival", timeout=15_000)
    assert page.locator("#sessions tbody tr").count() == 5


def test_a_session_page_draws_its_charts_and_updates_its_live_figures(
    open_page, console_data: Console
):
    tracked = open_page()
    sign_in(tracked, "ops")
    page = tracked.page
    page.click("text=fleet-refactor-7")
    page.wait_for_url(re.compile(r".*/sessions/\d+/$"))

    for chart in ("pressure", "cache", "cost"):
        page.wait_for_selector(f"#chart-{chart} .main-svg")
    # traces drawn with data: the context line has a path, the cost bars have bars
    context_path = page.locator("#chart-pressure .scatterlayer .trace path.js-line").first
    assert len(context_path.get_attribute("d") or "") > 100
    assert page.locator("#chart-pressure .shapelayer path").count() >= 3  # window + thresholds
    assert page.locator("#chart-cache .scatterlayer .trace").count() == 3
    assert page.locator("#chart-cost .barlayer .point").count() > 100
    page.wait_for_selector("#live .gauge-chart .main-svg")
    assert (
        page.locator("#live .gauge-chart .indicatorlayer, #live .gauge-chart .angular").count() >= 1
    )

    assert page.locator("#surface h3").inner_text() == "Surface"
    assert page.locator("#runs h3").inner_text() == "Compaction runs"
    assert page.get_by_role("button", name="Compact now").is_disabled()
    tracked.screenshot("03-session")

    turns_before = page.locator("#live .figure").nth(4).locator(".value").inner_text()
    with page.expect_response(lambda r: "/live" in r.url and r.status == 304, timeout=15_000):
        pass  # nothing changed yet: the poll is answered 304 and the figures stay
    assert page.locator("#live .figure").nth(4).locator(".value").inner_text() == turns_before

    session = console_data.long_session
    report(
        console_data.fleet_key,
        [
            {
                "session_id": session.external_id,
                "turn": 420,
                "model": "claude-sonnet-4-5-20250929",
                "usage": {
                    "input_tokens": 400,
                    "cache_creation_input_tokens": 3_000,
                    "cache_read_input_tokens": 150_000,
                    "output_tokens": 900,
                },
                "appended_chars": 8_000,
            }
        ],
    )
    page.wait_for_function(
        "document.querySelectorAll('#live .figure')[4].querySelector('.value').textContent.trim() === '421'",
        timeout=15_000,
    )
    page.wait_for_selector("#live .gauge-chart .main-svg")
    tracked.screenshot("04-session-after-a-new-turn")

    # the turns table pages in place
    page.click("text=earlier turns →")
    page.wait_for_selector("#turns >> text=page 2 of")
    assert "/sessions/" in page.url


def test_an_admin_tunes_policy_creates_a_key_and_sees_the_catalogue(
    open_page, console_data: Console
):
    tracked = open_page()
    sign_in(tracked, "root")
    page = tracked.page
    page.click("nav >> text=Policy")
    page.wait_for_selector("text=Cache tier against the traffic")
    fleet_row = page.locator("tr", has=page.locator("a", has_text="fleet")).first
    assert "cheaper" in fleet_row.inner_text()
    tracked.screenshot("05-policy")

    page.goto(reverse("policy_profile", args=["default"]))
    page.fill("#id_prune_threshold", "0.9")
    page.fill("#id_summarize_threshold", "0.5")
    page.click("text=Save policy")
    page.wait_for_selector("#id_summarize_threshold-error")
    assert "must not be below prune_threshold" in page.inner_text("#id_summarize_threshold-error")
    tracked.screenshot("06-policy-error")
    page.fill("#id_summarize_threshold", "0.95")
    page.click("text=Save policy")
    page.wait_for_selector("text=Saved the policy of default")

    page.click("nav >> text=Agent keys")
    page.select_option("#id_profile", "fleet")
    page.fill("#id_name", "nightly batch")
    page.click("text=Create key")
    secret = page.inner_text("#issued-key")
    assert secret.startswith("clc_")
    tracked.screenshot("07-key-created")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="nightly batch").get_by_role("button", name="Revoke").click()
    page.wait_for_selector("text=Revoked")
    assert secret not in page.content()

    page.click("nav >> text=Models")
    page.wait_for_selector("text=claude-sonnet-4-5")
    tracked.screenshot("08-catalogue")
