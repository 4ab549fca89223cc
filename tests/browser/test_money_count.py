"""Issue 38, cases 4 and 5 in Chromium at 1440 and 390 px: a Claude Code call under a 1h
profile is billed as Claude Code bills it (the session page says the two agree), and spend that
leaves out unpriced calls says so, linked to the catalogue's list of the missing models, whose
link opens the add form with the model filled in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from telemetry.policy_store import update_policy
from tests.browser.conftest import make_user, report, sign_in, working_session
from tests.db.test_agent_write_tiers import EVENT
from tests.db.test_otlp import LOGS
from tests.db.test_otlp_sources import _logs

UNKNOWN = "llama-3.3-70b-local"
WIDTHS = (1440, 390)


@dataclass
class Money:
    claude_code: AgentSession


@pytest.fixture
def money(transactional_db: None) -> Money:
    seed_catalogue()
    make_user("root", "admin")
    desktop = create_agent_key(profile_name="desktop")
    # a flush of an earlier transactional test may have removed the seeded D7 override
    update_policy(profile=desktop.key.profile, values={"cache_ttl": "1h"})
    answer = Client().post(
        LOGS,
        _logs(EVENT),
        content_type="application/x-protobuf",
        headers={"Authorization": f"Bearer {desktop.plaintext}"},
    )
    assert answer.status_code == 200
    key = create_agent_key(profile_name="default").key
    now = datetime.now(UTC)
    report(key, working_session("chat-support-12", 6, start=now - timedelta(minutes=25)))
    local = working_session("local-llama-2", 12, start=now - timedelta(minutes=50))
    report(key, [{**record, "model": UNKNOWN} for record in local])
    return Money(claude_code=AgentSession.objects.get(external_id=EVENT["session.id"]))


def _fits(page: Any) -> bool:
    """Nothing wider than the viewport: tables scroll inside their own wrapper."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_claude_code_call_under_a_one_hour_profile_agrees_with_claude_codes_cost(
    open_page: Any, money: Money, width: int
) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    start = f"/sessions/{money.claude_code.pk}/"
    sign_in(tracked, "root", start=start)
    agent_cost = page.locator(".agent-cost")
    agent_cost.wait_for()
    text = agent_cost.inner_text()
    assert "Claude Code's own figure $0.0271" in text
    assert "ours $0.0271" in text and "they agree" in text
    assert _fits(page)
    tracked.screenshot(f"issue38-claude-code-cost-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_spend_says_how_many_calls_it_could_not_price_and_leads_to_adding_the_model(
    open_page: Any, money: Money, width: int
) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "root", start="/")
    spend = page.locator(".overview-figures .figure").first
    note = spend.locator(".unpriced-note")
    assert note.inner_text() == "· 12 calls unpriced"
    assert note.is_visible()
    assert _fits(page)
    tracked.screenshot(f"issue38-overview-unpriced-{width}")

    page.goto("/sessions/")
    row = page.locator("tr", has_text="local-llama-2")
    assert row.locator(".unpriced-note").inner_text() == "· 12 calls unpriced"
    assert page.locator(".unpriced-note").count() == 1  # the priced sessions say nothing

    page.goto("/")
    page.locator(".overview-figures .unpriced-note").click()
    page.wait_for_url("**/catalogue/#unpriced")
    table = page.locator("#unpriced")
    line = table.locator("tr", has_text=UNKNOWN)
    assert "12" in line.inner_text()
    assert _fits(page)
    tracked.screenshot(f"issue38-unpriced-models-{width}")

    line.get_by_role("link", name=f"Add {UNKNOWN}").click()
    page.wait_for_url("**/catalogue/new/**")
    assert page.locator("#id_model").input_value() == UNKNOWN
    tracked.screenshot(f"issue38-add-unpriced-model-{width}")
