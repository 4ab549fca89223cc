"""The policy form shows what a shorter call or log retention removes before it is saved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from compaction.log_retention import remove_expired_text
from compaction.models import Archive, LogMessage
from console.policy_impact import policy_impact
from telemetry.keys import create_agent_key
from telemetry.models import LLMCall
from telemetry.policy_store import effective_policy
from telemetry.seeding import ensure_defaults
from tests.browser.conftest import agent_at_work, make_user, report, sign_in
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


def test_typing_a_log_retention_previews_the_texts_it_removes_and_the_transcript_says_where(
    open_page,
):
    ensure_defaults()
    key = create_agent_key(profile_name="default").key
    session = agent_at_work(key, "long-ago", compact=True)
    hidden = Archive.objects.get(session=session).log_messages
    LogMessage.objects.update(created_at=timezone.now() - timedelta(days=45))
    going = policy_impact(key.profile, {"log_retention_days": 30})
    assert going is not None and going.expiring_texts > 0
    make_user("keeper", "admin")
    tracked = open_page(1440, 900)
    sign_in(tracked, "keeper", start=reverse("policy_profile", args=["default"]))
    page = tracked.page
    page.fill("#id_log_retention_days", "30")
    page.wait_for_selector("#impact-log-retention")
    assert f"{going.expiring_texts} transcript messages" in page.inner_text("#impact")
    tracked.screenshot("log-retention-preview")
    page.click("text=Save policy")
    page.wait_for_selector("text=Not saved yet")
    assert effective_policy(key.profile).log_retention_days == 0
    page.click("text=Save anyway")
    page.wait_for_selector("text=Saved the policy of default")
    assert effective_policy(key.profile).log_retention_days == 30
    assert not LogMessage.objects.filter(removed_at__isnull=False).exists()  # the job removes
    assert remove_expired_text().messages == going.expiring_texts < hidden
    page.goto(reverse("session", args=[session.pk]))
    page.wait_for_selector("#surface-removed")
    assert f"The text of {going.expiring_texts} earlier log messages" in page.inner_text(
        "#surface-removed"
    )
