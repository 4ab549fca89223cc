"""The policy form shows what a shorter call retention removes before it is saved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from telemetry.keys import create_agent_key
from telemetry.models import LLMCall
from telemetry.policy_store import effective_policy
from telemetry.seeding import ensure_defaults
from tests.browser.conftest import make_user, report, sign_in
from tests.db.test_session_export import records

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_typing_a_call_retention_previews_the_calls_it_removes_and_saving_asks_first(open_page):
    ensure_defaults()
    key = create_agent_key(profile_name="default").key
    report(key, records("old-work", 12, start=timezone.now() - timedelta(days=45)))
    make_user("keeper", "admin")
    tracked = open_page(1440, 900)
    sign_in(tracked, "keeper", start=reverse("policy_profile", args=["default"]))
    page = tracked.page
    page.fill("#id_call_retention_days", "30")
    page.wait_for_selector("#impact >> text=would remove")
    assert "22 calls" in page.inner_text("#impact")  # 11 of 12 turns: the latest stays
    tracked.screenshot("retention-preview")
    page.click("text=Save policy")
    page.wait_for_selector("text=Not saved yet")
    assert effective_policy(key.profile).call_retention_days == 0
    page.click("text=Save anyway")
    page.wait_for_selector("text=Saved the policy of default")
    assert effective_policy(key.profile).call_retention_days == 30
    assert LLMCall.objects.count() == 24  # saving removes nothing itself: the hourly job does
