"""A real local HTTP receiver for notification tests: it answers a scripted sequence of
replies ("ok", "fail" for 500, "slow" to sleep past the client's timeout) and keeps every
request's headers and body."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    script: list[str]
    slow_seconds: float = 3.0
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://127.0.0.1:{port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append(Received(dict(self.headers.items()), body))
                reply = receiver.script.pop(0) if receiver.script else "ok"
                if reply == "slow":
                    time.sleep(receiver.slow_seconds)
                status = 200 if reply == "ok" else 500
                try:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"{}")
                except OSError:
                    pass  # the client gave up (timeout)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
