import json
import re
from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def test_openapi_schema_lists_every_agent_route(client):
    schema = client.get("/api/openapi.json").json()
    paths = set(schema["paths"])
    assert {
        "/api/v1/policy",
        "/api/v1/telemetry",
        "/api/v1/sessions/{session_id}",
        "/api/v1/sessions/{session_id}/messages",
        "/api/v1/sessions/{session_id}/surface",
        "/api/v1/sessions/{session_id}/compact",
        "/api/v1/sessions/{session_id}/overflow",
        "/api/v1/sessions/{session_id}/archives",
        "/api/v1/archives/{archive_id}",
        "/api/v1/alerts/rules",
        "/api/v1/alerts/rules/{rule_id}",
        "/api/v1/alerts",
        "/api/v1/sessions/{session_id}/export",
        "/api/v1/export/sessions",
    } <= paths
    schemes = schema["components"]["securitySchemes"].values()
    assert any(scheme.get("scheme") == "bearer" for scheme in schemes)


def test_the_served_openapi_document_has_no_duplicate_key_and_every_ref_resolves(client):
    """Code generators and validators stop at a key written twice or a `$ref` to nothing."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), f"a key written twice among {keys}"
        return dict(pairs)

    text = client.get("/api/openapi.json").content.decode()
    schema = json.loads(text, object_pairs_hook=no_duplicates)
    refs = set(re.findall(r'"\$ref": ?"([^"]+)"', text))
    assert refs
    for ref in refs:
        node: Any = schema
        assert ref.startswith("#/"), ref
        for part in ref[2:].split("/"):
            assert isinstance(node, dict) and part in node, f"{ref} resolves to nothing"
            node = node[part]
    assert "PrefixSegmentIn" in schema["components"]["schemas"]  # the telemetry record's part
    assert "$defs" not in text


def test_api_docs_load_their_assets_from_this_server_not_a_cdn(client):
    response = client.get("/api/docs")
    assert response.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.content.decode())
    assert assets and all(url.startswith("/static/") or url.startswith("#") for url in assets)


def test_metrics_are_open_by_default_and_need_the_token_when_one_is_set(client, settings):
    assert client.get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "scrape-me"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert right.status_code == 200
    assert b"# TYPE compaction_runs_total counter" in right.content


# --- the API page's examples are answers the schemas accept ------------------------------------

EXAMPLE = re.compile(r"<!-- example: (GET|POST) (\S+) (\w+) -->\n```json\n(.*?)\n```", re.DOTALL)
READ_ROUTES = {
    "/api/v1/sessions",
    "/api/v1/sessions/{session_id}",
    "/api/v1/sessions/{session_id}/turns",
    "/api/v1/sessions/{session_id}/compactions",
    "/api/v1/overview",
}


def _docs_examples() -> list[tuple[str, str, str, Any]]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    return [(m[1], m[2], m[3], json.loads(m[4])) for m in EXAMPLE.finditer(text)]


def _same_fields(example: Any, model: Any, where: str) -> None:
    """The example has exactly the schema's fields, nested models and lists of them included."""
    from pydantic import BaseModel

    assert set(example) == set(model.model_fields), where
    for name, field in model.model_fields.items():
        inner = field.annotation
        args = getattr(inner, "__args__", ())
        value = example[name]
        if isinstance(inner, type) and issubclass(inner, BaseModel) and value is not None:
            _same_fields(value, inner, f"{where}.{name}")
        elif args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            for index, item in enumerate(value or []):
                _same_fields(item, args[0], f"{where}.{name}.{index}")


def test_every_read_route_has_an_example_on_the_api_page_that_its_schema_accepts(client):
    from console import schemas as console_schemas
    from telemetry import schemas as telemetry_schemas

    schema = client.get("/api/openapi.json").json()
    examples = _docs_examples()
    assert {path for _, path, _, _ in examples} >= READ_ROUTES
    for method, path, name, body in examples:
        operation = schema["paths"][path][method.lower()]
        declared = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert declared["$ref"].endswith(f"/{name}"), (path, declared)
        model = getattr(console_schemas, name, None) or getattr(telemetry_schemas, name)
        model.model_validate(body)
        _same_fields(body, model, path)
        # money as documented: every `…_usd` is a nine-decimal string (or null: unpriced)
        for key, value in re.findall(r'"(\w+_usd)": ("[^"]*"|null)', json.dumps(body)):
            assert value == "null" or re.fullmatch(r'"-?\d+\.\d{9}"', value), (path, key, value)
