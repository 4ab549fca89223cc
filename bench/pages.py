"""PG1–PG3: what a browser transfers and waits for on the chart pages (issue 39, item 5).

Chromium (Debian's, through Playwright, with the browser tests' flags) against the bench's
gunicorn (production settings: static files hashed, gzip-precompressed and cached for a year by
WhiteNoise; pages and fragments gzip-compressed by `console.middleware.Compress`), signed in as
the bench's viewer. Two pages: the session page of a realistic session (300 turns, a transcript
of about 400 KB whose surface the page loads and shows) and the overview.

Each run opens a fresh browser context (an empty cache), navigates to the page (cold), waits
until every chart is drawn and the network is quiet, then navigates to it again (warm, as an
operator following a link back). Bytes are Chromium's `encodedDataLength` of every response of
the navigation (headers and body as sent, compressed); DOMContentLoaded is the navigation
timing's `domContentLoadedEventEnd`, which includes running the deferred scripts (plotly.js).
PG3: with the session page open, one new call is reported for the session; the bytes of the
live update that follows (the poll's answer and the panels it reloads) are summed.

B_full, the baseline, is the same pages from a second gunicorn serving plotly's full bundle
(the plotly Python package's copy of the same plotly.js version) exactly as the vendored one is
served (`bench.full_plotly`); its visits alternate with the product's. Medians of the runs. Bars: ≤ 1 MB cold, ≤ 100 KB warm, ≤ 0.8 s DOMContentLoaded warm, ≤ 20 KB a
live update.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.load import median

if TYPE_CHECKING:
    from bench.run import Bench

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1440, "height": 900}
SESSION_ID = "pages-session"
TURNS = 300
ROUNDS = 30  # tool rounds of the transcript: every message is on the surface (≤ 60 shown)
RESULT_CHARS = 12_000
WORDS = [
    "build",
    "cache",
    "config",
    "error",
    "warning",
    "linker",
    "object",
    "module",
    "target",
    "runner",
    "arm64",
    "x86",
    "test",
    "fixture",
    "timeout",
    "retry",
    "worker",
    "queue",
    "compile",
    "assert",
    "expected",
    "actual",
    "failed",
    "passed",
    "skip",
    "import",
    "export",
    "parse",
    "token",
    "buffer",
    "socket",
    "thread",
    "lock",
    "mutex",
    "alloc",
    "free",
    "heap",
    "stack",
    "frame",
]
COLD_BYTES = 1_000_000
WARM_BYTES = 100 * 1024
WARM_DCL_MS = 800
LIVE_BYTES = 20 * 1024
# every chart the page draws, and the panels that load on their own, are in
DRAWN = """() => {
  const holders = Array.from(document.querySelectorAll('[data-figure]'));
  return typeof Plotly === 'object' && holders.length > 0
    && holders.every(h => h.querySelector('.main-svg'))
    && !document.querySelector('[hx-trigger="load"]');
}"""
DCL = """() => {
  const [nav] = performance.getEntriesByType('navigation');
  return nav.domContentLoadedEventEnd - nav.startTime;
}"""


@dataclass
class Transfers:
    """Bytes on the wire per response, from Chromium's Network domain (encodedDataLength:
    headers and body as sent, compressed; 0 for an answer from the memory cache)."""

    urls: dict[str, str] = field(default_factory=dict)
    done: list[tuple[str, int]] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.responseReceived", self._response)
        cdp.on("Network.loadingFinished", self._finished)
        cdp.send("Network.enable")

    def _response(self, event: dict[str, Any]) -> None:
        self.urls[event["requestId"]] = event["response"]["url"]

    def _finished(self, event: dict[str, Any]) -> None:
        self.done.append((self.urls.get(event["requestId"], ""), int(event["encodedDataLength"])))

    def since(self, mark: int) -> list[tuple[str, int]]:
        return self.done[mark:]


def transcript(rounds: int, result_chars: int) -> list[dict[str, Any]]:
    """A goal, then `rounds` tool calls whose results read like build logs and source: varied
    words, paths, numbers and hashes from a seeded generator, so they compress about as real
    tool output does (repeated lines would compress to almost nothing)."""
    rng = random.Random(39)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "The nightly build fails on the ARM runners; find out why."}
    ]
    for i in range(rounds):
        lines: list[str] = []
        while sum(len(line) + 1 for line in lines) < result_chars:
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
            lines.append(
                f"{rng.randint(1, 9999):>5} src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py:"
                f"{rng.randint(1, 800)} {words} 0x{rng.getrandbits(32):08x} "
                f"{rng.random() * 1000:.3f}ms"
            )
        items.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}: reading the next log."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:04d}",
                        "name": "read_log",
                        "input": {"part": i},
                    },
                ],
            }
        )
        items.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i:04d}",
                        "content": "\n".join(lines),
                    }
                ],
            }
        )
    return items


def seed(bench: Bench) -> int:
    """The session page's session: calls in the last hour, a transcript whose surface is
    current."""
    from bench.data import record
    from compaction.rawjson import Span
    from compaction.transcripts import append_messages
    from telemetry.models import AgentSession

    start = datetime.now(UTC) - timedelta(minutes=50)
    records = [record(SESSION_ID, t, at=start + timedelta(seconds=9 * t)) for t in range(TURNS)]
    bench.ingest(records[:1])
    session = AgentSession.objects.get(profile=bench.key.profile, external_id=SESSION_ID)
    values = [{"seq": seq, **item} for seq, item in enumerate(transcript(ROUNDS, RESULT_CHARS))]
    spans = [Span(value, json.dumps(value, ensure_ascii=False)) for value in values]
    append_messages(session=session, fmt="anthropic", system=None, messages=spans)
    bench.ingest([{**r, "surface_version": 1} for r in records[1:]])
    return int(session.pk)


def next_call(turn: int) -> dict[str, Any]:
    """A new call of the session page's session (PG3), as the agent reports it."""
    from bench.data import record

    return {**record(SESSION_ID, turn, at=datetime.now(UTC)), "surface_version": 1}


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls between its steps
    # (PG3's new call) are plain synchronous code all the same.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _visit(page: Any, transfers: Transfers, url: str) -> dict[str, Any]:
    mark = len(transfers.done)
    page.goto(url)
    page.wait_for_function(DRAWN, timeout=60_000, polling=20)
    drawn_ms = float(page.evaluate("() => performance.now()"))
    page.wait_for_load_state("networkidle")
    responses = transfers.since(mark)
    return {
        "bytes": sum(size for _, size in responses),
        "dcl_ms": float(page.evaluate(DCL)),
        "drawn_ms": drawn_ms,  # every chart drawn and every self-loading panel in (±20 ms)
        "responses": len(responses),
        "largest": sorted(responses, key=lambda r: -r[1])[:4],
    }


