"""The telemetry ingest API on the real database: idempotency, conflicts, bad input, figures."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from telemetry.keys import forget_key_checks
from telemetry.models import AgentProfile, AgentSession, LLMCall, Turn
from telemetry.policy_store import update_policy

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"


def anthropic_usage(uncached=1200, write=3000, read=45000, output=800) -> dict[str, Any]:
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    }


def record(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": "s-1",
        "turn": 0,
        "model": SONNET,
        "usage": anthropic_usage(),
        "appended_chars": 4000,
    }
    base.update(overrides)
    return base


def snapshot() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    return (
        list(LLMCall.objects.order_by("pk").values_list()),
        list(Turn.objects.order_by("pk").values_list()),
        list(AgentSession.objects.order_by("pk").values_list()),
    )


# --- figures ----------------------------------------------------------------------------------


def test_anthropic_record_gives_the_hand_computed_figures(agent):
    response = agent.post("/api/v1/telemetry", record())
    assert response.status_code == 201, response.content
    session = response.json()["sessions"][0]
    assert session["current_context_tokens"] == 49_200
    assert session["cache_hit_ratio"] == pytest.approx(45_000 / 49_200)
    # projected = context + reply (800) + 4000 chars // 4
    assert session["projected_next_request_tokens"] == 51_000
    assert session["window_tokens"] == 200_000
    assert session["pressure"] == pytest.approx(51_000 / (200_000 - 16_000))
    # Sonnet 4.5: 1200×$3 + 45000×$0.30 + 3000×$3.75 + 800×$15 per MTok
    # exact, with the nine decimals costs are stored with
    assert session["cost_usd"] == "0.040350000"
    assert session["no_cache_cost_usd"] == "0.159600000"
    assert session["cache_savings_usd"] == "0.119250000"


def test_turn_context_is_the_peak_call_and_session_current_is_the_latest_call(agent):
    agent.post(
        "/api/v1/telemetry",
        {
            "records": [
                record(turn=0, call=0, usage=anthropic_usage(read=10_000)),
                record(turn=0, call=1, usage=anthropic_usage(read=60_000)),
                record(turn=0, call=2, usage=anthropic_usage(read=20_000)),
            ]
        },
    )
    body = agent.get("/api/v1/sessions/s-1").json()
    assert body["turns_series"][0]["context_tokens"] == 60_000 + 4_200
    assert body["turns_series"][0]["calls"] == 3
    assert body["current_context_tokens"] == 20_000 + 4_200
    assert body["peak_context_tokens"] == 64_200
    assert body["last_turn_rounds"] == 3


def test_cache_hit_ratio_is_sum_over_sum_not_an_average_of_ratios(agent):
    agent.post(
        "/api/v1/telemetry",
        {
            "records": [
                record(turn=0, usage=anthropic_usage(uncached=100, write=0, read=900)),
                record(turn=1, usage=anthropic_usage(uncached=9000, write=0, read=1000)),
            ]
        },
    )
    body = agent.get("/api/v1/sessions/s-1").json()
    assert body["cache_hit_ratio"] == pytest.approx(1900 / 11_000)
    assert body["cache_hit_ratio"] != pytest.approx((0.9 + 0.1) / 2)


def test_cache_hit_is_null_when_no_call_reported_cache_fields_and_zero_when_they_were_zero(
    make_agent,
):
    agent = make_agent("default")
    chat = {"prompt_tokens": 1000, "completion_tokens": 10}
    agent.post("/api/v1/telemetry", record(session_id="plain", model="gpt-4o", usage=chat))
    assert agent.get("/api/v1/sessions/plain").json()["cache_hit_ratio"] is None
    with_zero = {**chat, "prompt_tokens_details": {"cached_tokens": 0}}
    agent.post("/api/v1/telemetry", record(session_id="zero", model="gpt-4o", usage=with_zero))
    assert agent.get("/api/v1/sessions/zero").json()["cache_hit_ratio"] == 0.0


def test_openai_chat_counts_are_made_disjoint(agent):
    usage = {
        "prompt_tokens": 10_000,
        "completion_tokens": 2_000,
        "prompt_tokens_details": {"cached_tokens": 8_000},
        "completion_tokens_details": {"reasoning_tokens": 1_500},
    }
    agent.post("/api/v1/telemetry", record(model="gpt-5", usage=usage, appended_chars=0))
    call = LLMCall.objects.get()
    assert (call.uncached_input, call.cache_read, call.output, call.reasoning_output) == (
        2_000,
        8_000,
        2_000,
        1_500,
    )
    body = agent.get("/api/v1/sessions/s-1").json()
    # projection re-sends the reply but not the reasoning: 10,000 + (2,000 − 1,500)
    assert body["projected_next_request_tokens"] == 10_500


def test_unknown_model_has_null_cost_and_unknown_window_has_null_pressure(agent):
    agent.post("/api/v1/telemetry", record(model="acme-llm-9", provider="anthropic"))
    body = agent.get("/api/v1/sessions/s-1").json()
    assert body["cost_usd"] is None
    assert body["unpriced_calls"] == 1
    assert body["window_tokens"] is None
    assert body["pressure"] is None
    assert body["pressure_band"] == "unknown"


def test_record_window_overrides_catalogue_and_profile_override_applies(agent):
    agent.post("/api/v1/telemetry", record(window_tokens=1_000_000))
    assert agent.get("/api/v1/sessions/s-1").json()["window_tokens"] == 1_000_000
    AgentProfile.objects.filter(name="default").update(
        window_overrides={"claude-sonnet-4-5": 500_000}
    )
    forget_key_checks()  # the key's profile is remembered per process for a second
    agent.post("/api/v1/telemetry", record(session_id="s-2"))
    body = agent.get("/api/v1/sessions/s-2").json()
    assert body["window_tokens"] == 500_000
    assert body["pressure"] == pytest.approx(51_000 / (500_000 - 16_000))


def test_long_context_tier_bills_the_whole_request_at_premium_rates(agent):
    agent.post(
        "/api/v1/telemetry",
        record(
            usage=anthropic_usage(uncached=210_000, write=0, read=0, output=1_000),
            window_tokens=1_000_000,
        ),
    )
    call = LLMCall.objects.get()
    assert call.long_context is True
    assert (
        call.cost_usd
        == Decimal("210000") * Decimal("6") / 10**6 + Decimal("1000") * Decimal("22.5") / 10**6
    )


# --- idempotency and conflicts ------------------------------------------------------------------


def test_replaying_a_record_is_a_duplicate_and_changes_nothing(agent):
    assert agent.post("/api/v1/telemetry", record(at="2026-11-30T10:00:00Z")).status_code == 201
    before = snapshot()
    response = agent.post("/api/v1/telemetry", record(at="2026-11-30T10:00:00Z"))
    assert response.status_code == 200
    assert response.json()["items"][0]["status"] == "duplicate"
    assert snapshot() == before


def test_replay_with_a_defaulted_at_is_a_duplicate_although_the_server_stamped_the_time(agent):
    assert agent.post("/api/v1/telemetry", record()).status_code == 201
    before = snapshot()
    response = agent.post("/api/v1/telemetry", record())
    assert response.json()["items"][0]["status"] == "duplicate"
    assert snapshot() == before


def test_the_same_instant_in_another_offset_is_the_same_payload(agent):
    agent.post("/api/v1/telemetry", record(at="2026-11-30T10:00:00Z"))
    response = agent.post("/api/v1/telemetry", record(at="2026-11-30T12:00:00+02:00"))
    assert response.json()["items"][0]["status"] == "duplicate"


def _first_form_hash(raw: dict[str, Any]) -> str:
    """The payload hash as first written: `model_dump` less defaults, `at` in UTC, `json.dumps`
    with sorted keys (what calls stored before the plain path hold)."""
    import hashlib
    from datetime import UTC

    from telemetry.schemas import RecordIn

    parsed = RecordIn.model_validate(raw)
    data = parsed.model_dump(mode="python", exclude_defaults=True)
    if parsed.at is not None:
        data["at"] = parsed.at.astimezone(UTC).isoformat()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def test_the_stored_payload_hash_is_its_first_form_on_every_path(agent):
    # plain (msgspec's sorted JSON), with a float or a prefix (json.dumps), single and batched:
    # a call stored before the plain path existed is still matched by its replay
    plain = record(
        turn=0, call=0, provider=None, at="2026-11-30T12:00:00+02:00", request_id="rq-é😀"
    )
    floats = record(turn=1, usage={**anthropic_usage(), "cost": 1e-05, "ratio": 1e16})
    prefixed = record(turn=2, prefix=[{"kind": "system", "hash": "h", "tokens": 3}])
    batched = [record(turn=3, context_management={"applied_edits": []}), record(turn=4)]
    for one in (plain, floats, prefixed):
        assert agent.post("/api/v1/telemetry", one).status_code == 201
    assert agent.post("/api/v1/telemetry", {"records": batched}).status_code == 200
    stored = dict(LLMCall.objects.values_list("turn", "payload_hash"))
    for one in (plain, floats, prefixed, *batched):
        # the hex the column held before it held the digest's bytes (migration 0029)
        assert bytes(stored[one["turn"]]).hex() == _first_form_hash(one), one


def test_different_content_at_a_taken_position_is_a_conflict_and_changes_nothing(agent):
    agent.post("/api/v1/telemetry", record())
    before = snapshot()
    response = agent.post("/api/v1/telemetry", record(usage=anthropic_usage(read=1)))
    assert response.status_code == 409
    item = response.json()["items"][0]
    assert item["status"] == "conflict"
    assert "turn 0 call 0" in item["detail"]
    assert snapshot() == before


def test_request_id_is_the_idempotency_key_when_given(agent):
    agent.post("/api/v1/telemetry", record(request_id="msg_01"))
    assert (
        agent.post("/api/v1/telemetry", record(request_id="msg_01")).json()["items"][0]["status"]
        == "duplicate"
    )
    clash = agent.post("/api/v1/telemetry", record(turn=5, request_id="msg_01"))
    assert clash.status_code == 409
    assert clash.json()["items"][0]["field"] == "request_id"
    assert LLMCall.objects.count() == 1


def test_a_batch_finds_a_stored_request_id_at_another_turn(agent):
    """The batch's idempotency read probes (session, request id) pairs apart from the (session,
    turn) pairs: a request id stored at turn 0 is a conflict at a turn the batch reads nothing
    else of, a request id of another session is new, and the other records are stored."""
    agent.post("/api/v1/telemetry", record(turn=0, request_id="msg_01"))
    agent.post("/api/v1/telemetry", record(turn=1, session_id="other", request_id="msg_02"))
    response = agent.post(
        "/api/v1/telemetry",
        {
            "records": [
                record(turn=7, request_id="msg_01"),
                record(turn=8, request_id="msg_02"),  # stored in another session: new here
                record(turn=9),
            ]
        },
    )
    items = response.json()["items"]
    assert [item["status"] for item in items] == ["conflict", "created", "created"]
    assert items[0]["field"] == "request_id"
    assert LLMCall.objects.count() == 4


def test_a_batch_answers_per_item_and_one_bad_item_does_not_drop_the_others(agent):
    agent.post("/api/v1/telemetry", record(turn=0))
    response = agent.post(
        "/api/v1/telemetry",
        {
            "records": [
                record(turn=0),
                record(turn=1),
                record(turn=2, usage={"input_tokens": -5, "output_tokens": 1}),
                record(turn=0, usage=anthropic_usage(read=7)),
                record(turn=3, at="yesterday"),
                record(turn=4),
                record(turn=4),
            ]
        },
    )
    assert response.status_code == 200
    body = response.json()
    statuses = [item["status"] for item in body["items"]]
    assert statuses == [
        "duplicate",
        "created",
        "invalid",
        "conflict",
        "invalid",
        "created",
        "duplicate",
    ]
    assert body["items"][2]["field"] == "records.2.usage.input_tokens"
    assert body["items"][4]["field"] == "records.4.at"
    assert (body["created"], body["duplicates"], body["conflicts"], body["invalid"]) == (2, 2, 1, 2)
    assert sorted(LLMCall.objects.values_list("turn", flat=True)) == [0, 1, 4]


def test_a_batch_costs_a_constant_number_of_statements_whatever_its_size(make_agent):
    def statements(n: int, session: str) -> int:
        agent = make_agent("default")
        batch = {"records": [record(session_id=session, turn=i // 3, call=i % 3) for i in range(n)]}
        with CaptureQueriesContext(connection) as queries:
            response = agent.post("/api/v1/telemetry", batch)
        assert response.json()["created"] == n
        return len(queries)

    small, large = statements(3, "small"), statements(300, "large")
    if connection.vendor == "sqlite":
        # SQLite caps a statement at 999 parameters, so Django splits each bulk insert into
        # chunks; the statement count still does not grow per record (≤ 40 columns a row).
        assert large <= small + 2 * -(-300 * 40 // 999)
    else:
        assert small == large


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ("{not json", 400, "body"),
        ("", 400, "body"),
        ("[1, 2]", 422, "body"),
        (json.dumps(record(turn="three")), 422, "turn"),
        (json.dumps(record(turn=True)), 422, "turn"),
        (json.dumps({k: v for k, v in record().items() if k != "model"}), 422, "model"),
        (json.dumps({k: v for k, v in record().items() if k != "usage"}), 422, "usage"),
        (json.dumps(record(session_id="bad\u0000id")), 422, "session_id"),
        (json.dumps(record(usage={**anthropic_usage(), "note": "x\u0000y"})), 422, "usage"),
        (json.dumps(record(turn=2**40)), 422, "turn"),
        (json.dumps(record(appended_chars=-1)), 422, "appended_chars"),
        (json.dumps(record(usage=anthropic_usage(read=-3))), 422, "usage.cache_read_input_tokens"),
        (
            json.dumps(record(usage=anthropic_usage(read=2**60))),
            422,
            "usage.cache_read_input_tokens",
        ),
        # a call's counts are int4 columns: one above 2**31 - 1 is refused by name, not by the
        # database (the request's size too, the sum of its input buckets)
        (json.dumps(record(usage=anthropic_usage(output=2**31))), 422, "usage"),
        (json.dumps(record(usage=anthropic_usage(read=2**31 - 1))), 422, "usage"),
        (json.dumps(record(appended_chars=2**31)), 422, "appended_chars"),
        (json.dumps(record(request_chars=2**31)), 422, "request_chars"),
        (
            json.dumps(
                record(
                    diagnostics={
                        "cache_miss_reason": {"type": "x", "cache_missed_input_tokens": 2**31}
                    }
                )
            ),
            422,
            "diagnostics.cache_miss_reason.cache_missed_input_tokens",
        ),
        (json.dumps(record(at="30/11/2026")), 422, "at"),
        (json.dumps(record(at="2026-11-30T10:00:00")), 422, "at"),
        (json.dumps(record(colour="blue")), 422, "colour"),
        (json.dumps(record(model="mystery", usage={"tokens": 5})), 422, "usage"),
        (json.dumps(record(window_tokens=1000)), 422, "window_tokens"),
        (json.dumps({"records": "nope"}), 422, "records"),
        (json.dumps({"records": []}), 422, "records"),
        (json.dumps({"records": [record(turn=i) for i in range(1001)]}), 422, "records"),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_field_and_changes_nothing(agent, body, status, field):
    agent.post("/api/v1/telemetry", record(session_id="kept"))
    before = snapshot()
    response = agent.post("/api/v1/telemetry", body)
    assert response.status_code == status, response.content
    payload = response.json()
    named = payload.get("field") or payload.get("items", [{}])[0].get("field")
    assert named is not None and named.startswith(field), payload
    assert snapshot() == before


def test_a_count_above_what_a_row_stores_is_named_in_the_detail(agent):
    too_big = record(usage=anthropic_usage(uncached=2**30, read=2**30, write=0))
    response = agent.post("/api/v1/telemetry", too_big)
    assert response.status_code == 422
    payload = response.json()
    item = payload.get("items", [payload])[0]
    assert (item["field"], item["detail"]) == (
        "usage",
        f"usage: context_tokens must be at most {2**31 - 1} tokens, got {2**31}",
    )
    fits = record(usage=anthropic_usage(uncached=2**30, read=2**30 - 1, write=0, output=2**31 - 1))
    assert agent.post("/api/v1/telemetry", fits).status_code == 201
    stored = LLMCall.objects.get()
    assert (stored.context_tokens, stored.output) == (2**31 - 1, 2**31 - 1)


def test_a_body_over_the_endpoint_limit_is_413_not_400(agent, settings):
    settings.TELEMETRY_MAX_REQUEST_BYTES = 64 * 1024
    huge = json.dumps({"records": [record(turn=i, request_id="x" * 150) for i in range(400)]})
    assert len(huge) > 64 * 1024
    response = agent.post("/api/v1/telemetry", huge)
    assert response.status_code == 413
    assert response.json()["field"] == "body"
    assert not LLMCall.objects.exists()


def test_another_profiles_session_is_404_and_never_touched(agent, outsider):
    agent.post("/api/v1/telemetry", record())
    assert outsider.get("/api/v1/sessions/s-1").status_code == 404
    # the same agent-chosen id under another profile is another session
    assert outsider.post("/api/v1/telemetry", record()).status_code == 201
    assert AgentSession.objects.filter(external_id="s-1").count() == 2
    assert agent.get("/api/v1/sessions/s-1").json()["calls"] == 1


# --- rate limit and round limits ---------------------------------------------------------------


def test_one_key_over_its_rate_gets_429_with_retry_after_and_others_are_unaffected(
    make_agent, settings
):
    from django.core.cache import cache

    cache.clear()
    settings.API_RATE_LIMIT_PER_MINUTE = 3
    noisy, quiet = make_agent("default"), make_agent("default")
    codes = [noisy.get("/api/v1/policy").status_code for _ in range(4)]
    assert codes[:3] == [200, 200, 200]
    assert codes[3] == 429
    limited = noisy.get("/api/v1/policy")
    assert 1 <= int(limited["Retry-After"]) <= 60
    assert quiet.get("/api/v1/policy").status_code == 200


def test_round_soft_limit_returns_the_nudge_and_the_hard_cap_says_stop(agent):
    update_policy(
        profile=agent.key.profile,
        values={"round_soft_limit": 3, "round_hard_cap": 5, "nudge_text": "Re-read the plan."},
    )
    answers = [
        agent.post("/api/v1/telemetry", record(turn=0, call=i)).json()["items"][0] for i in range(5)
    ]
    assert [a["nudge"] for a in answers] == [
        None,
        None,
        "Re-read the plan.",
        "Re-read the plan.",
        "Re-read the plan.",
    ]
    assert [a["stop"] for a in answers] == [False, False, False, False, True]
    session = agent.get("/api/v1/sessions/s-1").json()
    assert session["round_signal"] == "stop"


def test_in_a_batch_each_call_is_judged_by_the_rounds_it_completes(agent):
    update_policy(profile=agent.key.profile, values={"round_soft_limit": 3, "round_hard_cap": 5})
    batch = {"records": [record(turn=0, call=i) for i in range(6)]}
    items = agent.post("/api/v1/telemetry", batch).json()["items"]
    assert [item["nudge"] is not None for item in items] == [False, False, True, True, True, True]
    assert [item["stop"] for item in items] == [False, False, False, False, True, True]
