"""Long request lines and headers through a real gunicorn with the project's config: a URL up to
`CONSOLE_MAX_URL_BYTES` is served, a longer one answers 414 in JSON on the API, and what gunicorn
refuses itself (a line past its maximum, an oversized header) is JSON too, never its HTML page."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.test import Client

from console.api import api
from tests.db.conftest import _database_url_for_worker
from tests.live import gunicorn, request, service_env

pytestmark = pytest.mark.django_db(transaction=True)


def _padded(path: str, size: int) -> str:
    """`path` with a query string that makes the request target `size` bytes long."""
    prefix = path + "?pad="
    return prefix + "a" * (size - len(prefix))


def _json_detail(headers: dict[str, str], body: bytes) -> str:
    assert headers["content-type"].startswith("application/json"), body[:200]
    detail = json.loads(body)["detail"]
    assert isinstance(detail, str)
    return detail


def test_long_urls_and_headers_answer_json_through_gunicorn(tmp_path):
    env = service_env(
        DATABASE_URL=_database_url_for_worker(), CONSOLE_VAR_DIR=str(settings.VAR_DIR)
    )
    with gunicorn(env, tmp_path / "gunicorn.log", threads=2) as server:
        # 5 kB: over gunicorn's default line limit of 4094, served now
        status, _, _ = request(server.port, "GET", _padded("/api/openapi.json", 5_000))
        assert status == 200

        # over the console's cap, under gunicorn's: Django's 414
        status, headers, body = request(server.port, "GET", _padded("/api/v1/policy", 8_100))
        assert status == 414
        assert "8100 bytes is over the limit of 8000" in _json_detail(headers, body)

        # 20 kB: past gunicorn's maximum line, refused by gunicorn, in JSON
        status, headers, body = request(server.port, "GET", _padded("/api/v1/policy", 20_000))
        assert status == 414
        assert "URI Too Long" in _json_detail(headers, body)

        # a console page gets the same short answer, not an HTML page from gunicorn
        status, headers, body = request(server.port, "GET", _padded("/sessions/", 20_000))
        assert status == 414 and b"<html" not in body.lower()

        # one header over gunicorn's field size: 431, in JSON
        status, headers, body = request(
            server.port, "GET", "/api/v1/policy", headers={"X-Padding": "b" * 10_000}
        )
        assert status == 431
        assert "Header" in _json_detail(headers, body)


def test_the_url_cap_holds_in_any_server(agent):
    client = Client()
    response = client.get(_padded("/api/v1/policy", 8_001), headers=agent.headers())
    assert response.status_code == 414
    assert response.json()["field"] == "url" and response.json()["limit_bytes"] == 8000
    page = client.get(_padded("/sessions/", 8_001))
    assert page.status_code == 414 and page["Content-Type"].startswith("text/plain")
    assert client.get(_padded("/api/openapi.json", 7_999)).status_code == 200


def test_every_operation_documents_414_431_and_503():
    schema = api.get_openapi_schema(path_prefix="/api")
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            missing = {"414", "431", "503"} - set(operation["responses"])
            assert not missing, (method, path, missing)
