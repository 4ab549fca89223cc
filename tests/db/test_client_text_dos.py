"""Client text that cost quadratic time or answered 500, over HTTP, on both databases.

Times are ratios: the worst-case text against a same-sized ordinary one through the same
request, so a slow machine slows both (`tests.unit.test_client_text_patterns` holds the
megabyte-sized checks of each pattern).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from telemetry.models import AgentSession, ContextEvent, LLMCall
from tests.db.test_otlp import DONE_WHEN, LOGS, T0, TRACES, json_span, json_traces, partial, post
from tests.db.test_window_in_force import record
from tests.linearity import seconds
from tests.support import tool_transcript

pytestmark = pytest.mark.django_db

# A worst case may take this many times its ordinary twin (both include the request's fixed work).
SLOWER: float = 5


def cc_event(attrs: dict[str, str]) -> dict[str, Any]:
    """One Claude Code log record in OTLP JSON."""
    return {
        "timeUnixNano": str(T0),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def json_logs(*records: dict[str, Any]) -> bytes:
    return json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": list(records)}]}]}).encode()


def api_error(error: str, session: str = "cc-dos", **attrs: str) -> dict[str, Any]:
    return cc_event({"event.name": "api_error", "session.id": session, "error": error, **attrs})


def test_an_api_error_of_digits_costs_what_one_of_letters_does(agent):
    def export(session: str, filler: str) -> float:
        body = json_logs(api_error("prompt is too long " + filler, session))
        return seconds(lambda: post(agent, LOGS, body, json_body=True, gzipped=True), repeat=2)

    letters = export("letters", "x" * 16_000)
    digits = export("digits", "1" * 16_000)
    assert digits < SLOWER * letters
    assert ContextEvent.objects.filter(session__external_id="digits").count() == 1


def test_an_overflow_detail_of_digits_costs_what_one_of_letters_does(compactor):
    def report(session: str, filler: str) -> float:
        compactor.post("/api/v1/telemetry", record(session))
        path = f"/api/v1/sessions/{session}/overflow"
        detail = {"detail": "prompt is too long " + filler}
        return seconds(lambda: compactor.post(path, detail), repeat=2)

    letters = report("letters", "x" * 9_000)
    digits = report("digits", "1" * 9_000)
    assert digits < SLOWER * letters


def _archived(compactor, session: str, result: str) -> None:
    rounds = tool_transcript(10, result_chars=300)
    results = [m for m in rounds if m["role"] == "user" and isinstance(m["content"], list)]
    for message in results[:2]:
        message["content"][0]["content"] = result
    body = {"format": "anthropic", "system": "You are a build engineer.", "messages": rounds}
    assert compactor.post(f"/api/v1/sessions/{session}/messages", body).status_code == 201
    assert compactor.post(f"/api/v1/sessions/{session}/compact").json()["status"] == "applied"


def test_a_search_hit_after_a_long_run_of_letters_costs_what_one_after_words_does(compactor):
    _archived(compactor, "words", "A " * 7_500 + "needle")
    _archived(compactor, "run", "A" * 15_000 + " needle")

    def search(session: str) -> float:
        query = {"q": "needle", "limit": 12, "session_id": session}

        def get() -> None:
            response = compactor.get("/api/v1/archives", data=query)
            assert (
                response.status_code == 200 and "<mark>needle</mark>" in response.content.decode()
            )

        return seconds(get, repeat=2)

    words = search("words")
    run = search("run")
    assert run < SLOWER * words


def test_a_span_nested_100000_deep_is_rejected_alone_and_the_rest_are_stored(agent):
    spans = [
        json_span({**DONE_WHEN, "deep": "here" if i == 1 else "no"}, span=f"{i:016x}")
        for i in range(3)
    ]
    text = json_traces(*spans).decode()
    leaf = '{"stringValue": "here"}'
    deep = '{"arrayValue": {"values": [' * 33_334 + leaf + "]}}" * 33_334
    response = post(agent, TRACES, text.replace(leaf, deep).encode(), json_body=True, gzipped=True)
    assert response.status_code == 200, response.content
    rejected, message = partial(response)
    assert rejected == 1 and message.startswith("rejected 1 spans: item 1: record:")
    assert LLMCall.objects.count() == 2


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_event_timestamp_with_no_utc_time_is_rejected_alone_naming_it(agent, stamp):
    good = api_error("prompt is too long: 210,345 tokens > 200000 maximum")
    bad = api_error("prompt is too long", **{"event.timestamp": stamp, "event.sequence": "2"})
    response = post(agent, LOGS, json_logs(bad, good), json_body=True)
    assert response.status_code == 200, response.content
    rejected, message = partial(response)
    assert rejected == 1 and "item 0: event.timestamp:" in message
    assert list(ContextEvent.objects.values_list("tokens_before", flat=True)) == [210_345]


def test_an_api_error_stating_5000_digits_is_rejected_alone_naming_the_error(agent):
    bad = api_error(f"prompt is too long: {'9' * 5000} tokens > 200000 maximum")
    good = api_error(
        "prompt is too long: 210,345 tokens > 200000 maximum", **{"event.sequence": "2"}
    )
    response = post(agent, LOGS, json_logs(good, bad), json_body=True)
    assert response.status_code == 200, response.content
    rejected, message = partial(response)
    assert rejected == 1 and "item 1: error: states a number of 5000 digits" in message
    assert list(ContextEvent.objects.values_list("tokens_before", flat=True)) == [210_345]


def test_an_overflow_detail_stating_5000_digits_is_a_422_naming_the_detail(compactor):
    compactor.post("/api/v1/telemetry", record("big"))
    detail = f"prompt is too long: {'9' * 5000} tokens > 200000 maximum"
    response = compactor.post("/api/v1/sessions/big/overflow", {"detail": detail})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "detail"


# --- a record's `at` in the future ---------------------------------------------------------------


def _at(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def _refused_field(response: Any) -> str | None:
    assert response.status_code == 422, response.content
    payload = response.json()
    named: str | None = payload.get("field") or payload.get("items", [{}])[0].get("field")
    return named


def test_a_record_dated_past_the_clock_skew_is_refused_naming_at(agent, settings):
    refused = agent.post("/api/v1/telemetry", record(at="9999-12-31T00:00:00+00:00"))
    assert _refused_field(refused) == "at"
    assert agent.post("/api/v1/telemetry", record(at=_at(hours=23))).status_code in (200, 201)

    settings.TELEMETRY_CLOCK_SKEW_SECONDS = 60
    assert (
        _refused_field(agent.post("/api/v1/telemetry", record(turn=1, at=_at(minutes=2)))) == "at"
    )
    assert agent.post("/api/v1/telemetry", record(turn=1, at=_at())).status_code in (200, 201)
    (last_seen,) = AgentSession.objects.values_list("last_seen_at", flat=True)
    assert last_seen is not None and last_seen < datetime.now(UTC) + timedelta(days=1)


def test_an_otlp_span_ending_past_the_clock_skew_is_counted_in_partial_success(agent):
    future = int((datetime.now(UTC) + timedelta(days=400 * 365)).timestamp()) * 10**9
    spans = [
        json_span(DONE_WHEN, span=f"{1:016x}"),
        json_span(DONE_WHEN, span=f"{2:016x}", start=future),
    ]
    response = post(agent, TRACES, json_traces(*spans), json_body=True)
    assert response.status_code == 200, response.content
    rejected, message = partial(response)
    assert rejected == 1 and "item 1: endTimeUnixNano: is after" in message
    assert LLMCall.objects.count() == 1
