"""CPU of ingest requests in one process: the WSGI app called directly, no HTTP, no clients.

`python -m bench.inprocess [--kind single|batch] [--requests N] [--profile out.prof] [--split]`
creates a scratch database (`BENCH_DATABASE_URL`, default `console_inprocess`), migrates it, issues a key
and sends prebuilt requests straight to Django's WSGI handler with the bench's settings. It prints
the Python CPU of this process and the PostgreSQL backend's CPU (from `/proc`, so the server must
run on this machine) per request, and with `--profile` writes a cProfile of the measured part.

On a shared machine wall-clock figures scatter; CPU per request is what separates two versions
of the code (run each a few times, alternated). This is a developer's tool, not a bar.

`--ab SETTING` compares a boolean Django setting on and off in one process, blocks of requests
alternating (`--block`), the evidence when runs of two versions scatter more than they differ.

`--split` prints where a request's CPU goes: the thread CPU spent inside each function of
`SPLIT` (inclusive, a recursive call counted once), per request. Samplers count a thread waiting
on PostgreSQL as busy and cProfile quadruples the cost of small calls; this adds ~1 µs a call.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import os
import resource
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/console_inprocess"

# `--split`: (module, qualified name) of the ingest path's steps, outermost first.
SPLIT = (
    ("django.core.handlers.wsgi", "WSGIHandler.__call__"),
    ("ninja.operation", "Operation.run"),
    ("ninja.operation", "Operation._run_authentication"),
    ("telemetry.ingest.pipeline", "store_records"),
    ("telemetry.validation", "validate_items"),
    ("telemetry.idempotency", "payload_hash"),
    ("telemetry.usage", "normalize_usage"),
    ("telemetry.session_state", "lock_sessions"),
    ("telemetry.ingest.writers.pg_batch", "store"),
    ("telemetry.ingest.writers.pg_single", "store"),
    ("telemetry.ingest.known_sessions", "store_one"),
    ("telemetry.costing", "call_values"),
    ("telemetry.ingest.new_rows", "copy_rows"),
    ("telemetry.ingest.call_keys", "insert_and_derive"),
    ("telemetry.ingest.turn_derivation", "derive_turns"),
    ("telemetry.ingest.writers.steps", "refresh_sessions"),
    ("telemetry.session_state", "figures_statement"),
    ("telemetry.keys", "find_active_key"),
    ("telemetry.api", "ingest_payload"),
    ("telemetry.rollups", "add_calls_statement"),
    ("telemetry.ingest.statements", "run_together"),
    ("telemetry.ingest.statements", "run"),
    ("psycopg.cursor", "Cursor.execute"),
    ("telemetry.otlp.views", "_decode_and_map"),
    ("telemetry.otlp.wire", "decode_request"),
    ("telemetry.otlp.mapping", "map_spans"),
    ("telemetry.otlp.store", "store_mapped"),
    ("telemetry.otlp.store", "_number_turns"),
    ("telemetry.otlp.store", "_records"),
    ("telemetry.otlp.store", "_stored_positions"),
    ("telemetry.otlp.store", "_merged_metadata"),
    ("telemetry.otlp.same_request", "keep_richer"),
    ("django.db.transaction", "Atomic.__enter__"),
    ("django.db.transaction", "Atomic.__exit__"),
)


class CpuSplit:
    """Inclusive thread CPU and calls per wrapped function (`wrap`), for `--split`."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self.clock = clock
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._active: set[str] = set()

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, timed under `name`; a call inside an outer call of it is not timed again."""
        self.cpu.setdefault(name, 0.0)
        self.calls.setdefault(name, 0)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if name in self._active:
                return function(*args, **kwargs)
            self._active.add(name)
            began = self.clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu[name] += self.clock() - began
                self.calls[name] += 1
                self._active.discard(name)

        return timed

    def install(self, targets: Iterable[tuple[str, str]]) -> None:
        """Wrap each target where it is defined and where a module imported it by name."""
        for module_name, qualified in targets:
            module = importlib.import_module(module_name)
            *path, attribute = qualified.split(".")
            owner: Any = module
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, attribute)
            timed = self.wrap(qualified, original)
            setattr(owner, attribute, timed)
            if path:
                continue
            for other in list(sys.modules.values()):
                if getattr(other, attribute, None) is original:
                    setattr(other, attribute, timed)

    def reset(self) -> None:
        self.cpu = dict.fromkeys(self.cpu, 0.0)
        self.calls = dict.fromkeys(self.calls, 0)

    def report(self, requests: int) -> str:
        lines = [f"{'ms a request':>12}  {'calls':>7}  function (inclusive thread CPU)"]
        for name, seconds in sorted(self.cpu.items(), key=lambda item: -item[1]):
            lines.append(
                f"{seconds * 1000 / requests:12.3f}  {self.calls[name] / requests:7.1f}  {name}"
            )
        return "\n".join(lines)


def _backend_cpu_s(pid: int) -> float:
    """utime + stime of a local PostgreSQL backend, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds every process of the machine has used so far (not idle, not iowait), from
    /proc/stat: beside this process and its backend, PostgreSQL's WAL writer, checkpointer and
    autovacuum work for the same requests."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _environ(
    path: str, body: bytes, token: str, content_type: str = "application/json"
) -> dict[str, Any]:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }


