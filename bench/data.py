"""Deterministic bench data: call records, the calls-table rows the baselines write, transcripts.

Everything the measurements send is built here before the clock starts. Contexts stay far below
the prune threshold (≈0.2 of a 200k window) so ingest never enqueues relief by accident; P6 and
P7 put their own sessions over the threshold on purpose.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from telemetry.digests import stored_digest

MODEL = "claude-sonnet-4-5-20250929"
BASE_AT = datetime(2025, 6, 1, tzinfo=UTC)


def context_of(turn: int) -> int:
    """A sawtooth between 8k and 38k tokens: a session that grows and gets compacted."""
    return 8_000 + (turn % 200) * 150


def record(
    session_id: str, turn: int, call: int = 0, *, at: datetime | None = None
) -> dict[str, Any]:
    """One call record as an agent would POST it (Anthropic usage, explicit request id)."""
    context = context_of(turn) + call * 400
    written = 300 if turn % 50 else 4_000  # a cache-write spike every 50 turns
    cached = (context - written) * 9 // 10
    stamp = at or BASE_AT + timedelta(seconds=turn * 7 + call)
    return {
        "session_id": session_id,
        "turn": turn,
        "call": call,
        "request_id": f"req-{session_id}-{turn}-{call}",
        "model": MODEL,
        "usage": {
            "input_tokens": context - cached - written,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": written,
            "output_tokens": 350 + turn % 97,
        },
        "appended_chars": 1_200,
        "at": stamp.isoformat(),
    }


def batch_records(prefix: str, post: int, size: int, per_session: int = 50) -> list[dict[str, Any]]:
    """P1's `post`-th batch of one client: `size` records, two calls a turn, `per_session` turns
    of each of `size // (2 * per_session)` sessions named `{prefix}-s{j}` (a few agents' turns)."""
    sessions = max(1, size // (per_session * 2))
    return [
        record(f"{prefix}-s{j}", post * per_session + t, call)
        for j in range(sessions)
        for t in range(per_session)
        for call in range(2)
    ][:size]


def batch_body(records: list[dict[str, Any]]) -> bytes:
    return json.dumps({"records": records}, separators=(",", ":")).encode()


def single_body(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode()


# --- rows of the calls table, for the raw baselines ------------------------------------------

CALL_COLUMNS = (
    "session_id",
    "turn",
    "call",
    "request_id",
    "model",
    "provider",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning_output",
    "reported_cache",
    "context_tokens",
    "raw_usage",
    "flags",
    "request_chars",
    "appended_chars",
    "window_tokens",
    "surface_version",
    "at",
    "cost_uncached_input",
    "cost_cache_read",
    "cost_cache_write_5m",
    "cost_cache_write_1h",
    "cost_output",
    "cost_usd",
    "no_cache_cost_usd",
    "long_context",
    "payload_hash",
    "received_at",
)


def call_row(session_id: int, turn: int, call: int, now: datetime) -> tuple[Any, ...]:
    """The values ingest stores for `record(...)`, in CALL_COLUMNS order (prices made up)."""
    rec = record(f"s{session_id}", turn, call)
    usage = rec["usage"]
    uncached = usage["input_tokens"]
    read = usage["cache_read_input_tokens"]
    written = usage["cache_creation_input_tokens"]
    output = usage["output_tokens"]
    costs = [Decimal(n) * Decimal("0.000003") for n in (uncached, read, written, 0, output)]
    return (
        session_id,
        turn,
        call,
        rec["request_id"],
        MODEL,
        "anthropic",
        uncached,
        read,
        written,
        0,
        output,
        None,
        True,
        uncached + read + written,
        Jsonb(usage),
        None,  # no flags (`telemetry.models.FlagList`)
        None,
        1_200,
        None,
        None,
        datetime.fromisoformat(rec["at"]),
        *costs,
        sum(costs, Decimal(0)),
        Decimal(uncached + read + written) * Decimal("0.000003") + costs[4],
        False,
        stored_digest(hashlib.sha256(json.dumps(rec, sort_keys=True).encode())),
        now,
    )