def _live_update(bench: Bench, page: Any, transfers: Transfers, late: dict[str, Any]) -> int:
    """Bytes of the session page's live update after one new call: the poll's 200 and the
    panels it reloads (cache misses, the compaction plan)."""
    mark = len(transfers.done)
    with page.expect_response(lambda r: "/live" in r.url and r.status == 200, timeout=60_000):
        bench.ingest([late])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        urls = [url for url, _ in transfers.since(mark)]
        if any(u.endswith("/cache") for u in urls) and any(u.endswith("/plan") for u in urls):
            break
        page.wait_for_timeout(200)
    page.wait_for_load_state("networkidle")
    return sum(size for url, size in transfers.since(mark) if "/sessions/" in url)


def full_bundle_server(bench: Bench) -> int | None:
    """B_full's server: a second gunicorn like the bench's, serving plotly's full bundle (the
    plotly Python package's own copy, the same version) under the vendored bundle's name
    (`bench.full_plotly`); None when the plotly package is not installed."""
    try:
        import plotly
    except ImportError:
        return None
    from bench.services import ROOT, start_gunicorn
    from console.plotly_bundle import bundle

    root = Path(bench.var_dir) / "full-plotly"
    (root / "bundle").mkdir(parents=True, exist_ok=True)
    full = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    shutil.copyfile(full, root / "bundle" / bundle().file)
    env = dict(os.environ) | {"BENCH_FULL_PLOTLY_DIR": str(root)}
    manage = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    subprocess.run(manage, cwd=ROOT, env=env, check=True)
    _, port = start_gunicorn(
        env,
        bench.log_dir,
        bench.cleanup,
        workers=bench.args.web_workers or 2 * (os.cpu_count() or 1),
        worker_class=bench.args.worker_class,
        threads=bench.args.threads,
        name="gunicorn-full-plotly",
    )
    return int(port)


