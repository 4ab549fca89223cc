"""The reporter: batches, retries with backoff and Retry-After, drops and counts, never raises or
blocks the caller; flush on demand and at close. Losing records after the retries is the path
without a spool (`spool=False`); test_spool.py has the spool."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from context_console import Console, ReportingOptions
from context_console.reporting import backoff_delay, retry_after_seconds

USAGE = {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}
FAST = ReportingOptions(max_retries=2, backoff_seconds=0.05, max_backoff_seconds=0.1)
FAST_UNSPOOLED = replace(FAST, spool=False)


def report_n(console: Console, n: int, session: str = "s") -> float:
    """Report n records; returns the longest time one report() call took."""
    handle = console.session(session)
    slowest = 0.0
    for _ in range(n):
        start = time.monotonic()
        handle.report(USAGE, model="claude-sonnet-4-6")
        slowest = max(slowest, time.monotonic() - start)
    return slowest


def test_records_are_sent_in_batches_with_turn_and_call_numbered(scripted):
    server = scripted()
    console = Console(server.url, "key", reporting=ReportingOptions(linger_seconds=0.2))
    report_n(console, 25)
    assert console.flush(5)
    records = server.records()
    assert len(records) == 25
    assert len(server.received) < 25  # batched, not one request per record
    assert [r["call"] for r in records] == list(range(25))
    assert {r["turn"] for r in records} == {0}
    assert all(body.get("records") for _, body in server.received)
    assert console.stats.sent == 25 and console.dropped == 0
    console.close()


def test_a_500_is_retried_and_the_record_lands_once(scripted):
    def script(number, body):
        if number == 1:
            return 500, {}, {"detail": "boom"}
        return 200, {}, {"items": [{"index": 0, "status": "created"}]}

    server = scripted(script)
    console = Console(server.url, "key", reporting=FAST)
    report_n(console, 1)
    assert console.flush(5)
    assert len(server.received) == 2
    assert console.stats.sent == 1 and console.stats.retries == 1 and console.dropped == 0
    console.close()


def test_retry_after_is_honoured_on_429(scripted):
    def script(number, body):
        if number == 1:
            return 429, {"Retry-After": "0.4"}, {"detail": "slow down"}
        return 200, {}, {"items": [{"index": 0, "status": "created"}]}

    server = scripted(script)
    console = Console(server.url, "key", reporting=FAST)
    report_n(console, 1)
    assert console.flush(5)
    (first, _), (second, _) = server.received
    assert second - first >= 0.35  # the server's 0.4 s, not the 0.05 s backoff
    assert console.dropped == 0
    console.close()


def test_a_console_that_refuses_connections_costs_nothing_and_counts_drops(refused_url):
    console = Console(refused_url, "key", reporting=FAST_UNSPOOLED)
    slowest = report_n(console, 7)
    assert slowest < 0.25  # a queue put (and one thread start), never a network wait
    assert console.flush(10)
    assert console.dropped == 7
    assert console.stats.drop_reasons == {"retries_exhausted": 7}
    assert "ConnectError" in (console.stats.last_error or "")
    console.close()


def test_a_console_answering_500_forever_drops_after_bounded_retries(scripted):
    server = scripted(lambda n, body: (503, {}, {"detail": "down"}))
    console = Console(server.url, "key", reporting=FAST_UNSPOOLED)
    report_n(console, 3)
    start = time.monotonic()
    assert console.flush(10)
    assert time.monotonic() - start < 3
    assert console.dropped == 3
    assert len(server.received) == FAST.max_retries + 1  # one batch, tried 1 + max_retries times
    console.close()


def test_a_slow_console_times_out_and_the_records_are_counted_lost(scripted):
    server = scripted(delay=1.0)
    options = ReportingOptions(
        max_retries=1, backoff_seconds=0.05, timeout_seconds=0.2, spool=False
    )
    console = Console(server.url, "key", reporting=options)
    slowest = report_n(console, 2)
    assert slowest < 0.25  # the timeout is 0.2 s per try, with retries: never waited for
    assert console.flush(10)
    assert console.dropped == 2
    assert "Timeout" in (console.stats.last_error or "")
    console.close()


def test_a_full_queue_drops_the_new_record_and_counts_it(scripted):
    server = scripted(delay=0.5)
    options = ReportingOptions(max_queue=3, batch_size=1, linger_seconds=0)
    console = Console(server.url, "key", reporting=options)
    report_n(console, 10)
    assert console.stats.drop_reasons.get("queue_full", 0) >= 6
    assert console.flush(10)
    assert console.stats.sent + console.dropped == 10
    console.close()


def test_a_whole_batch_refused_with_4xx_is_not_retried(scripted):
    server = scripted(lambda n, body: (401, {}, {"detail": "bad key"}))
    console = Console(server.url, "key", reporting=FAST)
    report_n(console, 2)
    assert console.flush(5)
    assert len(server.received) == 1
    assert console.stats.drop_reasons == {"http_401": 2}
    console.close()


def test_items_the_console_rejects_are_counted_not_dropped(scripted):
    def script(number, body):
        return (
            200,
            {},
            {
                "items": [
                    {"index": 0, "status": "created"},
                    {"index": 1, "status": "invalid", "field": "usage", "detail": "bad"},
                ]
            },
        )

    server = scripted(script)
    console = Console(server.url, "key", reporting=ReportingOptions(linger_seconds=0.3))
    report_n(console, 2)
    assert console.flush(5)
    assert console.stats.sent == 1 and console.stats.rejected == 1 and console.dropped == 0
    console.close()


def test_close_flushes_what_is_queued(scripted):
    server = scripted()
    console = Console(server.url, "key")
    report_n(console, 5)
    console.close()
    assert len(server.records()) == 5


def test_synchronous_mode_sends_inline(scripted):
    server = scripted()
    console = Console(server.url, "key", reporting=ReportingOptions(synchronous=True))
    report_n(console, 2)
    assert len(server.records()) == 2
    console.close()


@pytest.mark.parametrize(
    ("header", "expected"),
    [("3", 3.0), ("0.5", 0.5), ("", None), (None, None), ("soon", None), ("-4", 0.0)],
)
def test_retry_after_parsing(header, expected):
    assert retry_after_seconds(header) == expected


def test_retry_after_as_an_http_date():
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


def test_backoff_grows_then_caps_and_retry_after_wins():
    options = ReportingOptions(backoff_seconds=0.5, max_backoff_seconds=3)
    assert [backoff_delay(a, options, None) for a in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_delay(0, options, 7.0) == 7.0
