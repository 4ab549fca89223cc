"""The LLM-backed summarizer against a local HTTP server speaking both APIs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from compaction.summarizers import LLMSummarizer, SummarizerError
from context_core import ExtractiveSummarizer, ReliefPolicy, derive_surface, plan_relief
from tests.unit.core.test_relief_planning import fixed_transcript


class FakeProvider(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    status = 200
    delay = 0.0

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        FakeProvider.requests.append(
            {"path": self.path, "headers": dict(self.headers), "body": body}
        )
        if FakeProvider.delay:
            threading.Event().wait(FakeProvider.delay)
        if FakeProvider.status != 200:
            self._send(FakeProvider.status, {"error": {"message": "overloaded"}})
        elif self.path == "/v1/messages":
            self._send(200, {"content": [{"type": "text", "text": "Anthropic summary."}]})
        elif self.path == "/v1/chat/completions":
            self._send(
                200, {"choices": [{"message": {"role": "assistant", "content": "OpenAI summary."}}]}
            )
        else:
            self._send(404, {"error": "no route"})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging in the test output."""


@pytest.fixture
def provider() -> Iterator[str]:
    FakeProvider.requests = []
    FakeProvider.status = 200
    FakeProvider.delay = 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeProvider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_anthropic_summarizer_sends_the_messages_api_shape(provider):
    summarizer = LLMSummarizer(api="anthropic", base_url=provider, model="claude-x", api_key="sk-a")
    text = summarizer.summarize(fixed_transcript(rounds=2, size=100)[1:5], max_tokens=300)
    assert text == "Anthropic summary."
    (request,) = FakeProvider.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert request["path"] == "/v1/messages"
    assert headers["x-api-key"] == "sk-a"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    body = request["body"]
    assert body["model"] == "claude-x" and body["max_tokens"] == 300
    assert isinstance(body["system"], str)
    assert body["messages"][0]["role"] == "user"
    assert "[tool call read_file]" in body["messages"][0]["content"]


def test_openai_summarizer_sends_the_chat_completions_shape(provider):
    summarizer = LLMSummarizer(
        api="openai", base_url=provider + "/v1/", model="gpt-x", api_key="sk-o"
    )
    assert (
        summarizer.summarize(fixed_transcript(rounds=1, size=100), max_tokens=50)
        == "OpenAI summary."
    )
    (request,) = FakeProvider.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert request["path"] == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer sk-o"
    assert "x-api-key" not in headers
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]
    assert request["body"]["max_tokens"] == 50


def test_http_errors_raise_a_clear_summarizer_error(provider):
    FakeProvider.status = 529
    summarizer = LLMSummarizer(api="anthropic", base_url=provider, model="m", api_key="k")
    with pytest.raises(SummarizerError, match="HTTP 529") as caught:
        summarizer.summarize(fixed_transcript(rounds=1), max_tokens=10)
    assert caught.value.status == 529 and "overloaded" in caught.value.body


def test_a_slow_endpoint_times_out(provider):
    FakeProvider.delay = 1.0
    summarizer = LLMSummarizer(
        api="openai", base_url=provider + "/v1", model="m", api_key="k", timeout=0.2
    )
    with pytest.raises(SummarizerError, match="failed"):
        summarizer.summarize(fixed_transcript(rounds=1), max_tokens=10)


def test_relief_stores_the_llm_summary_so_derivation_never_calls_the_model(provider):
    summarizer = LLMSummarizer(api="openai", base_url=provider + "/v1", model="gpt-x", api_key="k")
    log = fixed_transcript(rounds=12, size=400)
    policy = ReliefPolicy(
        keep_rounds=1,
        keep_rounds_verbatim=1,
        window_tokens=700,
        reserved_output_tokens=200,
        stub_head_chars=20,
        stub_tail_chars=10,
        prune_min_free_tokens=10,
        summary_max_tokens=100,
    )
    plan = plan_relief(derive_surface(log), policy=policy, summarizer=summarizer)
    assert plan.action == "prune+summarize"
    calls = len(FakeProvider.requests)
    surface = derive_surface(log, plan.operations)
    assert len(FakeProvider.requests) == calls
    assert surface.messages[2].text.endswith("OpenAI summary.")
    assert "openai:gpt-x" in surface.messages[2].text
    assert ExtractiveSummarizer().name == "extractive"
