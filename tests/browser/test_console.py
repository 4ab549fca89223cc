"""The console in Chromium: sign in, the sessions list, a session's charts and live figures,
Compact now (applied and refused), the surface on a past turn, the archives and a transcript, the
admin pages. Screenshots of each page go to var/screenshots/."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from compaction.models import Archive, CompactionRun, Surface
from tests.browser.conftest import (
    Console,
    agent_at_work,
    report,
    save_confirming,
    sign_in,
    working_session,
)

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
    # (locator waits: the page's Content-Security-Policy forbids the eval wait_for_function uses)
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
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
    # the hit line and two write areas (plus miss markers once the misses fragment arrives)
    assert page.locator("#chart-cache .scatterlayer .trace").count() >= 3
    assert page.locator("#chart-cost .barlayer .point").count() > 100
    page.wait_for_selector("#live .gauge-chart .main-svg")
    assert (
        page.locator("#live .gauge-chart .indicatorlayer, #live .gauge-chart .angular").count() >= 1
    )

    page.wait_for_selector("#surface >> text=no transcript has been appended")
    assert page.locator("#runs h3").inner_text() == "Compaction runs"
    # ops is an operator, but a session without a transcript has nothing to archive or compact:
    # the button does not promise an archive it cannot take
    assert page.get_by_role("button", name="Compact now").is_disabled()
    assert "no transcript" in page.inner_text("#compact-needs-transcript")
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
    expect(page.locator("#live .figure").nth(4).locator(".value")).to_have_text(
        "421", timeout=15_000
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
    page.fill("#id_prune_threshold", "90")
    page.fill("#id_summarize_threshold", "50")
    page.click("text=Save policy")
    page.wait_for_selector("#id_summarize_threshold-error")
    assert "must not be below prune_threshold" in page.inner_text("#id_summarize_threshold-error")
    tracked.screenshot("06-policy-error")
    page.fill("#id_summarize_threshold", "95")
    save_confirming(page, "Save policy", "Saved the policy of default")

    page.click("nav >> text=Agent keys")
    page.select_option("#id_profile", "fleet")
    page.fill("#id_name", "nightly batch")
    page.click("text=Create key")
    secret = page.inner_text("#issued-key")
    assert secret.startswith("clc_")
    # the key is shown once: a button copies it (over http:// the clipboard is refused, so the
    # key is selected for a manual copy and the page says so)
    page.get_by_role("button", name="Copy key").click()
    page.wait_for_selector('[data-copy-status="issued-key"]:not(:empty)')
    status = page.inner_text('[data-copy-status="issued-key"]')
    assert status in {"Copied.", "Selected: press Ctrl+C (⌘C) to copy."}
    assert page.evaluate("window.getSelection().toString()").strip() in {"", secret}
    tracked.screenshot("07-key-created")
    prompts: list[str] = []

    def confirm(dialog: Any) -> None:
        prompts.append(dialog.message)
        dialog.accept()

    page.once("dialog", confirm)
    page.locator("tr", has_text="nightly batch").get_by_role("button", name="Revoke").click()
    page.wait_for_selector("text=Revoked")
    # the dialog names the key it revokes: its prefix, its name and its profile
    shown = "_".join(secret.split("_")[:2]) + "_…"
    assert shown in prompts[0] and "(nightly batch)" in prompts[0], prompts
    assert "profile fleet" in prompts[0]
    assert secret not in page.content()

    page.click("nav >> text=Models")
    page.wait_for_selector("text=claude-sonnet-4-5")
    tracked.screenshot("08-catalogue")


def test_an_operator_compacts_now_and_sees_the_result_in_place(open_page, console_data: Console):
    session = agent_at_work(console_data.key, "triage-5", compact=False)
    tracked = open_page()
    sign_in(tracked, "ops")
    page = tracked.page
    page.goto(reverse("session", args=[session.pk]))
    page.wait_for_selector("#chart-pressure .main-svg")
    assert "Surface as the model sees it now" in page.inner_text("#surface h2")
    page.wait_for_selector("#surface .msg")  # the transcript arrives right after the page
    assert page.locator("#surface .msg").count() == 18
    assert page.locator("#surface .tag.pruned").count() == 0
    assert "No compaction runs yet." in page.inner_text("#runs")
    tracked.screenshot("09-session-with-a-transcript")

    dialogs: list[str] = []

    def confirm(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.once("dialog", confirm)
    page.get_by_role("button", name="Compact now").click()
    page.wait_for_selector("#compact .outcome-panel.ok")
    assert "nothing changes" in dialogs[0]
    outcome = page.inner_text("#compact .outcome-panel")
    assert "Compacted" in outcome and "surface v1 → v2" in outcome
    # the other parts were swapped in place: the new surface, the run, the archive
    page.wait_for_selector("#surface .tag.pruned")
    assert "version 2" in page.inner_text("#surface .surface-facts")
    assert page.locator("#surface .msg.is-summary").count() == 1
    assert page.locator("#runs tbody tr").count() == 1
    assert "Applied" in page.inner_text("#runs tbody tr") or "applied" in page.inner_text(
        "#runs tbody tr"
    )
    assert "user:ops" in page.inner_text("#runs tbody tr")
    assert page.locator("#archives tbody tr").count() == 1
    assert Surface.objects.get(session=session).version == 2
    # the live figures followed at once: the surface estimate replaced the projection (D6)
    run = CompactionRun.objects.get()
    projected = page.locator("#live .figure").nth(1).locator(".value").inner_text()
    assert projected == f"{run.tokens_after:,}"
    page.wait_for_selector("#live .gauge-chart .main-svg")
    page.locator("#surface details.block.pruned").first.locator("summary").click()
    tracked.screenshot("10-compacted-in-place")


def test_a_refusal_when_the_archive_fails_shows_its_reason(
    open_page, console_data: Console, settings
):
    session = agent_at_work(console_data.key, "triage-5", compact=False)
    # the live server runs in this process: the override reaches the view
    settings.COMPACTION_ARCHIVE_BACKEND = "compaction.archives.FailingArchive"
    tracked = open_page()
    sign_in(tracked, "ops")
    page = tracked.page
    page.goto(reverse("session", args=[session.pk]))
    page.wait_for_selector("#surface .surface-facts")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Compact now").click()
    page.wait_for_selector("#compact .outcome-panel.bad")
    outcome = page.inner_text("#compact .outcome-panel")
    assert "Refused" in outcome and "archive store unavailable" in outcome
    assert "nothing changed" in outcome
    assert "version 1" in page.inner_text("#surface .surface-facts")
    row = page.inner_text("#runs tbody tr")
    assert "refused" in row.lower() and "archive failed" in row
    assert Surface.objects.get(session=session).version == 1
    assert not Archive.objects.exists()
    tracked.screenshot("11-compaction-refused")


def test_a_viewer_sees_compact_now_disabled_and_the_surface_of_a_past_turn(
    open_page, console_data: Console
):
    session = agent_at_work(console_data.key, "triage-5", compact=True)
    tracked = open_page()
    sign_in(tracked, "watcher")
    page = tracked.page
    page.goto(reverse("session", args=[session.pk]))
    button = page.get_by_role("button", name="Compact now")
    assert button.is_disabled()
    assert "operator role" in (button.get_attribute("title") or "")
    # the compaction is marked on the pressure chart
    page.wait_for_selector("#chart-pressure .main-svg")
    assert "summarize (manual)" in page.inner_text("#chart-pressure")
    page.wait_for_selector("#surface .tag.pruned")
    # turn 2 used surface v1: pick it in the turns table, the surface swaps in place
    page.locator("#turns a", has_text="v1").first.click()
    page.wait_for_selector("#surface h2:has-text('on turn')")
    assert "version 1" in page.inner_text("#surface .surface-facts")
    assert page.locator("#surface .tag.pruned").count() == 0
    assert "surface_turn=" in page.url
    # markup an agent sent stays text
    assert "<script>alert('x')</script>" in page.inner_text("#surface")
    tracked.screenshot("12-surface-on-a-past-turn")


def test_search_the_archives_and_open_a_transcript(open_page, console_data: Console):
    agent_at_work(console_data.key, "triage-5", compact=True)
    agent_at_work(console_data.fleet_key, "fleet-ci-9", compact=True)
    tracked = open_page()
    sign_in(tracked, "watcher")
    page = tracked.page
    page.click("nav >> text=Archives")
    page.wait_for_selector("text=Latest archives")
    assert page.locator("#results tbody tr").count() == 2
    tracked.screenshot("13-archives")

    page.fill("#id_archive_q", "nightly template")
    page.wait_for_selector("#results .hit mark")
    assert "q=nightly" in page.url
    assert page.locator("#results .hit").count() == 2  # both profiles' archives
    assert page.locator("#results .hit script").count() == 0
    tracked.screenshot("14-archive-search")

    page.locator("#results .hit a", has_text="archive #").first.click()
    page.wait_for_url(re.compile(r".*/archives/\d+/\?q=[^#]*#log-seq-1$"))
    page.wait_for_selector("#log .msg.role-assistant")
    assert page.locator("#log .msg").count() == 18
    assert page.locator("#archived-surface .msg").count() == 18
    call = page.locator("#log details.block.call").first
    assert not call.locator("pre").is_visible()
    call.locator("summary").click()
    assert '"part": 0' in call.locator("pre").inner_text()
    assert "<script>alert('x')</script>" in page.inner_text("#log-seq-1")
    with page.expect_download() as download:
        page.click("text=JSONL")
    assert download.value.suggested_filename.endswith(".jsonl")
    tracked.screenshot("15-transcript")
