"""A scripted stand-in for the console's HTTP API, for the reporter's failure paths (refused,
5xx, 429 + Retry-After, slow). The real console is exercised in the repository's tests/client."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Answer = tuple[int, dict[str, str], Any]  # status, headers, JSON body
Script = Callable[[int, dict[str, Any]], Answer]


@dataclass
class ScriptedConsole:
    script: Script
    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    delay: float = 0.0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def records(self) -> list[dict[str, Any]]:
        return [r for _, body in self.received for r in body.get("records", [body])]


def ok(number: int, body: dict[str, Any]) -> Answer:
    records = body.get("records", [body])
    return 200, {}, {"items": [{"index": i, "status": "created"} for i in range(len(records))]}


@pytest.fixture(autouse=True)
def _spool_root(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test spools into its own folder, never the user's cache."""
    root = tmp_path / "spool"
    monkeypatch.setenv("CONTEXT_CONSOLE_SPOOL_DIR", str(root))
    for name in ("CONTEXT_CONSOLE_SPOOL_MAX_BYTES", "CONTEXT_CONSOLE_SPOOL_MAX_AGE"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedConsole]]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script = ok, delay: float = 0.0) -> ScriptedConsole:
        console = ScriptedConsole(script, delay=delay)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self, body: dict[str, Any]) -> None:
                console.received.append((time.monotonic(), body))
                if console.delay:
                    time.sleep(console.delay)
                status, headers, document = console.script(len(console.received), body)
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._answer(json.loads(self.rfile.read(length) or b"{}"))

            def do_GET(self) -> None:
                self._answer({"path": self.path})

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        console.server = server
        return console

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def refused_url() -> str:
    """A local port with nothing listening: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
