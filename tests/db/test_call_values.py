"""`costing.call_values`, a new call's COPY row, holds in each column, by name, what the
record says it holds (the oracle below names every column), JSON columns as their JSON text,
each cost to the digit and exponent; priced and unpriced, with and without flags, prefix,
`at`, iterations. `call_row`'s unsaved instance (the ORM path) holds the same, JSON columns as
values. A plain record's raw usage is msgspec's text, not `json_text`'s: the same JSON value,
and on PostgreSQL the same stored jsonb as the ORM stores (odd text, big integers, nesting)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from hypothesis import assume, given
from hypothesis import strategies as st

from telemetry.costing import CALL_COLUMNS, CallRow, call_row, call_values, stored_prefix
from telemetry.ingest.new_rows import copy_rows
from telemetry.ingest.statements import set_wise
from telemetry.ingest.values import json_text
from telemetry.models import AgentSession, LLMCall, stored_flags
from telemetry.policy_rules import PolicyValues
from telemetry.pricing import BILLED_FIGURES, SEED_CATALOGUE, IntegerPricer, find_price
from telemetry.safejson import is_plain
from telemetry.usage import BUCKETS
from telemetry.usage_forms import stored_usage
from telemetry.validation import validate_items

_JSON = {"raw_usage", "flags", "prefix", "provider_diagnostics"}
_NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
_MODELS = ["claude-sonnet-4-5-20250929", "claude-haiku-5-5", "gpt-5.1", "o3", "unknown-model"]


_FROM_RECORD = (
    "turn",
    "call",
    "request_id",
    "model",
    "request_chars",
    "appended_chars",
    "window_tokens",
    "surface_version",
)
_FROM_USAGE = (*BUCKETS, "provider", "reasoning_output", "reported_cache", "context_tokens")


def _by_name(session_pk: int, valid: Any, pricer: IntegerPricer | None) -> dict[str, Any]:
    """Each column of a new call's row by name, JSON columns as values."""
    record, usage = valid.record, valid.usage
    figures = (None,) * 7 + (False,) if pricer is None else pricer.values(valid.provided.billed)
    return {
        "session_id": session_pk,
        **{name: getattr(record, name) for name in _FROM_RECORD},
        **{name: getattr(usage, name) for name in _FROM_USAGE},
        # nothing where the buckets say all of it (telemetry.usage_forms)
        "raw_usage": stored_usage(
            usage.provider, record.usage, *(getattr(usage, name) for name in BUCKETS)
        ),
        "flags": list(usage.flags),
        "prefix": stored_prefix(record),
        "provider_miss_type": None if valid.diagnosis is None else valid.diagnosis.type,
        "provider_missed_tokens": None
        if valid.diagnosis is None
        else valid.diagnosis.missed_tokens,
        "provider_diagnostics": None if valid.diagnosis is None else valid.diagnosis.stored(),
        "at": record.at or _NOW,
        **dict(zip(BILLED_FIGURES, figures, strict=True)),
        "payload_hash": valid.payload_hash,
        "received_at": _NOW,
    }


def _expected(session_pk: int, valid: Any, pricer: IntegerPricer | None) -> tuple[Any, ...]:
    by_name = _by_name(session_pk, valid, pricer)
    assert set(by_name) == set(CALL_COLUMNS)
    values = []
    for name in CALL_COLUMNS:
        value = by_name[name]
        if name == "raw_usage" and value is None:
            pass
        elif name == "raw_usage" and valid.plain:
            value = ("JSON", value)  # its text is msgspec's; compared as the value it encodes
        elif name in _JSON:
            # SQL NULL where the ORM stores NULL: None, and no flags (`models.FlagList`)
            stored = stored_flags(value) if name == "flags" else value
            value = None if stored is None else json_text(stored)
        values.append(value)
    return tuple(values)


