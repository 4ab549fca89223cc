"""Send the cache-miss demo (`demo.cache_scenario`) through the API: every cause the console
names appears on demo data (D1, D2). Used by `manage.py simulate`; skipped when already sent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from demo.cache_scenario import (
    causes_session,
    compacted_records,
    compacted_transcript,
    volatile_system_session,
)
from telemetry.events import record_context_event
from telemetry.models import AgentSession

Call = Callable[[str, str, str, object | None], tuple[int, Any]]
TELEMETRY = "api/v1/telemetry"
SESSIONS = "api/v1/sessions"


class DemoError(RuntimeError):
    pass


def _expect(status: int, body: Any, what: str, *ok: int) -> Any:
    if status not in ok:
        raise DemoError(f"{what}: expected {ok}, got {status}: {body}")
    return body


def _post_records(call: Call, key: str, records: list[dict[str, Any]]) -> None:
    body = _expect(
        *call("POST", TELEMETRY, key, {"records": records}), "cache demo records", 200, 201
    )
    bad = [item for item in body["items"] if item["status"] not in ("created", "duplicate")]
    if bad:
        raise DemoError(f"cache demo records refused: {bad[:3]}")


def send_cache_demo(call: Call, keys: Mapping[Any, str], now: datetime) -> list[str]:
    """Send the three demo sessions; returns their ids (empty when they exist already)."""
    if AgentSession.objects.filter(external_id="cache-causes").exists():
        return []
    start = now - timedelta(minutes=95)
    records, event = causes_session(start)
    _post_records(call, keys["default"], records)
    session = AgentSession.objects.get(profile__name="default", external_id=event.session_id)
    record_context_event(
        session,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key=event.source_key,
        at=event.at,
        trigger="auto",
        tokens_before=event.tokens_before,
        tokens_after=event.tokens_after,
        summary=event.summary,
    )
    _post_records(call, keys["desktop"], volatile_system_session(start + timedelta(minutes=40)))

    key = keys["default"]
    appended = _expect(
        *call("POST", f"{SESSIONS}/cache-compacted/messages", key, compacted_transcript()),
        "cache demo transcript",
        200,
        201,
    )
    before = int(appended["surface_tokens_estimate"]) + 2_500  # tools and system overhead
    first, _ = compacted_records(
        start,
        before_version=appended["surface_version"],
        after_version=0,
        before_tokens=before,
        after=0,
    )
    _post_records(call, key, [first])
    run = _expect(
        *call("POST", f"{SESSIONS}/cache-compacted/compact", key, None), "cache demo compact", 200
    )
    _, later = compacted_records(
        start,
        before_version=appended["surface_version"],
        after_version=run["surface_version"],
        before_tokens=before,
        after=int(run["tokens_after"]),
    )
    _post_records(call, key, later)
    return ["cache-causes", "cache-volatile-system", "cache-compacted"]
