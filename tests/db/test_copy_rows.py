"""COPY (`telemetry.bulk_sql.insert_rows`, PostgreSQL) stores a new call exactly as the ORM's
bulk_create does: every column, the JSON ones included (non-ASCII text, empty and null values)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from telemetry.bulk_sql import insert_rows
from telemetry.models import AgentSession, LLMCall

pytestmark = pytest.mark.django_db


def _call(session: AgentSession, turn: int, **json_values: Any) -> LLMCall:
    return LLMCall(
        session=session,
        turn=turn,
        call=1,
        request_id=None,
        model="claude-sonnet-4-5",
        provider="anthropic",
        uncached_input=12,
        cache_read=4_500,
        cache_write_5m=300,
        cache_write_1h=0,
        output=80,
        reasoning_output=None,
        reported_cache=True,
        context_tokens=4_812,
        request_chars=None,
        appended_chars=1_200,
        window_tokens=200_000,
        surface_version=3,
        at=datetime(2025, 6, 1, 12, 0, 7, 123456, tzinfo=UTC),
        cost_uncached_input=Decimal("0.000036"),
        cost_cache_read=Decimal("0.001350"),
        cost_cache_write_5m=Decimal("0.001125"),
        cost_cache_write_1h=Decimal("0"),
        cost_output=Decimal("0.001200"),
        cost_usd=Decimal("0.003711"),
        no_cache_cost_usd=Decimal("0.015636"),
        long_context=False,
        payload_hash="ab" * 32,
        **json_values,
    )


@pytest.mark.parametrize(
    "json_values",
    [
        {
            "raw_usage": {"input_tokens": 12, "note": 'é \U0001f600 "q"'},
            "flags": [],
            "prefix": None,
        },
        {"raw_usage": {}, "flags": ["inferred_ttl", "x"], "prefix": [{"hash": "h", "chars": 3}]},
    ],
)
def test_a_copied_row_is_the_row_bulk_create_stores(make_agent, json_values):
    agent = make_agent()
    session = AgentSession.objects.create(profile=agent.key.profile, external_id="copy-check")
    insert_rows(LLMCall, [_call(session, 1, **json_values)])
    LLMCall.objects.bulk_create([_call(session, 2, **json_values)])
    copied, created = (
        {k: v for k, v in row.items() if k not in ("id", "turn", "received_at")}
        for row in LLMCall.objects.filter(session=session).order_by("turn").values()
    )
    assert copied == created
    assert copied["raw_usage"] == json_values["raw_usage"]
