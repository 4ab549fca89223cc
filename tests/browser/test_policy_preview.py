"""Issue 38 cases 2 and 3 in Chromium: the policy preview counts what a reserve does (band
changes, usable windows) and asks to confirm; a reserve at or above a window in use is refused
naming both; reverting a reserve recovers a session left "pressure unknown" (the worker
recomputes the stored figures after the save)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key, forget_key_checks
from telemetry.models import AgentKey, AgentProfile, AgentSession, Policy
from telemetry.policy_store import forget_policies
from telemetry.session_state import recompute_pressure_batch
from tests.browser.conftest import SONNET, make_user, report, sign_in
from tests.db.conftest import start_worker, stop_worker

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

DESKTOP = (1440, 900)


def record(session_id: str, context: int, **extra: Any) -> dict[str, Any]:
    """A call of `context` tokens and a 500-token reply: the next request is context + 500."""
    return {
        "session_id": session_id,
        "turn": 1,
        "model": SONNET,
        "usage": {"input_tokens": context, "output_tokens": 500},
        "appended_chars": 0,
        **extra,
    }


@pytest.fixture
def admin_key(transactional_db: None) -> AgentKey:
    seed_catalogue()
    make_user("root", "admin")
    return create_agent_key(profile_name="default", name="reporter").key


def test_case_2_a_reserve_of_120000_previews_the_band_changes_and_asks_to_confirm(
    open_page, admin_key: AgentKey
) -> None:
    report(admin_key, [record("at-45", 82_300)])  # 82,800 of 184,000 usable: 45 %
    tracked = open_page(*DESKTOP)
    sign_in(tracked, "root")
    page = tracked.page
    page.goto(reverse("policy_profile", args=["default"]))
    assert "No session would change band" in page.inner_text("#impact")
    page.fill("#id_reserved_output_tokens", "120000")
    page.wait_for_selector("#impact-bands")  # the preview follows the typing
    impact = page.inner_text("#impact")
    assert "1 session would change band" in impact and "ok → over: 1" in impact
    assert "at-45: 45 % (ok) → 103 % (over)" in impact
    assert "reserve of default 16,000 → 120,000" in impact
    tracked.screenshot("policy-preview-reserve")
    page.click("text=Save policy")
    page.wait_for_selector("text=Not saved yet")
    policy = Policy.objects.filter(profile__name="default").first()
    assert policy is None or policy.reserved_output_tokens is None  # not saved yet
    page.click("text=Save anyway")
    page.wait_for_selector("text=Saved the policy of default")
    assert Policy.objects.get(profile__name="default").reserved_output_tokens == 120_000


def test_case_3_a_reserve_above_a_window_is_refused_and_the_revert_recovers_unknown_pressure(
    open_page, admin_key: AgentKey, tmp_path: Path
) -> None:
    report(admin_key, [record("small-window", 26_400, window_tokens=60_000)])
    session = AgentSession.objects.get(external_id="small-window")
    tracked = open_page(*DESKTOP)
    sign_in(tracked, "root")
    page = tracked.page
    # the form refuses a reserve at or above the window the session runs in, naming both
    page.goto(reverse("policy_profile", args=["default"]))
    page.fill("#id_reserved_output_tokens", "120000")
    page.wait_for_selector("#impact-refused")
    page.click("text=Save policy")
    error = f"reserve 120,000 ≥ window 60,000 of model {SONNET}"
    page.wait_for_selector(f"text={error}")
    tracked.screenshot("policy-preview-refused")
    assert (
        Policy.objects.filter(profile__name="default", reserved_output_tokens=120_000).count() == 0
    )
    # the state the issue found: such a reserve saved (before the refusal), recomputed unknown
    profile = AgentProfile.objects.get(name="default")
    Policy.objects.update_or_create(profile=profile, defaults={"reserved_output_tokens": 120_000})
    forget_policies()
    forget_key_checks()
    recompute_pressure_batch(profile.pk)
    page.goto(reverse("session", args=[session.pk]))
    assert "window unknown" in page.inner_text("#live")
    worker = start_worker(tmp_path / "worker.log")
    try:
        page.goto(reverse("policy_profile", args=["default"]))
        page.fill("#id_reserved_output_tokens", "")  # blank: inherit the global 16,000 again
        page.wait_for_selector("#impact >> text=Pressure becomes known again")
        tracked.screenshot("policy-preview-revert")
        page.click("text=Save policy")
        page.wait_for_selector("text=Not saved yet")
        page.click("text=Save anyway")
        page.wait_for_selector("text=Saved the policy of default")
        page.goto(reverse("session", args=[session.pk]))
        for _ in range(60):  # the worker recomputes after the save
            if "window unknown" not in page.inner_text("#live"):
                break
            page.wait_for_timeout(500)
            page.reload()
        live = page.inner_text("#live")
        assert "window unknown" not in live, worker.log()
        assert "61" in live and "44,000 usable (60,000 window − 16,000 reserved)" in live
        tracked.screenshot("policy-preview-recovered")
    finally:
        stop_worker(worker)
