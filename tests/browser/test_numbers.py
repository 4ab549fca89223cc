"""Issue 15 in Chromium: an admin sets a profile's windows and reads the D8 advisor; the
session page says which window is in force."""

from __future__ import annotations

import pytest
from django.urls import reverse

from telemetry.models import AgentSession
from tests.browser.conftest import Console, save_confirming, sign_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_an_admin_sets_windows_and_tries_round_limits(open_page, console_data: Console):
    tracked = open_page()
    sign_in(tracked, "root")
    page = tracked.page
    page.goto(reverse("policy"))
    page.wait_for_selector("#round-advisor")
    assert page.locator("#round-advisor tr[data-profile]").count() >= 1
    page.fill("#id_soft", "3")
    page.fill("#id_hard", "6")
    page.click("text=Try these limits")
    page.wait_for_url("**soft=3**")
    assert "3 / 6 →" in page.inner_text("#round-advisor")
    tracked.screenshot("issue15-round-advisor")

    page.locator("#windows tr", has_text="default").get_by_role("link", name="Edit").click()
    page.fill("#id_windows", "claude-sonnet-4-5 = 100000\n* = 150000")
    save_confirming(page, "Save windows", "Saved the windows of default")
    assert "claude-sonnet-4-5 = 100,000" in page.inner_text("#windows")
    tracked.screenshot("issue15-windows")

    session = AgentSession.objects.filter(profile__name="default").exclude(window_source="").first()
    assert session is not None
    page.goto(reverse("session", args=[session.pk]))
    page.wait_for_selector(".window-source")
    assert "window:" in page.inner_text(".window-source")
    tracked.screenshot("issue15-window-source")