def _parsed_usage(row: tuple[Any, ...], plain: bool) -> tuple[Any, ...]:
    index = CALL_COLUMNS.index("raw_usage")
    if not plain or row[index] is None:
        return row
    return (*row[:index], ("JSON", json.loads(row[index])), *row[index + 1 :])


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
        "diagnostics": st.fixed_dictionaries(
            {
                "cache_miss_reason": st.none()
                | st.fixed_dictionaries(
                    {"type": st.sampled_from(["messages_changed", "unavailable", "new_kind"])},
                    optional={"cache_missed_input_tokens": counts},
                )
            }
        ),
        "prompt_cache_diagnostics": st.fixed_dictionaries(
            {"type": st.sampled_from(["cache_miss", "cache_hit"])},
            optional={"reason": st.just("input_changed"), "cache_missed_tokens": counts},
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
    assert valid[0].plain == is_plain(record)
    assert _exact(_parsed_usage(row, valid[0].plain)) == _exact(_expected(7, valid[0], pricer))
    instance = call_row(session, valid[0], pricer, _NOW)
    expected = _by_name(7, valid[0], pricer)
    assert _exact(tuple(getattr(instance, name) for name in CALL_COLUMNS)) == _exact(
        tuple(expected[name] for name in CALL_COLUMNS)
    )


def test_the_rows_cost_columns_are_the_pricers_figures_in_its_order():
    # `call_values` places `IntegerPricer.values` in the row as one run of columns
    start = CALL_COLUMNS.index(BILLED_FIGURES[0])
    assert CALL_COLUMNS[start : start + len(BILLED_FIGURES)] == BILLED_FIGURES


def test_a_record_with_a_float_keeps_json_texts_raw_usage():
    record = {
        "session_id": "s",
        "turn": 1,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cost_usd": 1e16, "ratio": 0.1},
    }
    _, valid = validate_items([record], policy=PolicyValues(), batch=False)
    assert not valid[0].plain
    row = call_values(7, valid[0], None, _NOW)
    assert row.raw_usage == json_text(record["usage"])  # '1e+16', as json.dumps spells it


_ODD_USAGE = {
    "input_tokens": 12,
    "output_tokens": 3,
    "cache_read_input_tokens": 2**31 - 1 - 12,  # the request at the largest a row stores
    "note": 'tab\there, a newline\nand \\ back "quoted" é \U0001f600 \u2028 \x7f \x1f',
    "é": ["😀", None, True, False, 0, -1, 10**30, {"nested": {"deeper": [[], {}]}}],
    "": "",
}


@pytest.mark.django_db
@pytest.mark.skipif(not set_wise(), reason="COPY rows are PostgreSQL's path")
def test_a_plain_raw_usage_is_stored_as_the_orm_stores_it(make_agent):
    agent = make_agent()
    session = AgentSession.objects.create(profile=agent.key.profile, external_id="plain-usage")
    record = {"session_id": "plain-usage", "turn": 1, "model": "m", "usage": _ODD_USAGE}
    _, valid = validate_items([record], policy=PolicyValues(), batch=False)
    assert valid[0].plain
    copy_rows(LLMCall, [call_values(session.pk, valid[0], None, _NOW)])
    orm = call_row(session, valid[0], None, _NOW)
    orm.turn = 2
    LLMCall.objects.bulk_create([orm])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT raw_usage::text FROM telemetry_llmcall WHERE session_id = %s ORDER BY turn",
            [session.pk],
        )
        copied, created = (text for (text,) in cursor.fetchall())
    assert copied == created
    assert json.loads(copied) == _ODD_USAGE


def test_the_benchs_raw_baseline_writes_ingests_call_columns_in_their_order():
    """`make bench`'s B_copy writes the calls table by hand (bench/data.py): the columns it writes
    are ingest's (`CALL_COLUMNS`, less the nullable ones it leaves out), in the same order, so a
    new column cannot make the baseline and the product write different tables."""
    from bench.data import CALL_COLUMNS as BENCH_COLUMNS

    assert [name for name in CALL_COLUMNS if name in BENCH_COLUMNS] == list(BENCH_COLUMNS)
