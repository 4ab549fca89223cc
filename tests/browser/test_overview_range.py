"""Issue 38, cases 6 and 7 in Chromium at 1440 and 390 px: the overview's counts and charts
follow its range and profile and its bars sit on their interval; each figure keeps one clock,
a run of ours sits after the turn the server had received, first and last seen are the
agent's time. Captured into var/screenshots/ (`overview-range-*`, `session-clocks-*`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse

from compaction.services import compact_session
from console.periods import PRESETS
from tests.browser.conftest import Console, agent_at_work, report, sign_in, working_session

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
WIDER_THAN_VIEWPORT = "document.documentElement.scrollWidth - window.innerWidth"

# Where the first bar of a chart is drawn, against where its bucket starts and ends on the axis
# (plot pixels): a bar centred on its start would begin half a bucket early.
BAR_EDGES = """(id) => {
  const gd = document.getElementById(id);
  const xa = gd._fullLayout.xaxis;
  const trace = gd._fullData.find((t) => t.type === 'bar' && t.y.some((v) => v > 0));
  const i = trace.y.findIndex((v) => v > 0);
  const start = xa.d2p(trace.x[i]);
  const end = xa.d2p(new Date(new Date(trace.x[i]).getTime() + trace.width).toISOString());
  const paths = gd.querySelectorAll('.barlayer .trace')[gd._fullData.indexOf(trace)]
    .querySelectorAll('.point path');
  const box = paths[i].getBBox();
  return {start, end, left: box.x, right: box.x + box.width};
}"""


def _old_and_new(console: Console) -> None:
    """Beside the fixture's sessions (all seen within 5 hours), three sessions last seen
    four days ago: "1h" must not count them, "7d" must."""
    start = datetime.now(UTC) - timedelta(days=4)
    for n in range(3):
        report(console.key, working_session(f"last-week-{n}", 3, start=start))


@pytest.mark.parametrize("size", list(SIZES))
def test_case_6_the_overview_counts_and_draws_what_its_range_and_profile_hold(
    open_page, console_data: Console, size: str
) -> None:
    _old_and_new(console_data)
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "watcher", start="/?range=1h")
    page = tracked.page

    def counted() -> int:
        return sum(int(n) for n in page.locator("#bands .band-count strong").all_inner_texts())

    # in the last hour: chat-support-12, local-llama-2 and fleet-refactor-7 (its 420 turns end
    # 20 minutes ago), not batch-summaries-3 (ended hours ago) nor the week-old ones
    assert counted() == 3
    assert "active in the last 1h" in page.inner_text("#bands-scope")
    page.click(".range-picker >> text=7d")
    page.wait_for_url(re.compile(r".*range=7d.*"))
    assert counted() == 4 + 3
    # the premiums section follows the range
    page.wait_for_selector("#miss-premiums >> text=in the last 7d")

    # the hour bars of "24h" span their hour
    page.click(".range-picker >> text=24h")
    page.wait_for_url(re.compile(r".*range=24h.*"))
    page.wait_for_selector("#chart-spend .barlayer .point", state="attached")
    edges: dict[str, Any] = page.evaluate(BAR_EDGES, "chart-spend")
    assert abs(edges["left"] - edges["start"]) <= 1.5, edges
    assert abs(edges["right"] - edges["end"]) <= 1.5, edges
    assert "agent's clock" in page.inner_text("#chart-spend")

    # one profile narrows the counts, and the band opens the same sessions in the list
    page.select_option("select[name=profile]", "default")
    page.wait_for_url(re.compile(r".*profile=default.*"))
    assert counted() == 3
    page.wait_for_selector("#miss-premiums >> text=by default")
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"overview-range-{size}")
    ok = int(page.inner_text("#bands a.band-count:has(.band-ok) strong"))
    page.click("#bands a.band-count:has(.band-ok)")
    page.wait_for_url(re.compile(r".*/sessions/\?band=ok&seen=24h&profile=default"))
    assert page.locator("#sessions tbody tr").count() == ok
    assert page.locator("select[name=seen]").input_value() == "24h"


@pytest.mark.parametrize("size", list(SIZES))
def test_case_7_one_clock_per_figure_and_a_run_after_the_turn_the_server_had(
    open_page, console_data: Console, size: str
) -> None:
    """The agent's clock runs six hours behind the server's. Placed by comparing clocks, the
    run would sit after the last turn of all; it sits after the turn received before it."""
    session = agent_at_work(console_data.key, "behind-6", compact=False)
    behind = datetime.now(UTC) - timedelta(hours=6)
    # the turns so far (0-3) happened, by the agent's clock, six hours ago
    from telemetry.models import LLMCall, Turn

    LLMCall.objects.filter(session=session).update(at=behind)
    Turn.objects.filter(session=session).update(first_at=behind, last_at=behind)
    compact_session(session_id=session.pk, mode="manual", requested_by="user:ops")
    later = working_session("behind-6", 7, start=behind + timedelta(minutes=5))
    report(console_data.key, [{**r, "surface_version": 2} for r in later[4:]])

    tracked = open_page(*SIZES[size])
    sign_in(tracked, "ops", start=reverse("session", args=[session.pk]))
    page = tracked.page
    page.wait_for_selector("#chart-pressure .main-svg")
    annotations: list[dict[str, Any]] = page.evaluate(
        "() => document.getElementById('chart-pressure').layout.annotations"
        ".filter((a) => a.hovertext)"
    )
    (marker,) = annotations
    assert marker["x"] == 4  # after turn 3, the last the server had received
    assert "after turn 3" in marker["hovertext"]
    assert "server time" in marker["hovertext"] and "agent time" in marker["hovertext"]
    assert "agent's clock" in page.inner_text("#chart-clocks")
    # first seen is the agent's first call, six hours ago, not when the row was made
    first = page.get_attribute("#first-seen", "datetime") or ""
    assert datetime.fromisoformat(first) < datetime.now(UTC) - timedelta(hours=5)
    assert page.evaluate(WIDER_THAN_VIEWPORT) <= 0
    tracked.screenshot(f"session-clocks-{size}")


# Each time axis of a page, as plotly drew it: its range and its first tick, in plotly's
# milliseconds (the wall clock read as if it were UTC).
AXES = """() => Array.from(document.querySelectorAll('[data-figure]'))
  .filter((gd) => gd._fullLayout && gd._fullLayout.xaxis.type === 'date')
  .map((gd) => {
    const xa = gd._fullLayout.xaxis;
    return {id: gd.id, start: xa.r2l(xa.range[0]), end: xa.r2l(xa.range[1]),
            ticks: xa._vals.map((t) => t.x)};
  })"""


MINUTE_MS = 60_000  # the axis's ends are taken up to the whole minute


def _wall_ms(at: datetime, zone: str) -> float:
    """`at` as plotly places it on a date axis: its wall clock in `zone`, in milliseconds."""
    return at.astimezone(ZoneInfo(zone)).replace(tzinfo=UTC).timestamp() * 1000


@pytest.mark.parametrize(
    ("preset", "zone"), [("1h", "Asia/Kolkata"), ("24h", "America/New_York"), ("7d", "UTC")]
)
def test_every_time_axis_starts_at_the_period_start(
    open_page, console_data: Console, preset: str, zone: str
) -> None:
    """Plotly's autorange would pad the axis to the first bucket's start and put a tick before
    the period begins; the axis spans the period itself, on the overview and the cache page."""
    tracked = open_page(1440, 900)
    sign_in(tracked, "watcher", start="/cache/")
    page = tracked.page
    length = PRESETS[preset]
    for path, charts in (("/", 3), ("/cache/", 1)):
        before = datetime.now(UTC)
        page.goto(f"{path}?range={preset}&tz={zone}")
        page.wait_for_function(f"() => document.querySelectorAll('.main-svg').length >= {charts}")
        after = datetime.now(UTC)
        axes: list[dict[str, Any]] = page.evaluate(AXES)
        assert len(axes) >= charts, axes
        for axis in axes:
            # the period is the preset ending when the server read the request, to the minute
            assert _wall_ms(before - length, zone) - 1 <= axis["start"], axis
            assert axis["start"] <= _wall_ms(after - length, zone) + MINUTE_MS, axis
            assert _wall_ms(before, zone) - 1 <= axis["end"], axis
            assert axis["end"] <= _wall_ms(after, zone) + MINUTE_MS, axis
            assert axis["ticks"] and min(axis["ticks"]) >= axis["start"], axis
        tracked.screenshot(f"axis-start-{path.strip('/') or 'overview'}-{preset}")
