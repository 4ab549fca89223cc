"""The spool: reports the console did not take wait on disk, bounded, and arrive exactly once and
in order when it answers again; across a close and a new process too, and with two processes on
one spool. The console is a scripted server that stores records the way the real ingest does:
idempotent on (session, turn, call) or `request_id`, the same payload again a duplicate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import context_console
from context_console import Console, ReportingOptions
from context_console.spool import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_BYTES,
    Spool,
    SpoolFile,
    decode_batch,
    directory_name,
    encode_batch,
    key_fingerprint,
    plan_expiry,
    spool_settings,
)

USAGE = {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5}
KEY = "clc_secret_key_0123456789"
T0 = 1_780_000_000.0  # the fake clock's start (2026)


class FakeClock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self, now: float = T0) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@dataclass
class Ingest:
    """The console's ingest as the reporter sees it: answers per item, stores each call once.
    `up` False answers 503; `lose_replies` stores the batch, then answers 503 (the reply lost)."""

    up: bool = True
    lose_replies: int = 0
    stored: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[Any, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, number: int, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            if not self.up:
                return 503, {}, {"detail": "down"}
            items = [{"index": i, "status": self._store(r)} for i, r in enumerate(body["records"])]
            if self.lose_replies:
                self.lose_replies -= 1
                return 503, {}, {"detail": "stored, but the reply is lost"}
            return 200, {}, {"items": items}

    def _store(self, record: dict[str, Any]) -> str:
        key = record.get("request_id") or (record["session_id"], record["turn"], record["call"])
        payload = json.dumps(record, sort_keys=True)
        if key in self.keys:
            return "duplicate" if self.keys[key] == payload else "conflict"
        self.keys[key] = payload
        self.stored.append(record)
        return "created"

    def calls(self, session: str = "s") -> list[int]:
        return [r["call"] for r in self.stored if r["session_id"] == session]


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def options(clock: Callable[[], float] = time.time, **overrides: Any) -> ReportingOptions:
    base: dict[str, Any] = {
        "max_retries": 1,
        "backoff_seconds": 0.02,
        "max_backoff_seconds": 10.0,
        "timeout_seconds": 2.0,
        "linger_seconds": 0.01,
        "clock": clock,
    }
    return ReportingOptions(**{**base, **overrides})


def spool_files(console: Console) -> list[Path]:
    spool = console.reporter.spool
    assert spool is not None
    return sorted(p for p in spool.directory.iterdir() if p.suffix == ".jsonl")


def test_a_ten_minute_outage_at_one_call_a_second_loses_nothing(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    clock = FakeClock()
    console = Console(server.url, KEY, reporting=options(clock))
    session = console.session("s")
    session.report(USAGE, model="m")
    assert console.flush(10)  # tried, retried, spooled as it was sent
    for _ in range(599):
        clock.advance(1.0)
        session.report(USAGE, model="m")
    assert console.flush(30)
    assert console.spooled == 600 and console.dropped == 0
    assert console.stats.spooled == 600 and ingest.stored == []
    attempts = len(server.received)

    ingest.up = True
    clock.advance(60.0)  # past the longest backoff between tries
    wait_until(lambda: console.spooled == 0)
    assert ingest.calls() == list(range(600))  # each once, in order
    assert len(server.received) - attempts <= 4  # replayed in batches of up to 200
    # The first record was on the wire before the outage was known: it is replayed unchanged
    # (the server stamps it). The others carry the moment they were reported.
    assert "at" not in ingest.stored[0]
    assert [datetime.fromisoformat(r["at"]).timestamp() for r in ingest.stored[1:]] == [
        T0 + i for i in range(1, 600)
    ]
    assert console.dropped == 0 and console.stats.rejected == 0
    assert console.stats.sent == 600 and console.stats.replayed == 600
    assert spool_files(console) == []
    console.close()


def test_new_reports_wait_behind_the_spool_so_order_holds_after_recovery(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    clock = FakeClock()
    console = Console(server.url, KEY, reporting=options(clock))
    session = console.session("s")
    for _ in range(5):
        session.report(USAGE, model="m")
    assert console.flush(10)
    ingest.up = True
    for _ in range(5):  # the console answers again, but these must not overtake the spool
        session.report(USAGE, model="m")
    assert console.flush(10)
    clock.advance(60.0)
    wait_until(lambda: console.spooled == 0 and len(ingest.stored) == 10)
    assert ingest.calls() == list(range(10))
    console.close()


def test_a_batch_stored_but_unanswered_is_replayed_as_a_duplicate_not_a_second_call(scripted):
    ingest = Ingest(lose_replies=3)  # the first try and its retry, then the first replay
    server = scripted(ingest)
    clock = FakeClock()
    console = Console(server.url, KEY, reporting=options(clock))
    session = console.session("s")
    for _ in range(3):
        session.report(USAGE, model="m")
    assert console.flush(10)

    def replayed() -> bool:
        clock.advance(60.0)  # past every backoff, however many tries it takes
        return console.spooled == 0

    wait_until(replayed)
    assert ingest.lose_replies == 0 and ingest.calls() == [0, 1, 2]
    # Answered only when all three were stored already: each a duplicate, none a conflict.
    assert console.stats.sent == console.stats.duplicates == 3
    assert console.stats.rejected == 0 and console.dropped == 0
    console.close()


def test_a_full_spool_drops_the_oldest_first_and_counts_them(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    clock = FakeClock()
    limit = 2_000
    console = Console(
        server.url, KEY, reporting=options(clock, synchronous=True, spool_max_bytes=limit)
    )
    session = console.session("s")
    for _ in range(40):
        clock.advance(1.0)
        session.report(USAGE, model="m")
    files = spool_files(console)
    assert sum(p.stat().st_size for p in files) <= limit
    waiting = console.spooled
    assert 0 < waiting < 40
    assert console.dropped == 40 - waiting
    assert console.stats.drop_reasons == {"spool_full": 40 - waiting}

    ingest.up = True
    clock.advance(60.0)
    session.report(USAGE, model="m")  # synchronous: the next report replays
    wait_until(lambda: console.spooled == 0)
    # The newest survived (the last report's file pushed one more out), in order.
    assert ingest.calls() == list(range(console.dropped, 41))
    assert console.dropped in (40 - waiting, 41 - waiting)
    console.close()


def test_spooled_reports_older_than_the_age_limit_are_dropped_and_counted(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    clock = FakeClock()
    console = Console(
        server.url,
        KEY,
        reporting=options(clock, synchronous=True, spool_max_age_seconds=3600),
    )
    session = console.session("s")
    for _ in range(5):
        session.report(USAGE, model="m")
    clock.advance(3601.0)
    for _ in range(3):
        session.report(USAGE, model="m")
    assert console.spooled == 3
    assert console.stats.drop_reasons == {"spool_age": 5}
    ingest.up = True
    clock.advance(60.0)
    console.close()
    revived = Console(server.url, KEY, reporting=options(clock))
    wait_until(lambda: revived.spooled == 0)
    assert ingest.calls() == [5, 6, 7]
    revived.close()


def test_close_spools_what_is_left_and_the_next_console_replays_it(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    first = Console(
        server.url,
        KEY,
        reporting=options(batch_size=2, max_retries=0, exit_flush_seconds=0),
    )
    session = first.session("s")
    for _ in range(7):
        session.report(USAGE, model="m")
    first.close()  # no time to flush: on the wire or still queued, all of them are spooled
    assert first.dropped == 0 and first.spooled == 7
    ingest.up = True
    second = Console(server.url, KEY, reporting=options())  # reports nothing: replays anyway
    wait_until(lambda: second.spooled == 0)
    assert ingest.calls() == list(range(7))
    assert second.stats.replayed == 7
    second.close()
    other_key = Console(server.url, KEY + "x", reporting=options())
    assert other_key.spooled == 0  # another key's spool is another directory
    other_key.close()


def test_a_torn_spool_file_loses_only_its_torn_record(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    first = Console(server.url, KEY, reporting=options(synchronous=True, max_retries=0))
    session = first.session("s")
    for _ in range(6):
        session.report(USAGE, model="m")
    first.close()
    files = spool_files(first)
    assert len(files) == 6
    # A crash mid-write of a two-record file: the first record whole, the second torn.
    torn = files[2]
    whole = torn.read_bytes()
    extra = whole.replace(b'"call":2', b'"call":99')
    torn.write_bytes(whole + extra[: len(extra) // 2])
    torn.rename(torn.with_name(torn.name.replace("-1.jsonl", "-2.jsonl")))
    files[4].write_bytes(b"\x00\x00garbage")  # a damaged file
    ingest.up = True
    second = Console(server.url, KEY, reporting=options())
    wait_until(lambda: second.spooled == 0)
    assert ingest.calls() == [0, 1, 2, 3, 5]
    assert second.stats.drop_reasons == {"spool_unreadable": 2}
    second.close()


WRITER = """
import sys
from context_console import Console, ReportingOptions
url, key, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
console = Console(url, key, reporting=ReportingOptions(max_retries=0, linger_seconds=0.001))
session = console.session(name)
for _ in range(count):
    session.report({"input_tokens": 1, "output_tokens": 1}, model="m")