def _bodies(kind: str, count: int, label: str, size: int = 1_000) -> Iterable[bytes]:
    from bench.data import batch_body, batch_records, record, single_body

    if kind == "otlp":  # exports of bench.otlp.BATCH spans, as P10's SDK clients send them
        from bench.otlp import export_bodies

        yield from export_bodies(label, count)
        return
    if kind in ("single", "noop"):
        sessions = 8
        for i in range(count):
            yield single_body(record(f"{label}-s{i % sessions}", i // sessions))
    else:
        for i in range(count):  # `size` records, in `size` sessions when small (a few agents)
            if size < 10:
                yield batch_body([record(f"{label}-s{j}", i) for j in range(size)])
            else:  # as make bench's P1 posts them
                yield batch_body(batch_records(f"{label}-b{i % 4}", i // 4, size))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("single", "batch", "noop", "otlp"), default="single")
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=1_000, help="records a batch request")
    parser.add_argument("--threads", type=int, default=1, help="threads sending at once")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile of the measured requests here")
    parser.add_argument("--sample", help="write pyinstrument's text report (CPU samples) here")
    parser.add_argument(
        "--split", action="store_true", help="print each ingest step's CPU a request (SPLIT)"
    )
    parser.add_argument(
        "--ab",
        metavar="SETTING",
        help="compare a boolean Django setting on and off in this process: each round sends "
        "--block requests with it on, then off (then off, then on), and prints both",
    )
    parser.add_argument("--block", type=int, default=100, help="requests a block (--ab)")
    parser.add_argument("--keep-db", action="store_true", help="leave the database behind")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args(argv)

    from bench.services import Cleanup, create_database

    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": args.database_url,
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "API_RATE_LIMIT_PER_MINUTE": str(10**9),
            "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//",
            "LOG_LEVEL": "WARNING",
            "COMPACTION_AUTO_ENQUEUE": "false",
            # one backend for the whole run: its CPU is read from /proc at both ends of a round
            "DB_CONN_MAX_AGE": "86400",
        }
    )
    cleanup = Cleanup()
    try:
        create_database(args.database_url, cleanup, keep=args.keep_db)
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from telemetry.keys import create_agent_key
        from telemetry.seeding import ensure_defaults

        call_command("migrate", verbosity=0)
        ensure_defaults()
        issued = create_agent_key(profile_name="bench", name="bench")
        from console.wsgi import application as app  # as gunicorn loads it (console.collector)

        path = {"noop": "/bench/noop", "otlp": "/api/v1/otlp/v1/traces"}.get(
            args.kind, "/api/v1/telemetry"
        )
        content_type = "application/x-protobuf" if args.kind == "otlp" else "application/json"
        statuses: dict[str, int] = {}

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            statuses[status] = statuses.get(status, 0) + 1
            return lambda data: None

        def send_one(body: bytes) -> None:
            for _ in app(_environ(path, body, issued.plaintext, content_type), start):
                pass

        def send(bodies: list[bytes]) -> None:
            if args.threads == 1:
                for body in bodies:
                    send_one(body)
                return
            # several threads at once, as gunicorn's gthread workers run requests
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(send_one, bodies))

        split = None
        if args.split:
            split = CpuSplit()
            split.install(SPLIT)
        send(list(_bodies(args.kind, args.warmup, "warm", args.batch_size)))
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        sampler = None
        if args.sample:
            from pyinstrument import Profiler

            sampler = Profiler(interval=0.0002, async_mode="disabled")
        if args.ab:
            _compare(args, send, backend, statuses)
            return
        profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not waits
        for r in range(args.rounds):
            bodies = list(_bodies(args.kind, args.requests, f"r{r}", args.batch_size))
            statuses.clear()
            if split is not None:
                split.reset()
            py0 = resource.getrusage(resource.RUSAGE_SELF)
            be0 = _backend_cpu_s(backend)
            machine0 = _machine_busy_s()
            if profiler is not None:
                profiler.enable()
            if sampler is not None:
                sampler.start()
            send(bodies)
            if sampler is not None:
                sampler.stop()
            if profiler is not None:
                profiler.disable()
            py1 = resource.getrusage(resource.RUSAGE_SELF)
            be1 = _backend_cpu_s(backend)
            machine = (_machine_busy_s() - machine0) * 1000
            py = (py1.ru_utime + py1.ru_stime - py0.ru_utime - py0.ru_stime) * 1000
            be = (be1 - be0) * 1000
            n = len(bodies)
            print(
                f"round {r}: {n} {args.kind} requests {statuses}: "
                f"Python {py / n:.3f} ms, backend {be / n:.3f} ms, total {(py + be) / n:.3f} ms"
                f" a request; the machine (every process) {machine / n:.3f} ms",
                flush=True,
            )
            if split is not None:
                print(split.report(n), flush=True)

        if profiler is not None:
            profiler.dump_stats(args.profile)
        if sampler is not None:
            Path(args.sample).write_text(sampler.output_text(unicode=False, show_all=False))
    finally:
        from django.db import connections

        connections.close_all()
        cleanup.run()


