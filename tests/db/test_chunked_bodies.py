"""Chunked request bodies (no Content-Length), as OpenTelemetry JS exporters and Claude Code's
OTLP logs exporter send them: decoded by gunicorn (production and `make run`), read to their end
by `console.middleware.body_limit` within the route's limit (413 past it), 408 when stalled.
`tests/db/test_make_run.py` sends the same export through what `make run` starts."""

from __future__ import annotations

import gzip
import http.client
import io
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from telemetry.models import AgentSession, LLMCall
from tests.db.conftest import _database_url_for_worker
from tests.db.test_ingest import record
from tests.live import Gunicorn, gunicorn, service_env

LOGS = "/api/v1/otlp/v1/logs"
T0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z
LIMIT = 64 * 1024  # TELEMETRY_MAX_REQUEST_BYTES's minimum, for the gunicorn under test

# A Claude Code `api_request` event as its logs exporter sends it (attribute values are strings).
CLAUDE_CODE_API_REQUEST = {
    "event.name": "api_request",
    "session.id": "cc-chunked",
    "prompt.id": "prompt-1",
    "model": "claude-sonnet-4-5",
    "input_tokens": "12",
    "output_tokens": "300",
    "cache_read_tokens": "40000",
    "cache_creation_tokens": "2000",
    "cost_usd": "0.0291",
    "duration_ms": "4100",
    "query_source": "main",
    "request_id": "req_chunked",
    "event.sequence": "1",
    "event.timestamp": "2025-12-01T00:00:01.000Z",
}


def claude_code_logs_export() -> bytes:
    """One `claude_code.api_request` event in an ExportLogsServiceRequest, gzipped."""
    export = ExportLogsServiceRequest()
    logs = export.resource_logs.add()
    logs.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="claude-code"))
    )
    logs.scope_logs.add().log_records.append(
        LogRecord(
            time_unix_nano=T0,
            body=AnyValue(string_value="claude_code.api_request"),
            attributes=[
                KeyValue(key=k, value=AnyValue(string_value=v))
                for k, v in CLAUDE_CODE_API_REQUEST.items()
            ],
        )
    )
    return gzip.compress(export.SerializeToString())


def _pieces(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def send_chunked(
    port: int, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """POST `body` in 1000-byte chunks with `Transfer-Encoding: chunked` and no Content-Length,
    the framing Node's http module gives a streamed request (as OpenTelemetry JS sends)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=_pieces(body), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def send_claude_code_export(port: int, key: str) -> tuple[int, bytes]:
    status, _, answer = send_chunked(
        port,
        LOGS,
        claude_code_logs_export(),
        {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
            "User-Agent": "OTel-OTLP-Exporter-JavaScript/0.57.2",
        },
    )
    return status, answer


def assert_export_accepted(status: int, answer: bytes) -> None:
    assert status == 200, answer
    parsed = ExportLogsServiceResponse.FromString(answer)
    assert parsed.partial_success.rejected_log_records == 0, parsed


def _answer(sock: socket.socket) -> bytes:
    """An answer's head and its JSON body (gunicorn may write them apart)."""
    sock.settimeout(15)
    answer = b""
    while b"}" not in answer:
        piece = sock.recv(4096)
        if not piece:
            break
        answer += piece
    return answer


# --- through gunicorn with the project's config --------------------------------------------------


@pytest.fixture(scope="module")
def server(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    with django_db_blocker.unblock():
        database_url = _database_url_for_worker()
    env = service_env(
        DATABASE_URL=database_url,
        CONSOLE_VAR_DIR=str(settings.VAR_DIR),
        CONSOLE_BODY_TIMEOUT_SECONDS="2",
        TELEMETRY_MAX_REQUEST_BYTES=str(LIMIT),
        COMPACTION_AUTO_ENQUEUE="false",
    )
    with gunicorn(env, tmp_path_factory.mktemp("chunked") / "gunicorn.log", threads=2) as s:
        yield s


@pytest.mark.django_db(transaction=True)
def test_done_when_an_otel_js_chunked_gzip_protobuf_export_is_stored_through_gunicorn(
    server, make_agent
):
    agent = make_agent()
    assert_export_accepted(*send_claude_code_export(server.port, agent.plaintext))
    call = LLMCall.objects.get()
    assert (call.request_id, call.cache_read) == ("cc:req_chunked", 40000)
    assert AgentSession.objects.get().external_id == "cc-chunked"


@pytest.mark.django_db(transaction=True)
def test_chunked_json_telemetry_is_stored_through_gunicorn(server, make_agent):
    agent = make_agent()
    body = json.dumps(record(session_id="json-chunked")).encode()
    status, _, answer = send_chunked(
        server.port,
        "/api/v1/telemetry",
        body,
        {**agent.headers(), "Content-Type": "application/json"},
    )
    assert status == 201, answer
    assert AgentSession.objects.get().external_id == "json-chunked"
    assert LLMCall.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_over_the_limit_is_413_naming_it_through_gunicorn(server, make_agent):
    agent = make_agent()
    status, headers, answer = send_chunked(
        server.port,
        LOGS,
        b"\x00" * (LIMIT + 5000),
        {**agent.headers(), "Content-Type": "application/x-protobuf"},
    )
    assert status == 413, answer
    assert headers["content-type"].startswith("application/json")
    assert json.loads(answer)["limit_bytes"] == LIMIT
    assert f"limit of {LIMIT} bytes" in json.loads(answer)["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_stalled_chunked_body_answers_408_through_gunicorn(server, make_agent):
    agent = make_agent()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /api/v1/otlp/v1/logs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + agent.plaintext.encode() + b"\r\n"
            b"Content-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n"  # one chunk, then nothing
        )
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'{"detail": "body: was not received in time", "field": "body"}' in answer
    assert not LLMCall.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_broken_chunk_framing_is_a_400_not_a_500_through_gunicorn(server, make_agent):
    agent = make_agent()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /api/v1/telemetry HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + agent.plaintext.encode() + b"\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\nzz\r\n"  # a chunk size that is not hexadecimal
        )
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"chunked framing could not be read (InvalidChunkSize)" in answer


# --- in the process: the same rules through the test client -------------------------------------


def _chunked_environ(body: bytes) -> dict[str, Any]:
    """What gunicorn hands Django for a chunked body: no CONTENT_LENGTH, a stream that ends
    where the body ends."""
    return {"CONTENT_LENGTH": "", "wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True}


@pytest.mark.django_db
def test_a_chunked_body_is_bounded_by_the_routes_limit_to_the_byte(agent, settings):
    settings.TELEMETRY_MAX_REQUEST_BYTES = LIMIT
    headers = {**agent.headers(), "Transfer-Encoding": "chunked"}

    def post(body: bytes) -> Any:
        return Client().generic(
            "POST",
            "/api/v1/telemetry",
            b"",
            content_type="application/json",
            headers=headers,
            **_chunked_environ(body),
        )

    fits = json.dumps(record()).encode()
    fits += b" " * (LIMIT - len(fits))  # exactly the limit
    assert post(fits).status_code == 201
    over = post(fits + b" ")
    assert over.status_code == 413
    assert over.json() == {
        "detail": f"body: sent chunked, it is over this endpoint's limit of {LIMIT} bytes",
        "field": "body",
        "limit_bytes": LIMIT,
    }