console.close()
assert console.dropped == 0, console.stats
"""

REPLAYER = """
import sys, time
from context_console import Console, ReportingOptions
url, key = sys.argv[1], sys.argv[2]
console = Console(url, key, reporting=ReportingOptions(batch_size=7))
deadline = time.monotonic() + 60
while console.spooled and time.monotonic() < deadline:
    time.sleep(0.05)
console.close()
print(console.stats.replayed)
"""


def run_all(script: str, argvs: list[list[str]]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(context_console.__file__).parents[1])}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv], env=env, stdout=subprocess.PIPE, text=True
        )
        for argv in argvs
    ]
    outputs = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        outputs.append(out)
    return outputs


def test_two_processes_on_one_spool_neither_corrupt_nor_double_send(scripted):
    ingest = Ingest(up=False)
    server = scripted(ingest, delay=0.05)
    run_all(WRITER, [[server.url, KEY, name, "150"] for name in ("a", "b")])
    ingest.up = True
    before = len(server.records())
    replayed = run_all(REPLAYER, [[server.url, KEY], [server.url, KEY]])
    # Every record sent exactly once (not merely stored once), each process's in its order.
    sent = server.records()[before:]
    assert len(sent) == 300
    assert sum(int(n) for n in replayed) == 300
    assert ingest.calls("a") == list(range(150)) and ingest.calls("b") == list(range(150))


def test_a_spool_that_cannot_be_written_counts_the_records_dropped(scripted, tmp_path):
    ingest = Ingest(up=False)
    server = scripted(ingest)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    console = Console(
        server.url, KEY, reporting=options(synchronous=True, max_retries=0, spool_dir=blocker)
    )
    console.session("s").report(USAGE, model="m")  # never raises
    assert console.dropped == 1 and console.stats.drop_reasons == {"spool_error": 1}
    console.close()


def test_the_spool_can_be_turned_off(scripted):
    server = scripted(Ingest(up=False))
    for reporting in (options(spool=False), options(spool_max_bytes=0)):
        console = Console(server.url, KEY, reporting=reporting)
        assert console.reporter.spool is None
        console.close()


# --- the pure parts -------------------------------------------------------------------------


def test_settings_take_the_argument_then_the_environment_then_the_default(tmp_path):
    url = "https://console.example.com:8443/api/v1"
    defaults = spool_settings(
        url=url, key=KEY, root=None, max_bytes=None, max_age_seconds=None, environ={}
    )
    assert defaults.max_bytes == DEFAULT_MAX_BYTES == 64 * 1024 * 1024
    assert defaults.max_age_seconds == DEFAULT_MAX_AGE_SECONDS == 7 * 24 * 3600
    assert defaults.directory.parent.parts[-2:] == ("context-console", "spool")
    environ = {
        "CONTEXT_CONSOLE_SPOOL_DIR": str(tmp_path),
        "CONTEXT_CONSOLE_SPOOL_MAX_BYTES": "1000",
        "CONTEXT_CONSOLE_SPOOL_MAX_AGE": "60",
    }
    from_env = spool_settings(
        url=url, key=KEY, root=None, max_bytes=None, max_age_seconds=None, environ=environ
    )
    assert (from_env.directory.parent, from_env.max_bytes, from_env.max_age_seconds) == (
        tmp_path,
        1000,
        60.0,
    )
    given_ = spool_settings(
        url=url, key=KEY, root=tmp_path / "x", max_bytes=5, max_age_seconds=6, environ=environ
    )
    assert (given_.directory.parent, given_.max_bytes, given_.max_age_seconds) == (
        tmp_path / "x",
        5,
        6.0,
    )


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "inf"])
def test_a_bad_limit_in_the_environment_is_refused_by_name(value):
    with pytest.raises(ValueError, match="CONTEXT_CONSOLE_SPOOL_MAX_AGE"):
        spool_settings(
            url="http://h",
            key=KEY,
            root=None,
            max_bytes=None,
            max_age_seconds=None,
            environ={"CONTEXT_CONSOLE_SPOOL_MAX_AGE": value},
        )


@given(
    url=st.sampled_from(["http://127.0.0.1:8000", "https://c.example/x", "http://[::1]:9/"]),
    secret=st.text(),
)
def test_the_directory_names_the_console_and_a_fingerprint_never_the_key(url, secret):
    key = "clc_" + secret
    name = directory_name(url, key)
    assert name.endswith("-" + key_fingerprint(key))
    assert len(key_fingerprint(key)) == 16
    assert "/" not in name and "\\" not in name and ":" not in name
    assert key not in name


records_strategy = st.lists(
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(st.integers(), st.text(), st.none(), st.floats(allow_nan=False)),
        max_size=4,
    ),
    max_size=6,
)


@given(records=records_strategy, cut=st.integers(min_value=0))
def test_a_torn_batch_keeps_every_whole_record_before_the_tear(records, cut):
    data = encode_batch(records)
    torn = data[: cut % (len(data) + 1)]
    decoded, unreadable = decode_batch(torn)
    whole_lines = torn.count(b"\n")
    # Every record whose line is whole, in order; the torn one (if any) skipped, or whole but
    # for its newline and then kept.
    assert decoded in (records[:whole_lines], records[: whole_lines + 1])
    assert unreadable + len(decoded) <= whole_lines + 1 and unreadable <= 1
    assert decode_batch(data) == (records, 0)


files_strategy = st.lists(
    st.tuples(st.integers(0, 10**10), st.integers(1, 5), st.integers(1, 500)), max_size=30
)


@given(
    entries=files_strategy,
    now=st.integers(0, 2 * 10**10),
    max_bytes=st.integers(0, 5_000),
    max_age=st.integers(0, 20),
)
def test_expiry_keeps_the_newest_within_both_limits(entries, now, max_bytes, max_age):
    files = [
        SpoolFile(
            name=f"{stamp:020d}-00000000-{i:010d}-{n}.jsonl", stamp_ns=stamp, records=n, size=s
        )
        for i, (stamp, n, s) in enumerate(entries)
    ]
    ordered = sorted(files, key=lambda f: f.name)
    too_old, too_big = plan_expiry(files, now_ns=now, max_bytes=max_bytes, max_age_seconds=max_age)
    removed = too_old + too_big
    kept = ordered[len(removed) :]
    assert removed == ordered[: len(removed)]  # oldest first: the survivors are the newest
    assert sum(f.size for f in kept) <= max_bytes
    assert all(f.stamp_ns >= now - max_age * 10**9 for f in kept)
    assert all(f.stamp_ns < now - max_age * 10**9 for f in too_old)
    if too_big:  # nothing removed for size that did not have to go
        assert sum(f.size for f in kept) + too_big[-1].size > max_bytes


def test_a_writer_s_batches_sort_in_write_order_when_its_clock_goes_back(tmp_path):
    times = iter([100.0, 50.0, 50.0, 10.0])
    settings = spool_settings(
        url="http://h", key=KEY, root=tmp_path, max_bytes=None, max_age_seconds=None, environ={}
    )
    spool = Spool(settings, clock=lambda: next(times))
    for call in range(4):
        spool.append([{"call": call}])
    with spool.claimed() as mine:
        assert mine
        chunk = spool.oldest(100)
    assert chunk is not None and [r["call"] for r in chunk.records] == [0, 1, 2, 3]


def test_a_replay_request_joins_the_oldest_batches_up_to_its_limits(tmp_path):
    settings = spool_settings(
        url="http://h", key=KEY, root=tmp_path, max_bytes=None, max_age_seconds=None, environ={}
    )
    spool = Spool(settings)
    for call in range(0, 9, 3):
        spool.append([{"call": c} for c in range(call, call + 3)])
    with spool.claimed() as mine:
        assert mine
        by_records, by_bytes, one = (
            spool.oldest(6),
            spool.oldest(100, max_bytes=40),
            spool.oldest(1),
        )
    assert by_records is not None and [r["call"] for r in by_records.records] == list(range(6))
    assert by_bytes is not None and [r["call"] for r in by_bytes.records] == [0, 1, 2]
    assert one is not None and len(one.files) == 1  # a batch is never split
