"""A Claude Code session for the demo, sent as Claude Code sends it: OTLP/JSON log events
(`claude_code.api_request`) to the desktop profile, whose tier is 1h (issue 38, case 4).

Claude Code reports `cache_creation_tokens` without a tier and its own `cost_usd`, priced with
5-minute writes. The console bills those writes at Claude Code's tier, so on the session page
its figure and ours agree. Standard library only; `manage.py simulate` sends it once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

SESSION: Final = "claude-code-desktop"
OTLP_LOGS: Final = "api/v1/otlp/v1/logs"
MODEL: Final = "claude-sonnet-4-5-20250929"
# (input, cache read, cache creation, output, Claude Code's cost_usd) of each request, as
# Claude Code reported them: its figures, priced with 5-minute cache writes.
REQUESTS: Final = (
    (12, 0, 26_120, 800, "0.109986"),
    (0, 26_120, 2_988, 540, "0.027141"),
    (8, 29_108, 1_500, 620, "0.0236814"),
)

Call = Callable[[str, str, str, object | None], tuple[int, Any]]


def _attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def claude_code_export(start: datetime) -> dict[str, Any]:
    """One OTLP/JSON logs export: an `api_request` event per request, a minute apart."""
    records = []
    for index, (uncached, read, write, output, cost) in enumerate(REQUESTS):
        at = start + timedelta(minutes=index)
        attributes = {
            "event.name": "api_request",
            "event.timestamp": at.isoformat().replace("+00:00", "Z"),
            "session.id": SESSION,
            "prompt.id": f"demo-prompt-{index // 2}",
            "model": MODEL,
            "input_tokens": str(uncached),
            "cache_read_tokens": str(read),
            "cache_creation_tokens": str(write),
            "output_tokens": str(output),
            "cost_usd": cost,
            "request_id": f"req_demo_claude_code_{index}",
        }
        records.append(
            {
                "body": {"stringValue": "claude_code.api_request"},
                "attributes": [_attribute(k, v) for k, v in attributes.items()],
            }
        )
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": [_attribute("service.name", "claude-code")]},
                "scopeLogs": [{"logRecords": records}],
            }
        ]
    }


def send_claude_code_demo(call: Call, key: str, now: datetime) -> list[str]:
    """Send the session through the OTLP door (a replay is a duplicate); returns its id."""
    status, body = call("POST", OTLP_LOGS, key, claude_code_export(now - timedelta(minutes=30)))
    rejected = (body or {}).get("partialSuccess", {}).get("rejectedLogRecords")
    if status != 200 or rejected:
        raise RuntimeError(f"Claude Code demo: expected 200 with nothing rejected, got {body}")
    return [SESSION]
