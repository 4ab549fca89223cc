"""Asynchronous telemetry reporting: a bounded queue, batched sends, bounded retries.

The agent's loop only ever puts a record on an in-memory queue (never blocking, never raising).
One daemon thread sends batches as `{"records": [...]}`; 429, 5xx, timeouts and refused
connections are retried with exponential backoff (honouring `Retry-After`), and after
`max_retries` the batch is dropped and counted. A full queue drops the new record and counts it.
`flush()` waits (bounded) until everything queued was sent or dropped; it also runs at exit.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

logger = logging.getLogger("context_console")

RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ReportingOptions:
    """How records travel to the console. `synchronous=True` sends each record inline (tests,
    scripts that exit at once); the default queues them for the background thread."""

    synchronous: bool = False
    max_queue: int = 10_000
    batch_size: int = 200
    linger_seconds: float = 0.05
    max_retries: int = 4
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 10.0
    timeout_seconds: float = 5.0
    exit_flush_seconds: float = 5.0


@dataclass
class ReportingStats:
    """Counts since the console was created; `dropped` is what the console never received."""

    queued: int = 0
    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    dropped: int = 0
    retries: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """`Retry-After` as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def backoff_delay(attempt: int, options: ReportingOptions, retry_after: float | None) -> float:
    """Exponential backoff (base * 2**attempt, capped); the server's Retry-After wins when given."""
    if retry_after is not None:
        return retry_after
    return float(min(options.max_backoff_seconds, options.backoff_seconds * (2**attempt)))


class Reporter:
    """Sends telemetry records to `POST {api}/telemetry`. Thread-safe; never raises from `put`."""

    def __init__(
        self,
        api_url: str,
        headers: dict[str, str],
        options: ReportingOptions,
        *,
        transport: httpx.BaseTransport | None = None,
        on_response: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._options = options
        self._url = api_url.rstrip("/") + "/telemetry"
        self._http = httpx.Client(
            headers=headers, timeout=options.timeout_seconds, transport=transport
        )
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=options.max_queue)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # queued + in flight
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_response = on_response
        self.stats = ReportingStats()
        # Flush at exit (weakref.finalize runs its callback at interpreter exit, bounded).
        self._finalizer = weakref.finalize(self, Reporter._close_at_exit, weakref.ref(self))

    # --- the agent's side -------------------------------------------------------------------

    def put(self, record: dict[str, Any]) -> None:
        """Queue one record (or send it now in synchronous mode). Never raises, never blocks."""
        if self._options.synchronous:
            with self._lock:
                self.stats.queued += 1
                self._pending += 1
            try:
                self._send_with_retries([record])
            finally:
                self._done(1)
            return
        with self._lock:
            if self._stop.is_set():
                self._drop_locked(1, "closed")
                return
            try:
                self._queue.put_nowait(record)
            except queue.Full:
                self._drop_locked(1, "queue_full")
                return
            self.stats.queued += 1
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="context-console-reporter", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record was sent or dropped; False if `timeout` ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, timeout: float | None = None) -> None:
        """Flush (bounded by `timeout`), then stop the thread; what is left is counted dropped."""
        self.flush(self._options.exit_flush_seconds if timeout is None else timeout)
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=1.0)
        left = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            left += 1
        if left:
            with self._lock:
                self._drop_locked(left, "closed")
                self._pending -= left
                self._idle.notify_all()
            logger.warning("context console: %d telemetry record(s) not sent at close", left)
        self._http.close()

    @staticmethod
    def _close_at_exit(ref: weakref.ref[Reporter]) -> None:
        reporter = ref()
        if reporter is not None and not reporter._stop.is_set():
            reporter.close()

    # --- the thread's side ------------------------------------------------------------------

    def _drop_locked(self, count: int, reason: str) -> None:
        self.stats.dropped += count
        self.stats.drop_reasons[reason] = self.stats.drop_reasons.get(reason, 0) + count

    def _done(self, count: int) -> None:
        with self._idle:
            self._pending -= count
            if self._pending <= 0:
                self._idle.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            deadline = time.monotonic() + self._options.linger_seconds
            while len(batch) < self._options.batch_size:
                remaining = deadline - time.monotonic()
                try:
                    batch.append(
                        self._queue.get(timeout=remaining)
                        if remaining > 0
                        else self._queue.get_nowait()
                    )
                except queue.Empty:
                    break
            try:
                self._send_with_retries(batch)
            except Exception as exc:  # the thread must survive anything a send can raise
                logger.exception("context console: reporting failed")
                with self._lock:
                    self._drop_locked(len(batch), "error")
                    self.stats.last_error = repr(exc)
            finally:
                self._done(len(batch))

    def _send_with_retries(self, batch: list[dict[str, Any]]) -> None:
        options = self._options
        for attempt in range(options.max_retries + 1):
            retry_after: float | None = None
            try:
                response = self._http.post(self._url, json={"records": batch})
            except httpx.HTTPError as exc:  # refused, reset, timed out
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400 or response.status_code == 409:
                    self._count_answer(batch, response)
                    return
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code not in RETRYABLE:
                    # 401, 413, 422 on the whole batch: sending it again cannot help.
                    with self._lock:
                        self._drop_locked(len(batch), f"http_{response.status_code}")
                        self.stats.last_error = problem
                    logger.warning("context console refused %d record(s): %s", len(batch), problem)
                    return
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            with self._lock:
                self.stats.last_error = problem
            if attempt == options.max_retries or self._stop.is_set():
                break
            with self._lock:
                self.stats.retries += 1
            if self._stop.wait(backoff_delay(attempt, options, retry_after)):
                break
        with self._lock:
            self._drop_locked(len(batch), "retries_exhausted")
        logger.warning(
            "context console unreachable; dropped %d record(s): %s",
            len(batch),
            self.stats.last_error,
        )

    def _count_answer(self, batch: list[dict[str, Any]], response: httpx.Response) -> None:
        try:
            body = response.json()
        except ValueError:
            body = {}
        items = body.get("items") if isinstance(body, dict) else None
        with self._lock:
            if isinstance(items, list) and items:
                for item in items:
                    status = item.get("status") if isinstance(item, dict) else None
                    if status == "created":
                        self.stats.sent += 1
                    elif status == "duplicate":
                        self.stats.sent += 1
                        self.stats.duplicates += 1
                    else:
                        self.stats.rejected += 1
                        self.stats.last_error = (
                            f"{status}: {item.get('field')}: {item.get('detail')}"
                        )
            else:
                self.stats.sent += len(batch)
        if self._on_response is not None and isinstance(body, dict):
            try:
                self._on_response(body)
            except Exception:
                logger.exception("context console: response hook failed")
