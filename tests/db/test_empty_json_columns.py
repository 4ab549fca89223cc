"""A usual call stores SQL NULL for its empty JSON columns on every path (no flags: NULL, not
`[]`; no prefix, no provider diagnostics: NULL, not JSON null), and every reader through the
ORM sees what it saw before: `[]` flags, None for the others. Migration 0032 rewrites stored
rows to the same form and back."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection

from telemetry.models import LLMCall
from tests.db.stored import session_record

pytestmark = pytest.mark.django_db

_SPLIT = {  # a cache write total above its TTL split: flagged
    "input_tokens": 10,
    "cache_creation_input_tokens": 50,
    "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 5,
}


def _columns() -> dict[tuple[int, int], tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT turn, call, flags IS NULL, prefix IS NULL, provider_diagnostics IS NULL "
            "FROM telemetry_llmcall"
        )
        return {(t, c): tuple(rest) for t, c, *rest in cursor.fetchall()}


def test_every_writer_stores_null_for_empty_json_and_the_orm_reads_what_it_read(agent):
    prefix = [{"kind": "system", "hash": "s-1", "tokens": 900}]
    diagnostics = {"cache_miss_reason": {"type": "model_changed", "cache_missed_input_tokens": 7}}
    single = session_record("s", 0)  # one record: the single-record path
    batch = [session_record("s", 1), session_record("s", 1, 1, usage=_SPLIT)]  # COPY
    odd = [
        session_record("s", 2, prefix=prefix),
        session_record("s", 2, 1, diagnostics=diagnostics),
    ]
    assert agent.post("/api/v1/telemetry", single).status_code == 201
    assert agent.post("/api/v1/telemetry", {"records": batch}).status_code == 200
    assert agent.post("/api/v1/telemetry", {"records": odd}).status_code == 200

    assert _columns() == {
        (0, 0): (True, True, True),
        (1, 0): (True, True, True),
        (1, 1): (False, True, True),
        (2, 0): (True, False, True),
        (2, 1): (True, True, False),
    }
    calls = {(c.turn, c.call): c for c in LLMCall.objects.all()}
    assert calls[(0, 0)].flags == [] and calls[(1, 0)].flags == []
    assert calls[(1, 1)].flags == ["anthropic_cache_split_mismatch"]
    assert calls[(0, 0)].prefix is None and calls[(0, 0)].provider_diagnostics is None
    assert calls[(2, 0)].prefix is not None and calls[(2, 1)].provider_diagnostics is not None
    listed = dict(LLMCall.objects.values_list("turn", "flags").filter(call=0))
    assert listed == {0: [], 1: [], 2: []}


def test_0032_rewrites_empty_json_to_null_and_back(agent):
    batch = [session_record("s", 1), session_record("s", 1, 1, usage=_SPLIT)]
    assert agent.post("/api/v1/telemetry", {"records": batch}).status_code == 200
    module = importlib.import_module("telemetry.migrations.0032_call_empty_json_as_null")
    editor = SimpleNamespace(connection=connection)
    with connection.cursor() as cursor:  # the form COPY stored before: `[]` and JSON null
        cursor.execute(
            "UPDATE telemetry_llmcall SET flags = '[]', prefix = 'null', "
            "provider_diagnostics = 'null' WHERE call = 0"
        )
    assert _columns()[(1, 0)] == (False, False, False)
    module.forward(None, editor)
    assert _columns() == {(1, 0): (True, True, True), (1, 1): (False, True, True)}
    module.backward(None, editor)
    assert _columns() == {(1, 0): (False, True, True), (1, 1): (False, True, True)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT flags FROM telemetry_llmcall WHERE call = 0")
        (stored,) = cursor.fetchone()
    assert stored in ([], "[]")  # jsonb decoded on PostgreSQL, text on SQLite
    flags = dict(LLMCall.objects.values_list("call", "flags"))
    assert flags == {0: [], 1: ["anthropic_cache_split_mismatch"]}
