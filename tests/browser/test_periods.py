"""Issue 39, item 1 in Chromium at 1440 and 390 px: the period picker (a preset, a custom range,
the time zone, the previous period beside), a spend bar that opens the sessions behind it, and
the overview's refresh (its switch, paused while the tab is hidden, only changed parts sent).
Captured into var/screenshots/ (`period-*`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.browser.conftest import Console, report, sign_in, working_session

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
# where a chart's x-axis title is drawn, against the chart's own box (page pixels)
TITLE_INSIDE = """(id) => {
  const chart = document.getElementById(id).getBoundingClientRect();
  const title = document.querySelector(`#${id} .g-xtitle text`).getBoundingClientRect();
  return {left: title.left, right: title.right, chart_left: chart.left, chart_right: chart.right};
}"""
WIDER_THAN_VIEWPORT = "document.documentElement.scrollWidth - window.innerWidth"
# the middle of the last bar with spend in a chart, in page pixels (after scrolling it in view)
LAST_BAR = """(id) => {
  const gd = document.getElementById(id);
  gd.scrollIntoView({block: 'center'});
  const trace = gd._fullData.findIndex((t) => t.type === 'bar' && t.y.some((v) => v > 0));
  const y = gd._fullData[trace].y;
  let i = y.length - 1;
  while (!(y[i] > 0)) i -= 1;
  const path = gd.querySelectorAll('.barlayer .trace')[trace].querySelectorAll('.point path')[i];
  const r = path.getBoundingClientRect();
  return {x: r.left + r.width / 2, y: r.top + Math.max(r.height / 2, 1)};
}"""


@pytest.mark.parametrize("size", list(SIZES))
def test_the_picker_keeps_a_custom_range_zone_and_comparison_and_a_bar_opens_its_sessions(
    open_page, console_data: Console, size: str
) -> None:
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "watcher", start="/?range=7d")
    page = tracked.page
    # the range's dates are read in the zone chosen below: its last day is today in Tokyo, so
    # the range holds now (and the sessions' calls of the last hours) at any hour of the UTC day
    today = datetime.now(ZoneInfo("Asia/Tokyo")).date()
    first = (today - timedelta(days=2)).isoformat()

    # a custom range of dates, then the zone and the comparison: each kept in the URL
    page.fill(".custom-range input[name=from]", first)
    page.fill(".custom-range input[name=to]", today.isoformat())
    page.click(".custom-range button[type=submit]")
    page.wait_for_url(re.compile(rf".*from={first}.*"))
    assert f"{first} – {today.isoformat()}" in page.inner_text("#overview-scope")
    page.select_option(".zone-compare select[name=tz]", "Asia/Tokyo")
    page.wait_for_url(re.compile(r".*tz=Asia%2FTokyo.*"))
    assert page.inner_text("#time-zone") == "Asia/Tokyo"
    page.check(".zone-compare input[name=compare]")
    page.wait_for_url(re.compile(r".*compare=previous.*"))
    assert "previous period" in page.inner_text("#previous-spend")
    assert re.search(r"[+−±]\d+ %|no base", page.inner_text("#previous-calls"))
    # the period survives a change of profile, and the sessions list keeps it in its links
    page.select_option("select[name=profile]", "fleet")
    page.wait_for_url(re.compile(r".*profile=fleet.*"))
    assert f"from={first}" in page.url and "compare=previous" in page.url
    page.wait_for_selector("#chart-spend .barlayer .point path", state="attached")
    assert "Asia/Tokyo" in (page.text_content("#chart-spend .g-xtitle") or "")
    # the compactions chart's axis title (the zone with its offset, and both clocks) is drawn
    # whole inside its chart, on a phone too; the page's foot names the zone
    page.wait_for_selector("#chart-compactions .g-xtitle text", state="attached")
    inside = page.evaluate(TITLE_INSIDE, "chart-compactions")
    assert inside["left"] >= inside["chart_left"] - 1, inside
    assert inside["right"] <= inside["chart_right"] + 1, inside
    assert page.inner_text("#time-zone") == "Asia/Tokyo"
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"period-overview-{size}")

    # a spend bar opens the sessions active in its bucket (the table lists the same links)
    box = page.evaluate(LAST_BAR, "chart-spend")
    page.mouse.click(box["x"], box["y"])
    page.wait_for_url(re.compile(r".*/sessions/\?from=.*tz=Asia%2FTokyo.*profile=fleet.*"))
    page.wait_for_selector("#period-scope")
    assert page.locator("#sessions tbody tr").count() == 1
    assert "fleet-refactor-7" in page.inner_text("#sessions tbody")
    assert page.input_value("#period-filter input[name=tz]") == "Asia/Tokyo"
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"period-drill-{size}")


@pytest.mark.parametrize("size", list(SIZES))
def test_the_overview_refreshes_its_figures_until_switched_off_or_hidden(
    open_page, console_data: Console, size: str
) -> None:
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "watcher", start="/?range=24h")
    page = tracked.page
    assert page.inner_text("#refresh-interval") == "30"
    assert page.inner_text("#refresh-state") == "on"
    calls_before = page.inner_text("#total-calls")
    charts_before = page.get_attribute("#overview-charts .part-key", "value")
    compactions_key = page.get_attribute("#compactions .part-key", "value")

    start = datetime.now(UTC) - timedelta(minutes=3)
    report(console_data.key, working_session("refresh-new-1", 3, start=start))
    with page.expect_response(re.compile(r".*/overview/live\?.*")) as answer:
        page.evaluate("htmx.trigger('#overview-poller', 'refresh')")
    body = answer.value.text()
    assert 'id="totals"' in body and 'id="compactions"' not in body
    page.wait_for_function(
        "(before) => document.querySelector('#total-calls').textContent !== before",
        arg=calls_before,
    )
    assert page.get_attribute("#overview-charts .part-key", "value") != charts_before
    assert page.get_attribute("#compactions .part-key", "value") == compactions_key
    page.wait_for_selector("#chart-spend .barlayer .point", state="attached")  # drawn again

    page.uncheck("#auto-refresh-on")
    assert page.inner_text("#refresh-state") == "off"
    assert page.evaluate("window.consoleRefreshOn()") is False
    page.check("#auto-refresh-on")
    page.evaluate(
        "Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    assert page.inner_text("#refresh-state") == "paused while the tab is hidden"
    assert page.evaluate("window.consoleRefreshOn()") is False
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"period-refresh-{size}")


@pytest.mark.parametrize("size", list(SIZES))
def test_the_sessions_list_names_its_zone_in_the_footer_and_beside_its_period_filter_only(
    open_page, console_data: Console, size: str
) -> None:
    """The foot of every page names the zone; the list says it once more where a time is typed
    (the "Active between" filter), never in a second line of its own."""
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "watcher")
    page = tracked.page
    page.goto("/sessions/?tz=Asia%2FTokyo")
    page.wait_for_selector("#sessions tbody tr")
    shown = page.inner_text("body")
    assert shown.count("Times in") == 1, shown
    assert shown.count("Asia/Tokyo") == 2, shown
    assert page.inner_text("#time-zone") == "Asia/Tokyo"
    assert "Asia/Tokyo" in page.inner_text("#period-filter legend")
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"sessions-zone-{size}")


ZONED_PAGES = {"overview": "/", "cache": "/cache/", "alerts": "/alerts/"}


@pytest.mark.parametrize("size", list(SIZES))
def test_the_pages_with_a_period_picker_name_their_zone_once_in_the_footer(
    open_page, console_data: Console, size: str
) -> None:
    """The picker shows the zone it chose, the foot of the page says "Times in" it; no line of the
    page says it a second time (the alerts history did, under its picker)."""
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "watcher", start="/alerts/")
    page = tracked.page
    said = {}
    for name, path in ZONED_PAGES.items():
        page.goto(f"{path}?tz=Asia%2FTokyo")
        page.wait_for_load_state("networkidle")
        said[name] = page.inner_text("body").lower().count("times in")
        assert page.inner_text("#time-zone") == "Asia/Tokyo", name
        assert page.input_value(".zone-compare select[name=tz]") == "Asia/Tokyo", name
        assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0, name
        tracked.screenshot(f"zone-note-{name}-{size}")
    assert said == dict.fromkeys(ZONED_PAGES, 1)
