"""Issue 17 item 4: the compaction API's In/Out schemas, the verbatim provider objects inside
them, and domain errors mapped once (no bare ValueError turned into a 422 elsewhere)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compaction.models import LogMessage
from telemetry.models import AgentSession
from tests.support import append_body

pytestmark = pytest.mark.django_db

COMPACTION_TAGS = {"compaction", "imports"}


def openapi(client) -> dict[str, Any]:
    spec: dict[str, Any] = client.get("/api/openapi.json").json()
    return spec


def post_text(agent, path: str, text: str):
    return agent.client.post(path, text, content_type="application/json", headers=agent.headers())


# --- our envelopes refuse unknown fields, naming them -----------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/api/v1/sessions/env/messages",
            {
                "format": "openai",
                "messages": [{"seq": 0, "role": "user", "content": "hi"}],
                "sytem": "typo",
            },
            "sytem",
        ),
        (
            "/api/v1/sessions/env/compact",
            {"expected_surface_versoin": 1},
            "expected_surface_versoin",
        ),
        ("/api/v1/sessions/env/overflow", {"surface_version": 0, "details": "x"}, "details"),
    ],
)
def test_an_unknown_envelope_field_is_a_422_naming_it_and_changes_nothing(
    compactor, path, body, field
):
    seed = {"format": "openai", "messages": [{"seq": 0, "role": "user", "content": "start"}]}
    assert compactor.post("/api/v1/sessions/env/messages", seed).status_code == 201
    before = list(LogMessage.objects.values_list("seq", "raw"))
    response = compactor.post(path, body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(f"{field}: ")
    assert list(LogMessage.objects.values_list("seq", "raw")) == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/api/v1/sessions/env/compact",
            {"expected_surface_version": -1},
            "expected_surface_version",
        ),
        (
            "/api/v1/sessions/env/compact",
            {"expected_surface_version": "1"},
            "expected_surface_version",
        ),
        ("/api/v1/sessions/env/overflow", {"surface_version": True}, "surface_version"),
        ("/api/v1/sessions/env/overflow", {"detail": 7}, "detail"),
        ("/api/v1/sessions/env/overflow", {"detail": "a\x00b"}, "detail"),
        ("/api/v1/sessions/env/overflow", {"detail": "x" * 10_001}, "detail"),
        ("/api/v1/sessions/env/overflow", [], "body"),
    ],
)
def test_envelope_values_are_checked_by_the_schema(compactor, path, body, field):
    seed = {"format": "openai", "messages": [{"seq": 0, "role": "user", "content": "start"}]}
    assert compactor.post("/api/v1/sessions/env/messages", seed).status_code == 201
    response = compactor.post(path, body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field


def test_an_overflow_version_ahead_of_the_session_is_a_422_on_it_and_teaches_no_window(
    compactor,
):
    """The service names the field itself (no bare ValueError mapped by the route), and the
    refusal comes before anything is learned from `detail`."""
    assert compactor.post("/api/v1/sessions/ahead/messages", append_body(3)).status_code == 201
    response = compactor.post(
        "/api/v1/sessions/ahead/overflow",
        {"surface_version": 99, "detail": "prompt is too long: 210345 tokens > 200000 maximum"},
    )
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "surface_version"
    assert "99 is ahead of the session's" in response.json()["detail"]
    session = AgentSession.objects.get(external_id="ahead")
    assert session.learned_window_tokens is None


# --- provider objects are kept verbatim -------------------------------------------------------


def test_unknown_fields_inside_messages_are_stored_and_read_back_byte_identical(compactor):
    first = (
        '{ "seq" : 0, "role": "user", "x_vendor": {"z": 1, "a": [1.50, 2E3, -0.0]},'
        ' "content": [{"type": "text", "text": "caf\\u00e9", "cache_hint": {"ttl": "1h"}}],'
        ' "zz_trailing":null }'
    )
    second = (
        '{"seq":1,"role":"assistant","content":"ok","provider_meta":{"id":"msg_01","usage":'
        '{"input_tokens":10,"output_tokens":2}},"stop_reason":"end_turn"}'
    )
    body = '{"messages": [' + first + ",\n   " + second + '], "format": "anthropic"}'
    response = post_text(compactor, "/api/v1/sessions/verbatim/messages", body)
    assert response.status_code == 201, response.content
    assert response.json()["appended"] == [0, 1]

    assert list(LogMessage.objects.order_by("seq").values_list("raw", flat=True)) == [
        first,
        second,
    ]
    page = compactor.get("/api/v1/sessions/verbatim/log")
    assert page.status_code == 200
    assert page.content.endswith(('"messages":[' + first + "," + second + "]}").encode())
    # the same message again is a duplicate, whatever its spacing: nothing is re-stored
    again = post_text(
        compactor,
        "/api/v1/sessions/verbatim/messages",
        '{"format":"anthropic","messages":[' + json.dumps(json.loads(first)) + "]}",
    )
    assert again.status_code == 200, again.content
    assert again.json()["duplicates"] == [0]
    assert LogMessage.objects.get(seq=0).raw == first


def test_an_archive_returns_the_unknown_fields_of_its_messages(compactor):
    body = append_body(12)
    body["messages"][0]["x_vendor"] = {"trace": "t-1", "nested": {"b": 2, "a": 1}}
    assert compactor.post("/api/v1/sessions/arch/messages", body).status_code == 201
    compacted = compactor.post("/api/v1/sessions/arch/compact")
    assert compacted.status_code == 200, compacted.content
    archive_id = compacted.json()["archive_id"]
    document = compactor.get(f"/api/v1/archives/{archive_id}").json()
    first = next(m for m in document["log"] if m["seq"] == 1)
    assert first["x_vendor"] == {"trace": "t-1", "nested": {"b": 2, "a": 1}}
    assert list(first["x_vendor"]["nested"]) == ["b", "a"]


# --- the OpenAPI document ---------------------------------------------------------------------


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _documented(schema: dict[str, Any], spec: dict[str, Any]) -> bool:
    """A schema that says something: a named component, or an array of one, never a bare
    `{"type": "object", "additionalProperties": true}`."""
    schema = _resolve(schema, spec)
    if schema.get("type") == "array":
        return _documented(schema["items"], spec)
    return bool(schema.get("properties"))


def test_every_compaction_route_documents_its_request_and_responses(client):
    spec = openapi(client)
    operations = [
        (path, method, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if COMPACTION_TAGS & set(operation.get("tags", []))
    ]
    assert len(operations) == 11
    for path, method, operation in operations:
        where = f"{method.upper()} {path}"
        for parameter in operation.get("parameters", []):
            assert parameter.get("schema"), where
        if method == "post":
            content = operation["requestBody"]["content"]
            assert content, where
            for media, body in content.items():
                if media == "application/json":
                    assert body["schema"]["additionalProperties"] is False, where
                    assert body["schema"]["properties"], where
        successes = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        assert successes, where
        for status, response in {
            **successes,
            **{s: r for s, r in operation["responses"].items() if s == "409"},
        }.items():
            schema = response["content"]["application/json"]["schema"]
            assert _documented(schema, spec), f"{where} {status}"


def test_message_objects_are_documented_as_open_and_envelopes_as_closed(client):
    spec = openapi(client)
    body = spec["paths"]["/api/v1/sessions/{session_id}/messages"]["post"]["requestBody"]
    envelope = body["content"]["application/json"]["schema"]
    assert envelope["additionalProperties"] is False
    assert set(envelope["properties"]) == {"format", "system", "messages"}
    message = envelope["properties"]["messages"]["items"]
    assert message["additionalProperties"] is True and message["required"] == ["seq"]
    log = _resolve({"$ref": "#/components/schemas/LogPageOut"}, spec)
    assert log["properties"]["messages"]["items"]["additionalProperties"] is True
