"""Asynchronous telemetry reporting: a bounded queue, batched sends, bounded retries, a spool.

The agent's loop only ever puts a record on an in-memory queue (never blocking, never raising).
One daemon thread sends batches as `{"records": [...]}`; 429, 5xx, timeouts and refused
connections are retried with exponential backoff (honouring `Retry-After`). A batch the console
still did not take after `max_retries` goes to the on-disk spool (`context_console.spool`), and
so does everything reported after it until the spool is empty again: the spool is the queue's
tail, replayed oldest first, so the console receives each session's calls in the order they
were made. A batch is removed from the spool only once the console answered for it; a record
answered `duplicate` had arrived before (its reply was lost), which is what makes a replay safe.

What is lost is counted in `stats.dropped`, by reason: a full queue, a whole batch refused with
4xx, the spool's limits (oldest first), damage to a spool file, a spool that cannot be written.
Without a spool (`spool=False`) a batch is dropped after its retries. `flush()` waits (bounded)
until everything queued was sent, spooled or dropped; it also runs at exit, and `close()`
spools what is still queued.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

from context_console.spool import ENV_DIR, Spool, spool_settings

logger = logging.getLogger("context_console")

RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
# Requests a replay sends before the thread looks at its queue again (the queue's new records go
# to the spool behind the replayed ones, so the queue never fills while a long backlog drains).
REPLAY_REQUESTS_PER_TURN = 5

Outcome = Literal["taken", "refused", "retry"]
Item = tuple[dict[str, Any], float]  # a record and the clock's time when it was reported


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
    # The spool (module docstring). None: the environment variable, else the default:
    # CONTEXT_CONSOLE_SPOOL_DIR (the user's cache dir), ..._MAX_BYTES (64 MiB), ..._MAX_AGE
    # (seconds; 7 days). The directory is the root's subdirectory for this console and key.
    spool: bool = True
    spool_dir: str | os.PathLike[str] | None = None
    spool_max_bytes: int | None = None
    spool_max_age_seconds: float | None = None
    # Wall-clock time in seconds: the spool's ages, the stamp (`at`) of spooled records, when to
    # try the console again. Injectable so that a long outage can be simulated.
    clock: Callable[[], float] = time.time


@dataclass
class ReportingStats:
    """Counts since the console was created; `dropped` is what the console never received;
    `spooled` went to the spool and `replayed` came back out of it to the console (records of
    other processes sharing the spool included)."""

    queued: int = 0
    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    dropped: int = 0
    retries: int = 0
    spooled: int = 0
    replayed: int = 0
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
    return float(
        min(options.max_backoff_seconds, options.backoff_seconds * (2 ** min(attempt, 60)))
    )


def stamped(record: dict[str, Any], reported_at: float) -> dict[str, Any]:
    """The record with `at` set to when it was reported, unless it names its own `at`.

    Only for a record that goes to the spool before it was ever sent: a replay hours later must
    not look like a call made at arrival. A record already sent once stays as it was, so that
    the replay of one the console stored (its reply lost) is a duplicate, not a conflict.
    """
    if "at" in record:
        return record
    # timezone.utc, not datetime.UTC: the client supports Python 3.10.
    at = datetime.fromtimestamp(reported_at, timezone.utc)  # noqa: UP017
    return {**record, "at": at.isoformat()}


class Reporter:
    """Sends telemetry records to `POST {api}/telemetry`. Thread-safe; never raises from `put`.

    `spool_key` (the agent key) names the spool's directory; without it there is no spool."""

    def __init__(
        self,
        api_url: str,
        headers: dict[str, str],
        options: ReportingOptions,
        *,
        transport: httpx.BaseTransport | None = None,
        on_response: Callable[[dict[str, Any]], None] | None = None,
        spool_key: str | None = None,
    ) -> None:
        self._options = options
        self._clock = options.clock
        self._url = api_url.rstrip("/") + "/telemetry"
        self._http = httpx.Client(
            headers=headers, timeout=options.timeout_seconds, transport=transport
        )
        self._queue: queue.Queue[Item] = queue.Queue(maxsize=options.max_queue)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._delivering = threading.Lock()  # one delivery at a time (synchronous mode's callers)
        self._pending = 0  # queued + in flight
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_response = on_response
        self.stats = ReportingStats()
        self.spool: Spool | None = None
        if options.spool and spool_key is not None:
            try:
                settings = spool_settings(
                    url=api_url,
                    key=spool_key,
                    root=options.spool_dir,
                    max_bytes=options.spool_max_bytes,
                    max_age_seconds=options.spool_max_age_seconds,
                    environ=os.environ,
                )
            except RuntimeError as exc:  # no home directory to find the cache in
                logger.warning("context console: no spool (%s); set %s", exc, ENV_DIR)
            else:
                if settings.max_bytes > 0:
                    self.spool = Spool(settings, self._clock)
        # The spool holds records to send before any new one (this process's or an earlier's).
        self._backlog = self.spool is not None and not self.spool.is_empty()
        self._attempt = 0  # failed replays in a row: the backoff's exponent
        self._replay_at = self._replay_set_at = 0.0
        # Flush at exit (weakref.finalize runs its callback at interpreter exit, bounded).
        self._finalizer = weakref.finalize(self, Reporter._close_at_exit, weakref.ref(self))
        if self._backlog and not options.synchronous:
            with self._lock:
                self._start_locked()

    # --- the agent's side -------------------------------------------------------------------

    def put(self, record: dict[str, Any]) -> None:
        """Queue one record (or send it now in synchronous mode). Never raises, never blocks."""
        item = (record, self._clock())
        if self._options.synchronous:
            with self._lock:
                self.stats.queued += 1
                self._pending += 1
            try:
                self._deliver([item])
            finally:
                self._done(1)
            return
        with self._lock:
            closed = self._stop.is_set()
            if not closed:
                try:
                    self._queue.put_nowait(item)
                except queue.Full:
                    self._drop_locked(1, "queue_full")
                    return
                self.stats.queued += 1
                self._pending += 1
                self._start_locked()
        if closed:
            self._keep_or_drop([item], "closed")

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="context-console-reporter", daemon=True
            )
            self._thread.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record was sent, spooled or dropped; False if `timeout` ran
        out. The spool is replayed in the background, not waited for."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    @property
    def spooled(self) -> int:
        """Records waiting in the spool now (this process's and any other's sharing it)."""
        return 0 if self.spool is None else self.spool.waiting()

    def close(self, timeout: float | None = None) -> None:
        """Flush (bounded by `timeout`), then stop the thread; what is left goes to the spool
        (without one, it is counted dropped)."""
        self.flush(self._options.exit_flush_seconds if timeout is None else timeout)
        self._stop.set()
        thread = self._thread
        if thread is not None:
            # A send in flight ends within its timeout; its batch is then spooled, not lost.
            thread.join(timeout=self._options.timeout_seconds + 1.0)
        left: list[Item] = []
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if left:
            self._keep_or_drop(left, "closed")
            self._done(len(left))
            logger.warning(
                "context console: %d telemetry record(s) not sent at close (%s)",
                len(left),
                "dropped" if self.spool is None else "spooled",
            )
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

    def _drop(self, count: int, reason: str) -> None:
        with self._lock:
            self._drop_locked(count, reason)

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
                self._replay_guarded()
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
                self._deliver(batch)
            except Exception as exc:  # the thread must survive anything a send can raise
                logger.exception("context console: reporting failed")
                with self._lock:
                    self._drop_locked(len(batch), "error")
                    self.stats.last_error = repr(exc)
            finally:
                self._done(len(batch))

    def _deliver(self, items: list[Item]) -> None:
        """Send a batch, or spool it behind the backlog; then replay the spool if it is time."""
        with self._delivering:
            spool = self.spool
            if spool is None:
                if not self._send_with_retries([record for record, _ in items]):
                    self._drop(len(items), "retries_exhausted")
                    logger.warning(
                        "context console unreachable; dropped %d record(s): %s",
                        len(items),
                        self.stats.last_error,
                    )
                return
            if not self._backlog and not spool.is_empty():
                self._backlog = True  # another process left batches that go first
            if self._backlog:
                self._keep_or_drop(items, "spool_error")
            elif not self._send_with_retries([record for record, _ in items]):
                # Sent before: spooled as they were sent (see `stamped`).
                self._to_spool([record for record, _ in items])
                self._backlog = True
                self._attempt = self._options.max_retries
                self._schedule_replay(None)
                logger.warning(
                    "context console unreachable; spooled %d record(s): %s",
                    len(items),
                    self.stats.last_error,
                )
            self._replay_if_due()

    def _keep_or_drop(self, items: Sequence[Item], reason: str) -> None:
        """Spool records never sent (stamped with when they were reported), else drop them."""
        if self.spool is None:
            self._drop(len(items), reason)
        else:
            self._to_spool([stamped(record, at) for record, at in items])

    def _to_spool(self, records: list[dict[str, Any]]) -> None:
        spool = self.spool
        assert spool is not None
        try:
            spool.append(records)
        except OSError as exc:
            with self._lock:
                self._drop_locked(len(records), "spool_error")
                self.stats.last_error = f"spool: {exc}"
            logger.warning("context console: could not spool %d record(s): %s", len(records), exc)
            return
        with self._lock:
            self.stats.spooled += len(records)
        self._backlog = True
        # Expired and over-limit batches go now, not at the next replay: the spool stays bounded
        # while the console is down (when another process holds the lock, it does this).
        with spool.claimed() as mine:
            if mine:
                self._count_expired(spool.expire())

    def _count_expired(self, removed: dict[str, int]) -> None:
        for reason, count in removed.items():
            self._drop(count, reason)
            logger.warning("context console: spool limit, dropped %d record(s): %s", count, reason)

    def _schedule_replay(self, retry_after: float | None) -> None:
        now = self._clock()
        self._replay_set_at = now
        self._replay_at = now + backoff_delay(self._attempt, self._options, retry_after)

    def _replay_guarded(self) -> None:
        try:
            with self._delivering:
                self._replay_if_due()
        except Exception as exc:  # the thread must survive anything a replay can raise
            logger.exception("context console: replaying the spool failed")
            with self._lock:
                self.stats.last_error = repr(exc)

    def _replay_if_due(self) -> None:
        """Send the spool's oldest batches while the console takes them (a few requests per
        turn); a batch leaves the spool only once answered. Called holding `_delivering`."""
        spool = self.spool
        if spool is None or not self._backlog or self._stop.is_set():
            return
        now = self._clock()
        # Due at its time, or at once when the clock went back past when it was set.
        if self._replay_set_at <= now < self._replay_at:
            return
        with spool.claimed() as mine:
            if not mine:  # another process is replaying this spool: look again shortly
                self._attempt = 0
                self._schedule_replay(None)
                return
            self._count_expired(spool.expire())
            for _ in range(REPLAY_REQUESTS_PER_TURN):
                if self._stop.is_set():  # closing: what is left stays spooled
                    return
                chunk = spool.oldest(self._options.batch_size)
                if chunk is None:
                    self._backlog = False
                    self._attempt = 0
                    return
                if chunk.unreadable:
                    self._drop(chunk.unreadable, "spool_unreadable")
                    logger.warning(
                        "context console: %d unreadable spooled record(s) skipped",
                        chunk.unreadable,
                    )
                if chunk.records:
                    outcome, retry_after = self._send_once(chunk.records)
                    if outcome == "retry":
                        self._attempt += 1
                        self._schedule_replay(retry_after)
                        return
                    if outcome == "taken":
                        with self._lock:
                            self.stats.replayed += len(chunk.records)
                spool.remove(chunk)
                self._attempt = 0

    def _send_with_retries(self, batch: list[dict[str, Any]]) -> bool:
        """Send with retries; False when the console still did not answer for the batch."""
        options = self._options
        for attempt in range(options.max_retries + 1):
            outcome, retry_after = self._send_once(batch)
            if outcome != "retry":
                return True
            if attempt == options.max_retries or self._stop.is_set():
                break
            with self._lock:
                self.stats.retries += 1
            if self._stop.wait(backoff_delay(attempt, options, retry_after)):
                break
        return False

    def _send_once(self, batch: list[dict[str, Any]]) -> tuple[Outcome, float | None]:
        """One request: `taken` (answered, each item counted), `refused` (a 4xx for the whole
        batch: dropped and counted, since sending it again cannot help) or `retry`, with the
        server's Retry-After when it gave one."""
        try:
            response = self._http.post(self._url, json={"records": batch})
        except httpx.HTTPError as exc:  # refused, reset, timed out
            with self._lock:
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
            return "retry", None
        if response.status_code < 400 or response.status_code == 409:
            self._count_answer(batch, response)
            return "taken", None
        problem = f"HTTP {response.status_code}: {response.text[:200]}"
        with self._lock:
            self.stats.last_error = problem
        if response.status_code not in RETRYABLE:
            # 401, 413, 422 on the whole batch: sending it again cannot help.
            self._drop(len(batch), f"http_{response.status_code}")
            logger.warning("context console refused %d record(s): %s", len(batch), problem)
            return "refused", None
        return "retry", retry_after_seconds(response.headers.get("Retry-After"))

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
