"""Light pages in Chromium (issue 39, item 5): a live update of a session whose surface is open
transfers little (only the parts that changed, gzip-compressed) and keeps the blocks the
operator opened open; the panels that load on their own follow the change."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.urls import reverse

from compaction.rawjson import Span
from compaction.transcripts import append_messages
from telemetry.models import AgentSession
from tests.browser.conftest import Console, report, sign_in, working_session
from tests.support import tool_transcript

DESKTOP = (1440, 900)
LIVE_UPDATE_BYTES = 20 * 1024


def _busy_session(console_data: Console, session_id: str, turns: int) -> AgentSession:
    """A session with `turns` turns and a transcript of about 500 KB (the surface now)."""
    start = datetime.now(UTC) - timedelta(minutes=40)
    records = working_session(session_id, turns, start=start)
    report(console_data.key, records[:1])
    session = AgentSession.objects.get(profile=console_data.key.profile, external_id=session_id)
    messages = tool_transcript(40, result_chars=12_000)
    system = "You are a careful build engineer."
    append_messages(
        session=session,
        fmt="anthropic",
        system=Span(system, f'"{system}"'),
        messages=[Span(m, json.dumps(m)) for m in messages],
    )
    report(console_data.key, [{**r, "surface_version": 1} for r in records[1:]])
    session.refresh_from_db()
    return session


class Transfers:
    """Bytes on the wire per URL, from Chromium's Network domain (encodedDataLength: headers
    and the body as sent, compressed)."""

    def __init__(self, page: Any) -> None:
        self.urls: dict[str, str] = {}
        self.done: list[tuple[str, int]] = []
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.responseReceived", self._response)
        cdp.on("Network.loadingFinished", self._finished)
        cdp.send("Network.enable")
        self.cdp = cdp

    def _response(self, event: dict[str, Any]) -> None:
        self.urls[event["requestId"]] = event["response"]["url"]

    def _finished(self, event: dict[str, Any]) -> None:
        url = self.urls.get(event["requestId"], "")
        self.done.append((url, int(event["encodedDataLength"])))

    def since(self, mark: int) -> list[tuple[str, int]]:
        return self.done[mark:]


def test_a_live_update_with_the_surface_open_is_small_and_keeps_open_blocks_open(
    open_page, console_data: Console
) -> None:
    session = _busy_session(console_data, "light-7", 60)
    tracked = open_page(*DESKTOP)
    sign_in(tracked, "watcher")
    page = tracked.page
    transfers = Transfers(page)
    page.goto(reverse("session", args=[session.pk]))
    page.wait_for_selector("#chart-cost .main-svg")
    page.wait_for_selector("#surface .msg")
    page.wait_for_selector("#cache-misses.panel, section#cache-misses")
    page.wait_for_selector("#compact-plan.subsection")
    page_bytes = sum(size for _, size in transfers.since(0))
    # the operator opens a tool result in the surface
    block = page.locator("#surface details").first
    block.locator("summary").click()
    assert block.evaluate("d => d.open")
    opened = block.locator("summary").inner_text()
    with page.expect_response(lambda r: "/live" in r.url and r.status == 304, timeout=15_000):
        pass  # nothing changed: 304
    mark = len(transfers.done)
    late = working_session("light-7", 61, start=datetime.now(UTC) - timedelta(minutes=1))[60]
    report(console_data.key, [{**late, "surface_version": 1}])
    with page.expect_response(lambda r: "/live" in r.url and r.status == 200, timeout=15_000):
        pass
    # the turn number is a link to its calls: the first cell's text is the turn
    from playwright.sync_api import expect

    expect(page.locator("#turns tbody tr").first.locator("td").first).to_have_text(
        "60", timeout=15_000
    )
    # the panels that reload on the change: wait for both answers
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        urls = [url for url, _ in transfers.since(mark)]
        if any("/cache" in u for u in urls) and any("/plan" in u for u in urls):
            break
        page.wait_for_timeout(200)
    page.wait_for_timeout(300)
    update = transfers.since(mark)
    sent = sum(size for url, size in update if "/sessions/" in url)
    assert any("/live" in url for url, _ in update)
    assert any("/cache" in url for url, _ in update), update
    assert any("/plan" in url for url, _ in update), update
    assert sent <= LIVE_UPDATE_BYTES, (sent, update, page_bytes)
    # the block the operator opened is still open, in the surface as drawn now
    still = page.locator("#surface details", has_text=opened).first
    assert still.evaluate("d => d.open")
    assert page.locator("#live .figure").nth(4).locator(".value").inner_text() == "61"
    tracked.screenshot("light-pages-live-update")
    print(f"page {page_bytes} bytes; live update {sent} bytes: {update}")
