"""The usual usage is stored as nothing and read back as sent; the migration rewrites old rows."""

from __future__ import annotations

import importlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.urls import reverse

from compaction.session_export import session_lines
from telemetry.models import LLMCall

USUAL = {
    "input_tokens": 12,
    "cache_read_input_tokens": 9000,
    "cache_creation_input_tokens": 300,
    "output_tokens": 400,
}
RICHER = {**USUAL, "service_tier": "standard"}

migration = importlib.import_module("telemetry.migrations.0026_call_raw_usage_derived")


def _post(agent: Any, usages: list[dict[str, Any]], *, batch: bool) -> None:
    records = [
        {
            "session_id": "usage-forms",
            "turn": turn,
            "model": "claude-sonnet-4-5-20250929",
            "request_id": f"req-{turn}",
            "usage": usage,
        }
        for turn, usage in enumerate(usages)
    ]
    if batch:
        response = agent.post("/api/v1/telemetry", {"records": records})
        assert response.status_code in (200, 201, 207), response.content
    else:
        for record in records:
            response = agent.post("/api/v1/telemetry", record)
            assert response.status_code in (200, 201), response.content


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [True, False])
def test_each_door_keeps_only_what_the_buckets_do_not_say(make_agent, batch):
    agent = make_agent()
    _post(agent, [USUAL, RICHER], batch=batch)
    usual, richer = LLMCall.objects.filter(session__external_id="usage-forms").order_by("turn")
    assert (usual.raw_usage, richer.raw_usage) == (None, RICHER)
    for call, sent in ((usual, USUAL), (richer, RICHER)):
        body = agent.get(f"/api/v1/sessions/usage-forms/calls/{call.pk}").json()
        assert body["raw_usage"] == sent
        # on PostgreSQL in jsonb's key order, stored or derived alike
        if connection.vendor == "postgresql":
            assert list(body["raw_usage"]) == sorted(sent, key=lambda k: (len(k), k))


@pytest.mark.django_db
def test_the_call_page_and_the_export_show_the_usage_as_sent(make_agent, client_as):
    agent = make_agent()
    _post(agent, [USUAL], batch=True)
    call = LLMCall.objects.get(session__external_id="usage-forms")
    assert call.raw_usage is None
    page = client_as("viewer").get(reverse("call", args=[call.session_id, call.pk]))
    assert page.status_code == 200
    assert page.context["raw_usage"] == json.dumps(USUAL, indent=2, sort_keys=True)
    lines = [json.loads(line) for line in "".join(session_lines([call.session_id])).splitlines()]
    (exported,) = [line["row"] for line in lines if line["kind"] == "call"]
    assert exported["raw_usage"] == USUAL


@pytest.mark.django_db
def test_the_migration_rewrites_old_rows_and_back(make_agent):
    agent = make_agent()
    _post(agent, [USUAL, RICHER], batch=True)
    calls = LLMCall.objects.filter(session__external_id="usage-forms")
    calls.filter(turn=0).update(raw_usage=USUAL)  # a row stored before the migration
    editor = SimpleNamespace(connection=connection)  # all the migration's functions read
    migration.forward(apps, editor)
    assert list(calls.order_by("turn").values_list("raw_usage", flat=True)) == [None, RICHER]
    migration.backward(apps, editor)
    assert list(calls.order_by("turn").values_list("raw_usage", flat=True)) == [USUAL, RICHER]
