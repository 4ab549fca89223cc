"""Issue 16, input robustness: no 5xx on input that parses, one rule for unencodable text.

The rule (`telemetry.safejson`): a JSON body holding a lone UTF-16 surrogate, NaN/Infinity,
nesting deeper than 64 levels or an unreadable integer is refused with 422 naming the field,
and nothing of it is stored; in a telemetry batch only the bad record is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from compaction.models import CompactionRun, LogMessage, OverflowEvent, Surface
from telemetry.models import AgentSession, LLMCall
from tests.db.test_ingest import record
from tests.support import append_body

pytestmark = pytest.mark.django_db

LONE = '"\\ud83d"'  # a split emoji escape: valid JSON, not encodable text


def raw_post(agent, path: str, text: str, **extra: Any):
    return agent.client.post(
        path, text, content_type="application/json", headers=agent.headers(), **extra
    )


def messages_text(content_json: str) -> str:
    return (
        '{"format": "anthropic", "messages": [{"seq": 0, "role": "user", "content": '
        + content_json
        + "}]}"
    )


# --- item 1: a lone surrogate never poisons a session -------------------------------------------


def test_a_lone_surrogate_in_a_message_is_422_naming_the_field_and_stores_nothing(compactor):
    response = raw_post(compactor, "/api/v1/sessions/s1/messages", messages_text(LONE))
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "messages.0.content"
    assert "surrogate" in response.json()["detail"]
    assert not AgentSession.objects.filter(external_id="s1").exists()
    assert not LogMessage.objects.exists()


def test_a_surrogate_pair_is_text_and_the_session_stays_compactable(compactor, client):
    text = messages_text('"build \\ud83d\\ude00 ok"')
    assert raw_post(compactor, "/api/v1/sessions/s2/messages", text).status_code == 201
    body = append_body(12)  # continues at seq 1
    body.pop("system")
    assert compactor.post("/api/v1/sessions/s2/messages", body).status_code == 201
    assert compactor.post("/api/v1/sessions/s2/compact").status_code == 200
    surface = compactor.get("/api/v1/sessions/s2/surface")
    assert "\U0001f600" in json.dumps(surface.json(), ensure_ascii=False)


def test_a_lone_surrogate_in_a_usage_key_or_value_refuses_that_record_only(agent):
    def with_usage_extra(turn: int, extra: str) -> str:
        text = json.dumps(record(session_id="b1", turn=turn))
        return text.replace('"output_tokens": 800}', '"output_tokens": 800' + extra + "}")

    records = [
        with_usage_extra(0, ""),
        with_usage_extra(1, ', "note": "\\udc00"'),
        with_usage_extra(2, ', "\\ud800": 1'),
    ]
    response = raw_post(agent, "/api/v1/telemetry", '{"records": [' + ",".join(records) + "]}")
    assert response.status_code == 200, response.content
    items = response.json()["items"]
    assert [item["status"] for item in items] == ["created", "invalid", "invalid"]
    assert items[1]["field"] == "records.1.usage.note"
    assert items[2]["field"].startswith("records.2.usage.")
    assert "surrogate" in items[2]["detail"]
    assert LLMCall.objects.count() == 1


def test_a_single_record_with_a_surrogate_is_422_not_500(agent):
    text = json.dumps(record(session_id="b2")).replace('"b2"', '"b2\\udfff"')
    response = raw_post(agent, "/api/v1/telemetry", text)
    assert response.status_code == 422, response.content
    assert response.json()["items"][0]["field"] == "session_id"
    assert not AgentSession.objects.exists()


@pytest.mark.parametrize(
    "path", ["/api/v1/sessions/run-1/overflow", "/api/v1/sessions/run-1/compact"]
)
def test_a_surrogate_in_overflow_or_compact_bodies_is_422_and_applies_nothing(compactor, path):
    # item 7: the request either fully happens or not at all
    assert compactor.post("/api/v1/sessions/run-1/messages", append_body(12)).status_code == 201
    version = Surface.objects.get().version
    field = "detail" if path.endswith("overflow") else "expected_surface_version"
    response = raw_post(compactor, path, '{"' + field + '": ' + LONE + "}")
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    assert Surface.objects.get().version == version
    assert not CompactionRun.objects.exists() and not OverflowEvent.objects.exists()
    if path.endswith("overflow"):  # the once-per-version record is still there to take
        again = compactor.post(path, {"detail": "prompt is too long \U0001f600"})
        assert again.status_code == 200, again.content
        assert OverflowEvent.objects.get().recovered


# --- item 3: input that parses never answers 500 -----------------------------------------------

DEEP = "[" * 10_000 + "]" * 10_000
DOORS = [
    ("/api/v1/telemetry", "agent"),
    ("/api/v1/sessions/d1/messages", "agent"),
    ("/api/v1/sessions/d1/compact", "compactor"),
    ("/api/v1/sessions/d1/overflow", "compactor"),
]


@pytest.mark.parametrize(("path", "who"), DOORS)
@pytest.mark.parametrize(
    "text",
    [
        '{"a": ' + DEEP + "}",
        '{"a": ' + "[" * 70 + "]" * 70 + "}",
        '{"a": ' + "9" * 5000 + "}",
        '{"a": NaN}',
        '{"a": -Infinity}',
        '{"a": 1e999}',
    ],
    ids=["nested-10000", "nested-70", "int-5000-digits", "nan", "infinity", "overflowing-float"],
)
def test_input_that_parses_is_a_4xx_on_every_door(request, path, who, text):
    agent = request.getfixturevalue(who)
    if who == "compactor":
        assert agent.post("/api/v1/sessions/d1/messages", append_body(3)).status_code == 201
    response = raw_post(agent, path, text)
    assert 400 <= response.status_code < 500, response.content
    assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    ("usage_extra", "field"),
    [('"cost": NaN', "usage.cost"), ('"ratio": Infinity', "usage.ratio")],
)
def test_nan_in_a_non_token_usage_field_is_refused_naming_it(agent, usage_extra, field):
    text = json.dumps(record(session_id="n1")).replace(
        '"output_tokens": 800}', '"output_tokens": 800, ' + usage_extra + "}"
    )
    response = raw_post(agent, "/api/v1/telemetry", text)
    assert response.status_code == 422, response.content
    assert response.json()["items"][0]["field"] == field
    assert not LLMCall.objects.exists()


def test_an_at_that_overflows_in_utc_is_422_naming_at(agent):
    response = agent.post(
        "/api/v1/telemetry", record(session_id="t1", at="0001-01-01T00:00:00+01:00")
    )
    assert response.status_code == 422, response.content
    assert response.json()["items"][0]["field"] == "at"


def test_nul_in_a_path_or_query_parameter_is_422(agent):
    assert agent.get("/api/v1/sessions/%00").status_code == 422
    response = agent.get("/api/v1/archives?q=a%00b")
    assert response.status_code == 422
    assert response.json()["field"] == "q"


# --- item 8: NaN in a tool input never reaches the surface --------------------------------------


def test_nan_in_a_tool_input_is_refused_and_the_surface_stays_json(agent):
    body = json.dumps(append_body(1)).replace('"input": {"part": 0}', '"input": {"part": NaN}')
    response = raw_post(agent, "/api/v1/sessions/t8/messages", body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "messages.1.content.1.input.part"
    assert not LogMessage.objects.exists()


# --- item 9: a refused append creates no session ------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"format": "anthropic", "messages": []},
        {"format": "anthropic", "messages": [{"seq": 3, "role": "user", "content": "x"}]},
        {"format": "anthropic", "messages": [{"seq": 0, "role": "robot", "content": "x"}]},
        {"format": "klingon", "messages": [{"seq": 0, "role": "user", "content": "x"}]},
        {
            "format": "anthropic",
            "messages": [
                {
                    "seq": 0,
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
                }
            ],
        },
    ],
    ids=["empty", "bad-seq", "unknown-role", "bad-format", "orphan-tool-result"],
)
def test_an_invalid_append_answers_422_and_creates_no_session(agent, body):
    response = agent.post("/api/v1/sessions/never/messages", body)
    assert response.status_code == 422, response.content
    assert not AgentSession.objects.filter(external_id="never").exists()


# --- item 10: session ids with '/' are refused at every door ------------------------------------


def test_a_session_id_with_a_slash_is_refused_by_telemetry(agent):
    response = agent.post("/api/v1/telemetry", record(session_id="a/b"))
    assert response.status_code == 422
    assert response.json()["items"][0]["field"] == "session_id"
    assert not AgentSession.objects.exists()


# --- item 14: chunked bodies -------------------------------------------------------------------


def test_a_chunked_body_a_server_does_not_decode_is_411_not_read_as_empty(agent):
    """`manage.py runserver` passes the chunk framing on (no `wsgi.input_terminated`): nothing
    can read the body there. gunicorn decodes it: `tests/db/test_chunked_bodies.py`."""
    response = Client().generic(
        "POST",
        "/api/v1/telemetry",
        b"",
        content_type="application/json",
        headers={**agent.headers(), "Transfer-Encoding": "chunked"},
    )
    assert response.status_code == 411, response.content
    assert "Content-Length" in response.json()["detail"]
    assert "does not decode chunked" in response.json()["detail"]


# --- item 13: the OpenAPI document says what the API answers -----------------------------------


def test_openapi_documents_401_404_422_where_they_occur_and_the_body_rules(client):
    schema = client.get("/api/openapi.json").json()
    surface = schema["paths"]["/api/v1/sessions/{session_id}/surface"]["get"]["responses"]
    assert {"401", "404", "422", "429", "503"} <= set(surface)
    search = schema["paths"]["/api/v1/archives"]["get"]["responses"]
    assert {"401", "404", "422"} <= set(search)  # 404: an unknown session_id filter
    telemetry = schema["paths"]["/api/v1/telemetry"]["post"]["responses"]
    assert {"400", "401", "411", "413", "422"} <= set(telemetry)
    messages = schema["paths"]["/api/v1/sessions/{session_id}/messages"]["post"]
    body = messages["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["messages"]["minItems"] == 1
    record = telemetry_body = schema["paths"]["/api/v1/telemetry"]["post"]["requestBody"]
    record = telemetry_body["content"]["application/json"]["schema"]["oneOf"][0]
    required = [alt["required"] for alt in record["properties"]["usage"]["anyOf"]]
    assert ["input_tokens", "output_tokens"] in required
    assert ["prompt_tokens", "completion_tokens"] in required


def test_a_repeated_query_parameter_is_422_not_silently_one_of_them(agent):
    response = agent.get("/api/v1/archives?q=build&q=deploy")
    assert response.status_code == 422
    assert response.json()["field"] == "q"
