"""Every chart page draws its charts with the vendored plotly.js bundle (issue 39, item 5), at
1440×900 and 390×844: every figure is drawn, every trace keeps its type (plotly draws a trace
type its bundle lacks as an empty scatter, without an error), no JavaScript error is logged (the
open_page fixture fails on any), on a phone no legend or mode bar lies over a title, and at
either size no title, legend entry or tick label lies over another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from console.cache_charts import premiums_by_bucket_figure
from console.plotly_bundle import bundle
from telemetry.cache_misses import CAUSE_LABELS, CAUSES
from tests.browser.conftest import Console, agent_at_work, sign_in

pytestmark = [pytest.mark.browser]

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}

# Per drawn chart: its trace types as given and as plotly took them, the boxes of its title,
# legend and (visible) mode bar, and each text plotly drew in it as [kind, text, box]: the
# titles, the legend's entries and the axes' tick labels.
CHARTS = """() => {
  const KINDS = {'.gtitle': 'title', '.xtitle': 'axis title', '.ytitle': 'axis title',
    '.y2title': 'axis title', '.legendtext': 'legend', '.xtick text': 'x tick',
    '.ytick text': 'y tick', '.y2tick text': 'y tick'};
  const rect = node => {
    const r = node.getBoundingClientRect();
    return r.width && r.height ? [r.left, r.top, r.right, r.bottom] : null;
  };
  return Array.from(document.querySelectorAll('[data-figure], [id^=chart-]'))
    .filter(holder => holder.data)
    .map(holder => {
      const box = selector => {
        const node = holder.querySelector(selector);
        return node ? rect(node) : null;
      };
      const texts = [];
      for (const [selector, kind] of Object.entries(KINDS)) {
        holder.querySelectorAll(selector).forEach(node => {
          if (rect(node)) texts.push([kind, node.textContent, rect(node)]);
        });
      }
      return {
        id: holder.id || holder.dataset.figure,
        given: holder.data.map(t => t.type || 'scatter'),
        drawn: holder._fullData.map(t => t.type),
        svg: holder.querySelectorAll('.main-svg').length,
        title: box('.gtitle'),
        legend: box('.legend .bg'),
        modebar: box('.modebar-container .modebar'),
        texts: texts,
      };
    });
}"""


def _overlap(a: list[float] | None, b: list[float] | None) -> bool:
    if a is None or b is None:
        return False
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _overlapping_texts(texts: list[list[Any]]) -> list[tuple[str, str]]:
    """Pairs of a chart's texts drawn over each other by more than a pixel each way. Tick labels
    of one axis never collide (plotly turns or thins them), and an x tick may reach into the
    corner beside the y axis's lowest label, whose boxes, not letters, meet."""
    found = []
    for i, (kind_a, text_a, a) in enumerate(texts):
        for kind_b, text_b, b in texts[i + 1 :]:
            if {kind_a, kind_b} <= {"x tick", "y tick"}:
                continue
            if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1:
                found.append((f"{kind_a} {text_a!r}", f"{kind_b} {text_b!r}"))
    return found


def chart_pages(console_data: Console) -> dict[str, tuple[str, int]]:
    """Each page that loads plotly, and how many charts it draws at least."""
    session = agent_at_work(console_data.key, "charts-3", compact=True)
    long = console_data.long_session
    return {
        "overview": ("/?range=7d", 3),
        "session": (reverse("session", args=[long.pk]), 4),
        "session-compacted": (reverse("session", args=[session.pk]), 4),
        "session-cache": (reverse("session_cache", args=[long.pk]), 1),
        "cache": (reverse("cache"), 1),
        "cache-summary": (reverse("cache_summary") + "?range=7d", 1),
    }


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_chart_page_draws_its_charts_with_the_bundle(
    open_page, console_data: Console, size: str
) -> None:
    pages = chart_pages(console_data)
    tracked = open_page(*SIZES[size])
    sign_in(tracked, "root")
    page = tracked.page
    for name, (path, least) in pages.items():
        page.goto(path)
        page.wait_for_load_state("networkidle")
        scripts = page.eval_on_selector_all("script[src]", "nodes => nodes.map(n => n.src)")
        assert any(bundle().file.removesuffix(".js") in src for src in scripts), (name, scripts)
        assert page.evaluate("typeof Plotly") == "object", name
        charts: list[dict[str, Any]] = page.evaluate(CHARTS)
        assert len(charts) >= least, (name, [c["id"] for c in charts])
        for chart in charts:
            assert chart["svg"] >= 1, (name, chart["id"])
            assert chart["drawn"] == chart["given"], (name, chart)
            assert set(chart["given"]) <= bundle().traces, (name, chart)
            assert not _overlap(chart["legend"], chart["title"]), (name, size, chart)
            assert not _overlapping_texts(chart["texts"]), (name, size, chart["id"])
            if size == "phone":  # the mode bar would cover the title and legend there
                assert chart["modebar"] is None, (name, chart)
            else:
                assert not _overlap(chart["modebar"], chart["title"]), (name, size, chart)
        tracked.screenshot(f"chart-bundle-{name}-{size}")


def test_a_legend_wrapping_one_entry_a_row_on_a_phone_moves_the_plot_not_over_the_title(
    open_page, console_data: Console
) -> None:
    """Every miss cause at once: their names are too long for the two entries a row `fitNarrow`
    counts, so the legend takes a row each and grew over the title until console.js measured it
    once drawn and moved the plot down by the overlap (`clearTitle`)."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    figure = premiums_by_bucket_figure(
        starts=[start],
        step=timedelta(hours=1),
        by_bucket={start: dict.fromkeys(CAUSES, Decimal("0.5"))},
        labels=CAUSE_LABELS,
    )
    assert len(figure["data"]) == len(CAUSES) >= 6
    tracked = open_page(*SIZES["phone"])
    sign_in(tracked, "root")
    page = tracked.page
    page.goto(reverse("cache"))
    page.wait_for_load_state("networkidle")
    # a holder and its figure as the pages embed them, processed as an htmx swap is
    page.evaluate(
        """figure => {
          const source = document.createElement('script');
          source.type = 'application/json';
          source.id = 'fig-every-cause';
          source.textContent = JSON.stringify(figure);
          const holder = document.createElement('div');
          holder.className = 'chart';
          holder.id = 'chart-every-cause';
          holder.dataset.figure = 'fig-every-cause';
          const part = document.createElement('section');
          part.append(source, holder);
          document.querySelector('main').prepend(part);
          htmx.trigger(part, 'htmx:load', {elt: part});
        }""",
        figure,
    )
    page.wait_for_function(
        "() => { const h = document.getElementById('chart-every-cause');"
        " return h && h._fullLayout && h.querySelector('.legend'); }"
    )
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # the relayout after the measurement
    chart = next(c for c in page.evaluate(CHARTS) if c["id"] == "chart-every-cause")
    legend_rows = {round(box[1]) for kind, _, box in chart["texts"] if kind == "legend"}
    assert len(legend_rows) > len(CAUSES) / 2  # wider than two a row: the case fitNarrow misses
    assert chart["title"] and chart["legend"]
    assert not _overlap(chart["legend"], chart["title"]), chart
    assert not _overlapping_texts(chart["texts"]), chart["texts"]
    tracked.screenshot("chart-bundle-every-cause-phone")
