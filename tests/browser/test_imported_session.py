"""An operator browses an imported Claude Code session: the agent's own compaction with its
summary, and one click to the surface the agent sent after it (issue 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction.imports.store import import_file
from telemetry.models import AgentSession
from telemetry.profiles import get_or_create_profile
from telemetry.seeding import ensure_defaults
from tests.browser.conftest import make_user, sign_in
from tests.unit.imports import fixtures as fx


def test_an_operator_sees_the_agent_compaction_and_the_surface_after_it(
    open_page: Any, transactional_db: None, tmp_path: Path
) -> None:
    ensure_defaults()
    profile = get_or_create_profile(name="laptop")
    path = tmp_path / f"{fx.SESSION}.jsonl"
    path.write_text(fx.claude_code_session())
    with path.open("rb") as handle:
        import_file(profile=profile, path=str(path), handle=handle)
    session = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    make_user("ops", "operator")
    tracked = open_page()
    page = tracked.page
    sign_in(tracked, "ops", start=f"/sessions/{session.pk}/")
    panel = page.locator("#imported")
    assert "claude-code" in panel.inner_text()
    assert panel.locator("a", has_text="sidechain").count() == 1
    # the agent's compaction is one row of the context events (listed once, not twice); its
    # summary opens in place and wraps inside the page
    events = page.locator("table.context-events tbody tr")
    assert events.count() == 1
    events.locator("summary").click()
    summary = events.locator(".summary-text")
    assert "This session is being continued" in summary.inner_text()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width
    events.locator("a.surface-after").click()
    page.wait_for_selector("#surface h2:has-text('turn 1')")
    surface = page.locator("#surface").inner_text()
    assert surface.index("This session is being continued") < surface.index("Add the dependency")
    assert "Why does the build fail?" not in surface
    assert "surface_turn=1" in page.url
    tracked.screenshot("imported-session")