def _compare(
    args: argparse.Namespace,
    send: Callable[[list[bytes]], None],
    backend: int,
    statuses: dict[str, int],
) -> None:
    """`--ab`: blocks of requests alternate between the setting on and off, in this process and
    on one backend, so a machine whose speed drifts (a shared host) slows both alike; the CPU of
    each side is summed over its blocks (this thread's, and the backend's from `/proc`). Every
    request must succeed (2xx), else it exits with the statuses."""
    from django.conf import settings

    statuses.clear()
    cpu = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
    for r in range(args.rounds):
        for b, value in enumerate((True, False, False, True)):
            setattr(settings, args.ab, value)
            bodies = list(_bodies(args.kind, args.block, f"ab{r}-{b}", args.batch_size))
            be0, py0 = _backend_cpu_s(backend), time.thread_time()
            send(bodies)
            py1, be1 = time.thread_time(), _backend_cpu_s(backend)
            side = cpu[value]
            side[0] += py1 - py0
            side[1] += be1 - be0
            side[2] += len(bodies)
    failed = {status: n for status, n in statuses.items() if not status.startswith("20")}
    if failed:
        raise SystemExit(f"--ab: requests failed: {statuses}")
    for value in (True, False):
        py, be, n = cpu[value]
        print(
            f"{args.ab}={value}: {n} {args.kind} requests: Python {py / n * 1000:.3f} ms, "
            f"backend {be / n * 1000:.3f} ms, total {(py + be) / n * 1000:.3f} ms a request",
            flush=True,
        )


if __name__ == "__main__":
    main()
