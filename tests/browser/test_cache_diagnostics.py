"""The providers' cache diagnostics in Chromium: a Claude Code transcript and a JSON record that
carry `cache_miss_reason` show both causes, the provider's and ours, on the session's Cache panel;
the Cache page reports the agreement per profile."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from compaction.imports.store import import_file
from telemetry.models import AgentSession
from tests.browser.conftest import SONNET, Console, report, sign_in
from tests.db.test_cache_diagnostics import MESSAGES_CHANGED, transcript_lines

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def _record(turn: int, write: int, **extra: object) -> dict[str, object]:
    at = timezone.now() - timedelta(minutes=30) + timedelta(minutes=turn)
    return {
        "session_id": "diagnosed-json-1",
        "turn": turn,
        "model": SONNET,
        "at": at.isoformat(),
        "usage": {
            "input_tokens": 100,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": write,
            "output_tokens": 200,
        },
        **extra,
    }


def _misses_panel(page: Any, session: AgentSession) -> str:
    page.goto(f"/sessions/{session.pk}/")
    page.wait_for_selector("#cache-misses table.misses", timeout=15_000)
    page.locator("#cache-misses").scroll_into_view_if_needed()
    return str(page.locator("#cache-misses").inner_text())


def test_a_transcript_and_a_json_record_show_both_causes_on_the_cache_panel(
    open_page, console_data: Console, tmp_path: Path
):
    report(
        console_data.key,
        [_record(0, 50_000), _record(1, 52_000, diagnostics=MESSAGES_CHANGED)],
    )
    json_session = AgentSession.objects.get(external_id="diagnosed-json-1")
    path = tmp_path / "d1a2b3c4-1111-4222-8333-944455556666.jsonl"
    path.write_text(transcript_lines())
    with path.open("rb") as handle:
        imported = import_file(profile=console_data.key.profile, path=str(path), handle=handle)
    assert imported.calls == 2
    transcript_session = AgentSession.objects.get(
        profile=console_data.key.profile, external_id__contains="d1a2b3c4"
    )

    tracked = open_page()
    page = tracked.page
    sign_in(tracked, "ops")
    for session, name in ((json_session, "json"), (transcript_session, "transcript")):
        text = _misses_panel(page, session)
        assert "provider: messages_changed, 12,016 tokens; ours: unexplained" in text
        assert "prefix changed" in text  # the provider's verdict is the cause
        assert "from the provider, ours differs" in text
        assert "our own reading agreed on 0 (0 %)" in text
        tracked.screenshot(f"cache-diagnostics-01-{name}")

    page.goto("/cache/")
    row = page.locator("tr", has_text="default").first
    assert "0 %" in row.inner_text() and "0 of 2" in row.inner_text()
    page.get_by_text("Agreement with provider").scroll_into_view_if_needed()
    tracked.screenshot("cache-diagnostics-02-agreement")
