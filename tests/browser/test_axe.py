"""Issue 39 item 6: axe-core (WCAG 2.1 A/AA) on every console page, at 1440×900 and 390×844,
in the light and the dark colour scheme (each page is loaded once per size and checked in both:
the scheme switch restyles it in place). Any violation fails the test, listed by rule and element.

axe-core is vendored under tests/browser/vendor/axe-core/ (pinned, with its licence); it is
injected into each page by Playwright and never served by the app. The pages' own
Content-Security-Policy would refuse an injected script, so these contexts bypass it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from pytest_django.live_server_helper import LiveServer

from compaction.models import Archive
from console.saved_views import save_view
from telemetry.session_tags import add_tags
from tests.browser.conftest import SCREENSHOTS, Console, agent_at_work, make_user, sign_in
from tests.browser.conftest import Page as Tracked

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
SCHEMES = ("light", "dark")
GROUND = {"light": "rgb(245, 247, 249)", "dark": "rgb(13, 17, 23)"}  # console.css's --ground
INK = {"light": "#1b1f24", "dark": "#e6edf3"}  # its --ink
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]

# axe's findings, one line per element: "rule: selector (what is wrong)". `colours_only`: only
# the rules axe files under its colour category (contrast, links told apart by colour).
RUN_AXE = """async ([tags, coloursOnly]) => {
  const only = coloursOnly
    ? {type: 'rule', values: axe.getRules(tags).filter(r => r.tags.includes('cat.color')).map(r => r.ruleId)}
    : {type: 'tag', values: tags};
  if (coloursOnly && !only.values.includes('color-contrast')) throw new Error('no colour rules: ' + only.values);
  const result = await axe.run(document, {runOnly: only, resultTypes: ['violations']});
  return result.violations.flatMap(v => v.nodes.map(n =>
    `${v.id}: ${n.target.join(' ')} (${(n.failureSummary || '').split('\\n').slice(1).join(' ').trim().slice(0, 160)})`));
}"""


def axe_violations(tracked: Tracked, *, colours_only: bool = False) -> list[str]:
    page = tracked.page
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return list(page.evaluate(RUN_AXE, [WCAG_21_AA, colours_only]))


def console_pages(console_data: Console) -> dict[str, str]:
    """Every page templates/ renders for a signed-in admin, with data on it."""
    session = agent_at_work(console_data.key, "triage-5", compact=True)
    archive = Archive.objects.get(session=session)
    long = console_data.long_session
    call = session.calls.order_by("pk").first()
    assert call is not None
    # the list's and the session page's tags and saved views, drawn
    add_tags(session_id=long.pk, texts=["needs-review, billing"])
    save_view(user=User.objects.get(username="root"), name="Busy", pairs=[("turns_min", "2")])
    return {
        "overview": "/",
        # the period picker's custom range in a zone, the previous period beside
        "overview-period": "/?range=7d&tz=Europe/Berlin&compare=previous",
        "sessions": reverse("sessions"),
        "sessions-period": reverse("sessions") + "?from=2026-01-01&to=2026-12-31&tz=Asia/Tokyo",
        "session-long": reverse("session", args=[long.pk]),
        "session-compacted": reverse("session", args=[session.pk]),
        "session-cache": reverse("session_cache", args=[session.pk]),
        "archives": reverse("archives"),
        "archive-search": reverse("archives") + "?q=nightly",
        "archive": reverse("archive", args=[archive.pk]),
        "archive-message": reverse("archive_message", args=[archive.pk, 0]),
        "cache": reverse("cache"),
        "cache-summary": reverse("cache_summary"),
        "ttl-advice": reverse("ttl_advisor"),
        "alerts": reverse("alerts"),
        "policy": reverse("policy"),
        "policy-form": reverse("policy_profile", args=["default"]),
        "policy-global": reverse("policy_global"),
        "profile-new": reverse("profile_create"),
        "profile-windows": reverse("profile_windows", args=["default"]),
        "catalogue": reverse("catalogue"),
        "catalogue-form": reverse("catalogue_new"),
        "keys": reverse("keys"),
        "docs": reverse("docs"),
        "audit": reverse("audit"),
        "call": reverse("call", args=[session.pk, call.pk]),
        "not-found": "/no/such/page/",
    }


def scheme_violations(tracked: Tracked, name: str, size: str, found: dict[str, list[str]]) -> None:
    """axe on the page as loaded, in each colour scheme: the system switching scheme restyles
    the page (console.css) and redraws its figures (console.js) in place, so one load serves
    both and the redraw on a switch is checked as well. Every WCAG 2.1 A/AA rule runs in the
    light scheme; in the dark one, which only changes colours, the colour rules do."""
    page = tracked.page
    for first, scheme in zip((True, False), SCHEMES, strict=True):
        page.emulate_media(color_scheme=scheme)
        ground = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        assert ground == GROUND[scheme], (name, scheme, ground)
        if name == "overview":  # its charts follow the system's scheme
            page.wait_for_function(
                "ink => document.querySelector('#chart-spend').layout.font.color.toLowerCase()"
                " === ink",
                arg=INK[scheme],
            )
        # the dark scheme changes console.css's colour variables and nothing else (the same
        # page, layout and markup), so after the full run in the light scheme only the colour
        # rules can find anything new
        found[f"{name}-{size}-{scheme}"] = axe_violations(tracked, colours_only=not first)
        if name in ("overview", "session-compacted"):
            tracked.screenshot(f"axe-{name}-{size}-{scheme}")


def test_no_axe_violation_on_any_page(
    browser: Any, live_server: LiveServer, console_data: Console
) -> None:
    pages = console_pages(console_data)
    make_user("guest", "viewer")
    found: dict[str, list[str]] = {}
    for size, (width, height) in SIZES.items():
        context = browser.new_context(
            viewport={"width": width, "height": height},
            base_url=live_server.url,
            color_scheme=SCHEMES[0],
            bypass_csp=True,
        )
        try:
            page = context.new_page()
            page.set_default_timeout(15_000)
            tracked = Tracked(page)
            page.on("pageerror", lambda exc, t=tracked: t.errors.append(str(exc)))
            page.goto("/accounts/login/")
            scheme_violations(tracked, "sign-in", size, found)
            page.emulate_media(color_scheme=SCHEMES[0])
            sign_in(tracked, "root", start="/")
            for name, path in pages.items():
                page.emulate_media(color_scheme=SCHEMES[0])
                page.goto(path)
                page.wait_for_load_state("networkidle")
                if page.locator("[data-figure]").count():
                    page.wait_for_selector("[data-figure] .main-svg")
                    if size == "phone":  # the mode bar would cover titles and legends there
                        assert page.locator("[data-figure] .modebar-btn").count() == 0, name
                scheme_violations(tracked, name, size, found)
            # a viewer sent to an admin page sees the forbidden page
            page.context.clear_cookies()
            page.emulate_media(color_scheme=SCHEMES[0])
            sign_in(tracked, "guest", start=reverse("policy"))
            scheme_violations(tracked, "forbidden", size, found)
            assert tracked.errors == [], tracked.errors
        finally:
            context.close()
    assert len(found) == (len(pages) + 2) * len(SIZES) * len(SCHEMES)
    failing = {name: lines for name, lines in found.items() if lines}
    assert failing == {}, "\n".join(
        f"{name}: {line}" for name, lines in failing.items() for line in lines
    )
    assert SCREENSHOTS.exists()
