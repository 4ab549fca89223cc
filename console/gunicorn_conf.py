"""gunicorn settings for production: `gunicorn console.wsgi --config python:console.gunicorn_conf`.

- gthread workers (keep-alive agents, a thread runs while another waits on PostgreSQL), two
  per core; command-line flags still override these.
- Chunked request bodies (OpenTelemetry JS exporters send no Content-Length) are decoded by
  gunicorn; `console.middleware.body_limit` reads them to their end within the route's limit.
- A stalled request body cannot hold a thread: every read of the request (headers and body)
  times out after `CONSOLE_BODY_TIMEOUT_SECONDS` (default 10) without a byte, and the API
  answers 408. A client that is slow but sending keeps its request.
- A worker is replaced after `WEB_MAX_REQUESTS` requests (default 1000, 0: never), plus up to
  `WEB_MAX_REQUESTS_JITTER` (default 100) so the workers do not restart together: a safety
  net for memory a worker keeps, not the bound itself (OTLP exports are capped, and `make
  bench`'s P13 holds worker RSS after maximal exports to 1.5 × its warm-up figure).
- Long request lines reach Django: gunicorn's line limit is raised to its maximum (8190
  bytes), below which `CONSOLE_MAX_URL_BYTES` (default 8000) answers 414 in JSON
  (`console.middleware.url_limit`); what gunicorn itself refuses before Django (a longer line,
  a header over `limit_request_field_size`, a malformed request) is answered in JSON too
  (`write_json_error`), never gunicorn's HTML page.
- `X-Forwarded-Proto` is trusted only when `DJANGO_BEHIND_PROXY=true`, from the addresses in
  `FORWARDED_ALLOW_IPS` (default loopback); otherwise from nobody, so a process on the same
  host cannot make a plain-HTTP request look secure.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
from typing import Any

from gunicorn import util  # type: ignore[import-untyped]  # gunicorn ships no type information

from console.env import env_int, web_concurrency


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


workers = web_concurrency()
worker_class = "gthread"
threads = 2
keepalive = 30
timeout = 60
graceful_timeout = 30
max_requests = env_int("WEB_MAX_REQUESTS", 1000, minimum=0)
max_requests_jitter = env_int("WEB_MAX_REQUESTS_JITTER", 100, minimum=0)

# gunicorn's maximum: a URL up to CONSOLE_MAX_URL_BYTES reaches Django, which answers 414 in
# JSON above that cap; 0 (unlimited) would make gunicorn's pure-Python parser buffer any length.
limit_request_line = 8190
limit_request_field_size = 8190

body_timeout = float(os.environ.get("CONSOLE_BODY_TIMEOUT_SECONDS", "10"))

if _flag("DJANGO_BEHIND_PROXY"):
    forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
    secure_scheme_headers = {"X-FORWARDED-PROTO": "https"}
else:
    forwarded_allow_ips = ""
    secure_scheme_headers: dict[str, str] = {}  # type: ignore[no-redef]


def pre_request(worker: Any, req: Any) -> None:
    """Bound every read of this request's socket (gthread resets it for keep-alive)."""
    sock = getattr(getattr(req, "unreader", None), "sock", None)
    if sock is not None and body_timeout > 0:
        sock.settimeout(body_timeout)


def _loopback_only(addresses: list[Any]) -> bool:
    """Whether every address gunicorn binds is on this machine only (`make run`'s default)."""
    for address in addresses:
        if not isinstance(address, tuple):
            return False  # a unix socket or a file descriptor: whoever can reach it, can
        host = str(address[0])
        if host != "localhost":
            try:
                if not ipaddress.ip_address(host).is_loopback:
                    return False
            except ValueError:
                return False
    return True


def post_worker_init(worker: Any) -> None:
    """A worker stops when its master tells it, not on a terminal's Ctrl-C.

    Ctrl-C signals the whole process group (`make run`): the worker would get SIGINT from the
    terminal and SIGQUIT from its master at once, and gthread's quit handler is not reentrant
    (it shuts the thread pool down inside the handler): a worker could hang there for good,
    holding the port. The master's SIGQUIT or SIGTERM still stops it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def when_ready(server: Any) -> None:
    """Say loudly at start when production serves /metrics to anyone (not for a loopback bind,
    which only this machine reaches)."""
    if (
        not _flag("DJANGO_DEBUG")
        and not os.environ.get("METRICS_TOKEN")
        and not _loopback_only(list(server.cfg.address))
    ):
        server.log.warning(
            "METRICS_TOKEN is not set: /metrics answers anyone who can reach it "
            "(manage.py check --deploy reports console.W001)"
        )


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's answer to a request it refuses before the application, as `{"detail": ...}`.

    gunicorn writes an HTML page here (`gunicorn.util.write_error`); API clients read JSON, and
    the console's people read the one line as well as a page. The message is gunicorn's own
    (for a long request line: its length and the limit), cut to a bounded length.
    """
    detail = f"{reason}: {mesg}" if mesg else reason
    body = json.dumps({"detail": detail[:500]}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


# The workers inherit this from the master (they are forked after this file is read).
util.write_error = write_json_error
