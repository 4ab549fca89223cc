"""`costing.call_values`, a new call's COPY row, is the row of `call_row`'s unsaved instance
(the ORM path, its oracle): every column, JSON columns as their JSON text, each cost to the
digit and exponent; priced and unpriced, with and without flags, prefix, `at`, iterations."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from telemetry.bulk_sql import json_text
from telemetry.costing import CALL_COLUMNS, CallRow, call_row, call_values
from telemetry.models import AgentSession
from telemetry.policy_rules import PolicyValues
from telemetry.pricing import SEED_CATALOGUE, IntegerPricer, find_price
from telemetry.validation import validate_items

_JSON = {"raw_usage", "flags", "prefix"}
_NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
_MODELS = ["claude-sonnet-4-5-20250929", "claude-haiku-5-5", "gpt-5.1", "o3", "unknown-model"]


def _expected(session: AgentSession, valid: Any, pricer: IntegerPricer | None) -> tuple[Any, ...]:
    call = call_row(session, valid, pricer, _NOW)
    values = []
    for name in CALL_COLUMNS:
        value = getattr(call, name)
        if name in _JSON:
            value = json_text(value)
        elif name == "received_at":
            value = _NOW
        values.append(value)
    return tuple(values)


def _exact(row: tuple[Any, ...]) -> list[Any]:
    """Decimals as sign, digits and exponent: `==` would take 0E-8 for 0."""
    return [(type(v), v.as_tuple()) if isinstance(v, Decimal) else (type(v), v) for v in row]


counts = st.integers(0, 3_000_000)
anthropic_usage = st.fixed_dictionaries(
    {"input_tokens": counts, "output_tokens": counts},
    optional={
        "cache_read_input_tokens": counts,
        "cache_creation_input_tokens": counts,
        "cache_creation": st.fixed_dictionaries(
            {}, optional={"ephemeral_5m_input_tokens": counts, "ephemeral_1h_input_tokens": counts}
        ),
        "iterations": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["message", "compaction"]),
                    "input_tokens": counts,
                    "output_tokens": counts,
                },
                optional={"cache_read_input_tokens": counts},
            ),
            max_size=3,
        ),
    },
)
openai_usage = st.fixed_dictionaries(
    {"prompt_tokens": counts, "completion_tokens": counts},
    optional={
        "completion_tokens_details": st.fixed_dictionaries(
            {}, optional={"reasoning_tokens": st.integers(0, 10)}
        )
    },
)
segments = st.lists(
    st.fixed_dictionaries(
        {
            "kind": st.just("message"),
            "hash": st.text("abc", min_size=1, max_size=4),
            "tokens": counts,
        },
        optional={"text": st.text(max_size=8).filter(lambda t: "\x00" not in t)},
    ),
    max_size=3,
)
records = st.fixed_dictionaries(
    {
        "session_id": st.just("s"),
        "turn": st.integers(0, 50),
        "model": st.sampled_from(_MODELS),
        "usage": st.one_of(anthropic_usage, openai_usage),
    },
    optional={
        "call": st.integers(0, 5),
        "request_id": st.text("xyz", min_size=1, max_size=5),
        "request_chars": counts,
        "appended_chars": counts,
        "window_tokens": st.integers(20_000, 2_000_000),
        "surface_version": st.integers(0, 9),
        "at": st.sampled_from(["2025-06-01T00:17:30+00:00", "2025-06-01T02:17:30.5+02:00"]),
        "prefix": segments,
        "context_management": st.just(
            {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_input_tokens": 9}]}
        ),
    },
)


@pytest.mark.parametrize("priced", [True, False])
@given(record=records)
def test_call_values_is_the_row_of_call_rows_instance(priced: bool, record: dict[str, Any]):
    # the model does not always tell the usage's format (an unknown model); the keys say it
    record = {**record, "provider": "openai_chat" if "prompt_tokens" in record["usage"] else None}
    outcomes, valid = validate_items([record], policy=PolicyValues(), batch=False)
    assume(outcomes == [None])  # reasoning above its output, say
    price = find_price(record["model"], SEED_CATALOGUE)
    pricer = IntegerPricer(price) if priced and price is not None else None
    session = AgentSession(pk=7)
    row = call_values(7, valid[0], pricer, _NOW)
    assert type(row) is CallRow
    assert row._fields == CALL_COLUMNS
    assert _exact(row) == _exact(_expected(session, valid[0], pricer))
