"""Issue 39 item 3 in Chromium at 1440 and 390 px: an operator filters the sessions list, clicks
its CSV export and gets every session the filter selects (not one page), and its JSON export
gives the same rows as JSON Lines; the catalogue's export is a download too."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from telemetry.catalogue import seed_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from tests.browser.conftest import make_user, report, sign_in, working_session

SIZES = ((1440, 900), (390, 844))


@pytest.fixture
def fleet(transactional_db: None) -> None:
    seed_catalogue()
    make_user("root", "admin")
    start = datetime.now(UTC) - timedelta(minutes=30)
    fleet_key = create_agent_key(profile_name="fleet").key
    for n in range(27):  # more than a page of the list
        report(fleet_key, working_session(f"fleet-{n:02d}", 1, start=start))
    report(create_agent_key(profile_name="default").key, working_session("=other", 2, start=start))


def _downloaded(page: Any, link: Any) -> tuple[str, str]:
    with page.expect_download() as caught:
        link.click()
    download = caught.value
    return download.suggested_filename, Path(download.path()).read_text(encoding="utf-8")


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_filtered_sessions_list_downloads_whole_as_csv_and_json(
    open_page: Any, fleet: None, width: int, height: int
) -> None:
    tracked = open_page(width=width, height=height)
    page = tracked.page
    sign_in(tracked, "root")
    page.select_option("select[name=profile]", "fleet")
    page.wait_for_url("**profile=fleet**")
    links = page.locator("#sessions .export-links")
    links.get_by_role("link", name="Export the sessions as CSV").wait_for()
    assert "profile=fleet" in (links.locator("a").first.get_attribute("href") or "")
    links.scroll_into_view_if_needed()
    tracked.screenshot(f"issue39-export-links-{width}")

    name, text = _downloaded(page, links.get_by_role("link", name="Export the sessions as CSV"))
    assert name.startswith("sessions-") and name.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    expected = AgentSession.objects.filter(profile__name="fleet").count()
    assert len(rows) == expected == 27  # every page, not the 25 shown
    assert {r["profile"] for r in rows} == {"fleet"}
    assert all(len(r["cost_usd"].split(".")[1]) == 9 for r in rows)

    name, text = _downloaded(
        page, links.get_by_role("link", name="Export the sessions as JSON Lines")
    )
    assert name.endswith(".jsonl")
    documents = [json.loads(line) for line in text.splitlines()]
    assert [d["session"] for d in documents] == [r["session"] for r in rows]


def test_the_unfiltered_list_defuses_a_formula_and_the_catalogue_downloads(
    open_page: Any, fleet: None
) -> None:
    tracked = open_page(width=1440, height=900)
    page = tracked.page
    sign_in(tracked, "root")
    link = page.get_by_role("link", name="Export the sessions as CSV")
    _, text = _downloaded(page, link)
    sessions = [r["session"] for r in csv.DictReader(io.StringIO(text, newline=""))]
    assert "'=other" in sessions and "=other" not in sessions

    page.goto("/catalogue/")
    name, text = _downloaded(page, page.get_by_role("link", name="Export the catalogue as CSV"))
    assert name.startswith("catalogue-")
    assert text.startswith("model,provider,family,window_tokens")
    tracked.screenshot("issue39-export-catalogue-1440")