def measure_pages(bench: Bench) -> None:
    from django.conf import settings

    from telemetry.models import LLMCall

    pk = seed(bench)
    surface = bench.client.get(
        f"/sessions/{pk}/", headers={"HX-Request": "true", "HX-Target": "surface"}
    )
    assert surface.status_code == 200 and b'class="msg' in surface.content
    servers = {"product": bench.port}
    full_port = full_bundle_server(bench)
    if full_port is not None:
        servers["full"] = full_port
    cookie = bench.client.cookies[settings.SESSION_COOKIE_NAME].value
    paths = {"session": f"/sessions/{pk}/", "overview": "/"}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
        (server, name): [] for server in servers for name in paths
    }
    live: list[int] = []
    with chromium() as browser:
        for run in range(-1, bench.sizes.runs):  # run -1: a warm-up, discarded
            for name, path in paths.items():
                # the product and its baseline alternate, so a busy machine's drift hits both
                for server, port in servers.items():
                    base = f"http://127.0.0.1:{port}"
                    context = browser.new_context(viewport=VIEWPORT)
                    context.add_cookies(
                        [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}]
                    )
                    page = context.new_page()
                    page.set_default_timeout(60_000)
                    transfers = Transfers()
                    transfers.attach(page)
                    cold = _visit(page, transfers, base + path)
                    warm = _visit(page, transfers, base + path)
                    if name == "session" and server == "product":
                        turn = TURNS + 1 + run
                        size = _live_update(bench, page, transfers, next_call(turn))
                        if run >= 0:
                            live.append(size)
                    context.close()
                    if run >= 0:
                        runs[server, name].append({"cold": cold, "warm": warm})
    calls = LLMCall.objects.filter(session_id=pk).count()
    from bench.run import Bar

    def medians(measured: list[dict[str, Any]]) -> dict[str, float]:
        return {
            f"{visit}_{figure}": median([r[visit][figure] for r in measured])
            for visit in ("cold", "warm")
            for figure in ("bytes", "dcl_ms", "drawn_ms")
        }

    for number, name in ((1, "session"), (2, "overview")):
        got = medians(runs["product", name])
        baseline = medians(runs["full", name]) if "full" in servers else None
        bench.measurement(
            f"PG{number}",
            page=paths[name],
            **got,
            surface_bytes=len(surface.content) if name == "session" else None,
            runs=runs["product", name],
        )
        if baseline is not None:
            bench.baseline(f"B_full_{name}", **baseline, runs=runs["full", name])
        what = (
            f"session page ({calls} calls, surface open: {len(surface.content) / 1024:,.0f} KB)"
            if name == "session"
            else "overview"
        )
        bench.bars.append(
            Bar(
                f"PG{number}",
                f"{what}: bytes cold / warm, DOMContentLoaded warm",
                f"{got['cold_bytes'] / 1024:,.0f} KB / {got['warm_bytes'] / 1024:,.1f} KB / "
                f"{got['warm_dcl_ms']:,.0f} ms",
                "—"
                if baseline is None
                else f"B_full {baseline['cold_bytes'] / 1024:,.0f} KB / "
                f"{baseline['warm_bytes'] / 1024:,.1f} KB / {baseline['warm_dcl_ms']:,.0f} ms",
                None if baseline is None else got["warm_dcl_ms"] / baseline["warm_dcl_ms"],
                "≤ 1 MB / ≤ 100 KB / ≤ 0.8 s",
                got["cold_bytes"] <= COLD_BYTES
                and got["warm_bytes"] <= WARM_BYTES
                and got["warm_dcl_ms"] <= WARM_DCL_MS,
                f"cold DOMContentLoaded {got['cold_dcl_ms']:,.0f} ms; charts drawn cold "
                f"{got['cold_drawn_ms']:,.0f} ms, warm {got['warm_drawn_ms']:,.0f} ms"
                + (
                    ""
                    if baseline is None
                    else f" (B_full: {baseline['cold_drawn_ms']:,.0f} ms, "
                    f"{baseline['warm_drawn_ms']:,.0f} ms); ratio: warm DOMContentLoaded"
                ),
            )
        )
    update = median(live)
    bench.measurement("PG3", bytes=update, runs=live)
    bench.bars.append(
        Bar(
            "PG3",
            "live update of the session page after a new call, surface open (poll + panels)",
            f"{update / 1024:,.1f} KB",
            "—",
            None,
            "≤ 20 KB",
            update <= LIVE_BYTES,
        )
    )
