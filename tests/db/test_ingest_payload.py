"""The telemetry answer is rendered without ninja's response validation: its bytes must be what
the declared schema (`IngestOut`) renders from the same answer, whatever the outcomes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ninja.responses import NinjaJSONEncoder

from telemetry.policy_store import update_policy
from telemetry.schemas import IngestOut

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"


def record(turn: int, call: int = 0, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": "s-1",
        "turn": turn,
        "call": call,
        "model": SONNET,
        "usage": {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        },
        "appended_chars": 4000,
    }
    base.update(overrides)
    return base


def validated_rendering(body: bytes) -> bytes:
    data = IngestOut.model_validate(json.loads(body)).model_dump()
    return json.dumps(data, cls=NinjaJSONEncoder).encode()


def test_every_single_record_answer_is_the_schemas_own_rendering(agent):
    answers = [
        agent.post("/api/v1/telemetry", record(0)),  # created
        agent.post("/api/v1/telemetry", record(0)),  # duplicate
        agent.post("/api/v1/telemetry", record(0, model="gpt-4o")),  # conflict
        agent.post("/api/v1/telemetry", record(1, usage={"input_tokens": -1})),  # invalid
        agent.post("/api/v1/telemetry", record(2, model="unknown-model", window_tokens=100_000)),
    ]
    assert [a.status_code for a in answers] == [201, 200, 409, 422, 201]
    for answer in answers:
        assert answer["Content-Type"] == "application/json; charset=utf-8"
        assert answer.content == validated_rendering(answer.content)


def test_a_batch_answer_with_nudges_and_stops_is_the_schemas_own_rendering(agent):
    update_policy(profile=agent.key.profile, values={"round_soft_limit": 2, "round_hard_cap": 3})
    records: list[Any] = [record(5, call) for call in range(4)]
    records += [record(6, 0, session_id="s-2", at="2025-06-01T10:00:00+02:00"), "not a record"]
    records += [record(5, 1)]  # a duplicate within the batch
    answer = agent.post("/api/v1/telemetry", {"records": records})
    assert answer.status_code == 200
    body = answer.json()
    assert {item["status"] for item in body["items"]} == {"created", "invalid", "duplicate"}
    assert any(item["stop"] for item in body["items"])
    assert answer.content == validated_rendering(answer.content)


def test_a_session_read_is_the_schemas_own_rendering(agent):
    """`GET /sessions/{id}` renders its series without ninja's validation too: turns priced and
    not, with and without cache figures (a None and a 0.0 hit ratio), a surface version or none,
    an `at` in another offset."""
    from telemetry.schemas import SessionDetailOut

    agent.post("/api/v1/telemetry", record(0))
    agent.post("/api/v1/telemetry", record(0, 1, at="2025-06-01T10:00:00+02:00", surface_version=2))
    agent.post("/api/v1/telemetry", record(1, model="acme-unpriced-1", provider="anthropic"))
    agent.post("/api/v1/telemetry", record(2, usage={"input_tokens": 5, "output_tokens": 1}))
    no_input = {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 3}
    agent.post("/api/v1/telemetry", record(3, usage=no_input))
    answer = agent.get("/api/v1/sessions/s-1")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/json; charset=utf-8"
    series = answer.json()["turns_series"]
    assert [t["turn"] for t in series] == [0, 1, 2, 3]
    assert [t["calls"] for t in series] == [2, 1, 1, 1]
    assert series[1]["cost_usd"] is None and series[0]["cost_usd"] is not None
    assert series[2]["cache_hit_ratio"] is None and series[3]["cache_hit_ratio"] == 0.0
    assert series[0]["surface_version"] == 2 and series[2]["surface_version"] is None
    # ISO 8601 in UTC, as stored: turn 0's calls span the server's now and 08:00 UTC
    assert series[0]["first_at"] == "2025-06-01T08:00:00+00:00"
    assert all(t["last_at"].endswith("+00:00") and "T" in t["last_at"] for t in series)
    data = SessionDetailOut.model_validate(answer.json()).model_dump()
    assert answer.content == json.dumps(data, cls=NinjaJSONEncoder).encode()


def test_a_session_read_costs_the_same_queries_at_3_and_at_300_turns(agent, held_remembered_reads):
    """The whole series comes in one read whatever its length (no query per turn)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent.post("/api/v1/telemetry", {"records": [record(t, session_id="few") for t in range(3)]})
    agent.post("/api/v1/telemetry", {"records": [record(t, session_id="many") for t in range(300)]})
    counts = []
    for name, turns in (("few", 3), ("many", 300)):
        agent.get(f"/api/v1/sessions/{name}")  # the key check and policy, remembered after
        with CaptureQueriesContext(connection) as queries:
            answer = agent.get(f"/api/v1/sessions/{name}")
        assert len(answer.json()["turns_series"]) == turns
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1], counts
