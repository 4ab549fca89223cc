"""The sessions list at 1440 and 390 px with the widest values it takes: a title at its 80
characters, an id at the 40 the list shows, a 40-character tag among others, a Bedrock model id,
a long profile name and a session of unpriced calls. At 1440 px the table fits its box, "Last
seen" included, and no cell's content spills into the next; at 390 px the page never scrolls
sideways (the table scrolls in its own box) and the pressure is in view beside the session.
Captured into var/screenshots/ (`sessions-width-*`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from telemetry.session_meta import TITLE_CHARS
from telemetry.session_tags import add_tags
from tests.browser.conftest import make_user, report, sign_in, working_session

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

WIDTHS = (1440, 390)
LONG_ID = "7f0c1a52-0e6b-4f55-9c1e-3a1d2b4c5d6e-aaaa"  # 41: the list shows 39 and "…"
LONG_TITLE = (
    "Refactor the billing module so that invoices come from the new pricing service and the "
    "old one can be retired"
)
TAGS = ["needs-review", "customer-escalation", "q4", "a" * 40]
BEDROCK = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
UNPRICED = "llama-3.3-70b-instruct-local-q4"

# the list's box and table, and every cell whose content is wider than the cell
MEASURE = """() => {
  const box = document.getElementById('sessions');
  const table = box.querySelector('table');
  const last = table.querySelector('thead th:last-child').getBoundingClientRect();
  const spilled = [...table.querySelectorAll('td')]
    .filter((td) => td.scrollWidth > td.clientWidth + 1)
    .map((td) => td.innerText.slice(0, 40));
  return {
    box: box.clientWidth, table: table.scrollWidth, boxRight: box.getBoundingClientRect().right,
    lastRight: last.right, spilled,
  };
}"""
PAGE_WIDER = "document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture
def wide_rows(transactional_db: None) -> None:
    seed_catalogue()
    make_user("watcher", "viewer")
    key = create_agent_key(profile_name="platform-engineering-nightly").key
    now = datetime.now(UTC)
    titled = working_session(LONG_ID, 3, start=now - timedelta(minutes=30))
    titled[0] = {**titled[0], "metadata": {"title": LONG_TITLE}}
    report(key, titled)
    report(
        key,
        [
            {**r, "model": BEDROCK}
            for r in working_session("bedrock-batch-7", 3, start=now - timedelta(minutes=20))
        ],
    )
    report(
        key,
        [
            {**r, "model": UNPRICED}
            for r in working_session("local-model-run", 12, start=now - timedelta(minutes=10))
        ],
    )
    add_tags(session_id=AgentSession.objects.get(external_id=LONG_ID).pk, texts=TAGS)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_sessions_table_fits_1440_px_and_scrolls_only_in_its_box_on_a_phone(
    open_page: Any, wide_rows: None, width: int
) -> None:
    tracked = open_page(width=width, height=900)
    page = tracked.page
    sign_in(tracked, "watcher")
    page.wait_for_selector("#sessions tbody tr >> nth=2")
    row = page.locator("tr", has_text=LONG_ID[:39] + "…")
    assert LONG_TITLE[: TITLE_CHARS - 1].rstrip() + "…" in row.inner_text()
    assert "unpriced" in page.locator("tr", has_text="local-model-run").inner_text()
    measured = page.evaluate(MEASURE)
    assert measured["spilled"] == [], measured  # no cell's content runs into its neighbour
    assert page.evaluate(PAGE_WIDER) <= 0, measured
    if width == 1440:
        assert measured["table"] <= measured["box"], measured
        assert measured["lastRight"] <= measured["boxRight"], measured
    else:
        # the session and its pressure are in view before the table is scrolled
        badge = row.locator(".badge").bounding_box()
        assert badge is not None and badge["x"] + badge["width"] <= width, badge
    tracked.screenshot(f"sessions-width-{width}")
