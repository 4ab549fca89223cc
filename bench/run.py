"""`make bench`: the product measured against raw baselines taken in the same run.

Run: `python -m bench.run [--smoke] [--runs N] [--out PATH]`. Needs PostgreSQL
(`BENCH_DATABASE_URL`, default postgres://postgres@127.0.0.1:5432/console_bench; the bench creates
and drops that database) and RabbitMQ (`BENCH_BROKER_URL`, default amqp://guest:guest@127.0.0.1//).

It starts gunicorn with the production settings (DEBUG off; `bench.settings` only adds the
B_noop route) and a Celery worker on its own queue, measures the baselines B_* and P1–P9 of
issue 7, prints the table with PASS/MISS per bar and writes every figure to
`var/bench/latest.json`. Throughputs are the median of `--runs` runs after a warm-up; latencies
are pooled over the measured runs (p50/p95/p99). `--smoke` uses tiny sizes and one run, to
prove the harness works (tests/db/test_bench_smoke.py); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import bulk
from bench.alerts import measure_pal
from bench.cache import measure_p12
from bench.imports import measure_p11
from bench.load import LoadResult, Request, latency_summary, median, run_load, sequential
from bench.memory import measure_p13
from bench.otlp import measure_p10
from bench.overview import measure_overview
from bench.pages import measure_pages
from bench.services import (
    DEFAULT_BROKER_URL,
    DEFAULT_DATABASE_URL,
    ROOT,
    Cleanup,
    Started,
    broker_reachable,
    create_database,
    database_name,
    pool_children,
    postgres_reachable,
    reset_peak_rss,
    start_gunicorn,
    start_worker,
    status_kb,
)

# B_copy's COPYs per run and B_noop's requests per P2 request: a baseline run about as long as
# the run it is paired with (each ~4x faster), so both see the same stretch of a shared machine.
COPY_REPEATS = 4
NOOP_REPEATS = 4
REPORTED_CALLS = 40  # calls the compaction template session has reported (see `transcript`)


@dataclass(frozen=True)
class Sizes:
    runs: int
    core_runs: int
    p1_clients: int
    p1_posts: int  # per client and run
    p1_batch: int
    p2_clients: int
    p2_requests: int  # per client and run
    b_row_rows: int
    p3_turns: int
    p3_small_turns: int
    p5_sessions: int
    p5_small_sessions: int
    page_requests: int
    transcript_messages: int
    result_chars: int
    p8_samples: int
    p13_requests: int  # maximal OTLP exports
    p13_items: int  # per export (0: OTLP_MAX_ITEMS_PER_EXPORT)
    p13_bytes: int  # inflated per export (0: 95 % of OTLP_MAX_DECODED_BYTES)

    @classmethod
    def full(cls, runs: int) -> Sizes:
        return cls(
            runs=runs,
            core_runs=5,
            p1_clients=4,
            p1_posts=5,
            p1_batch=1_000,
            p2_clients=8,
            p2_requests=150,
            b_row_rows=2_000,
            p3_turns=100_000,
            p3_small_turns=1_000,
            p5_sessions=100_000,
            p5_small_sessions=1_000,
            page_requests=30,
            transcript_messages=10_000,
            result_chars=1_000,
            p8_samples=20,
            p13_requests=100,
            p13_items=0,
            p13_bytes=0,
        )

    @classmethod
    def smoke(cls) -> Sizes:
        return cls(
            runs=1,
            core_runs=1,
            p1_clients=4,
            p1_posts=1,
            p1_batch=20,
            p2_clients=8,
            p2_requests=3,
            b_row_rows=50,
            p3_turns=120,
            p3_small_turns=30,
            p5_sessions=150,
            p5_small_sessions=60,
            page_requests=3,
            transcript_messages=41,
            result_chars=400,
            p8_samples=2,
            p13_requests=4,
            p13_items=60,
            p13_bytes=256 * 1024,
        )


@dataclass
class Bar:
    id: str
    measurement: str
    value: str
    baseline: str
    ratio: float | None
    bar: str
    passed: bool | None  # None: reported, no bar
    note: str = ""

    @property
    def result(self) -> str:
        return "REPORT" if self.passed is None else "PASS" if self.passed else "MISS"


def _ms(value: float) -> str:
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


@contextmanager
def step(name: str) -> Iterator[None]:
    began = time.monotonic()
    print(f"… {name}", flush=True)
    yield
    print(f"  done in {time.monotonic() - began:.1f} s", flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, cleanup: Cleanup) -> None:
        self.args = args
        self.sizes = Sizes.smoke() if args.smoke else Sizes.full(args.runs)
        self.cleanup = cleanup
        self.results: dict[str, Any] = {"baselines": {}, "measurements": {}}
        self.bars: list[Bar] = []
        self.queue = f"bench-{os.getpid()}"
        self.var_dir = Path(args.var_dir).resolve()
        self.log_dir = self.var_dir / "logs"
        self.events = self.var_dir / "worker-events.txt"
        self.port = 0
        self.worker: Started | None = None
        self.started = time.monotonic()
        self.query_counts: dict[str, dict[str, int]] = {}

    # --- set-up ------------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        env = {
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": self.args.database_url,
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(64),
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "API_RATE_LIMIT_PER_MINUTE": str(10**9),
            "CELERY_BROKER_URL": self.args.broker_url,
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "CELERY_WORKER_CONCURRENCY": str(self.args.worker_concurrency),
            "CONSOLE_VAR_DIR": str(self.var_dir / "console"),
            "LOG_LEVEL": "WARNING",
            "BENCH_EVENTS_FILE": str(self.events),
            "COMPACTION_AUTO_ENQUEUE": "true",
        }
        if len(env["DJANGO_SECRET_KEY"]) < 50:
            env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(64)
        return env

    def setup(self) -> None:
        for name, why in (
            ("PostgreSQL", postgres_reachable(self.args.database_url)),
            ("RabbitMQ", broker_reachable(self.args.broker_url)),
        ):
            if why is not None:
                raise SystemExit(f"bench: {name} is not reachable: {why}")
        database_name(self.args.database_url)  # refuses protected names before anything else
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.events.write_text("")
        os.environ.update(self.environment())
        with step(f"database {database_name(self.args.database_url)}: create, migrate, seed"):
            create_database(self.args.database_url, self.cleanup, keep=self.args.keep_db)
            import django

            django.setup()
            from django.core.management import call_command

            from telemetry.seeding import ensure_defaults

            call_command("migrate", verbosity=0)
            ensure_defaults()
            call_command("collectstatic", interactive=False, verbosity=0)
        from django.contrib.auth.models import Group, User
        from django.test import Client

        from telemetry.keys import create_agent_key

        issued = create_agent_key(profile_name="bench", name="bench")
        self.key = issued.key
        self.auth = (("Authorization", f"Bearer {issued.plaintext}"),)
        self.json_auth = (*self.auth, ("Content-Type", "application/json"))
        viewer = User.objects.create_user("bench-viewer", password=secrets.token_urlsafe(16))
        viewer.groups.add(Group.objects.get_or_create(name="viewer")[0])
        self.client = Client(HTTP_HOST="127.0.0.1")
        self.client.force_login(viewer)
        from django.conf import settings

        cookie = self.client.cookies[settings.SESSION_COOKIE_NAME].value
        self.page_headers = (("Cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}"),)

    # --- helpers -----------------------------------------------------------------------------

    def baseline(self, name: str, **figures: Any) -> None:
        self.results["baselines"][name] = figures

    def measurement(self, name: str, **figures: Any) -> None:
        self.results["measurements"][name] = figures

    def ingest(self, records: list[dict[str, Any]]) -> None:
        from telemetry.ingest.pipeline import ingest_records

        for start in range(0, len(records), 1_000):
            result = ingest_records(
                key=self.key, raw_items=records[start : start + 1_000], batch=True
            )
            assert result.count("created") == len(records[start : start + 1_000]), result.items[:3]

    def runs(self, measure: Callable[[int], Any]) -> list[Any]:
        """A warm-up (index -1, discarded), then `runs` measured runs."""
        measure(-1)
        return [measure(i) for i in range(self.sizes.runs)]

    # --- P9: the pure core -------------------------------------------------------------------

    def core(self) -> None:
        from bench.bench_core import build_transcript
        from context_core import (
            BoundSpec,
            ReliefPolicy,
            derive_surface,
            parse_anthropic,
            plan_relief,
        )

        s = self.sizes
        items = build_transcript(s.transcript_messages, s.result_chars)
        log = parse_anthropic(items, system="You are an auditor.", bound=BoundSpec(50_000))
        surface = derive_surface(log)
        policy = ReliefPolicy(
            window_tokens=int(surface.tokens / 0.7) + 16_000, reserved_output_tokens=16_000
        )

        def core_pass() -> None:
            fresh = derive_surface(log)
            plan = plan_relief(fresh, policy=policy)
            derive_surface(log, plan.operations)

        def json_pass() -> None:
            json.loads(json.dumps(items))

        def timed(fn: Callable[[], None]) -> float:
            fn()
            samples = []
            for _ in range(s.core_runs):
                began = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - began) * 1000)
            return median(samples)

        core_ms, json_ms = timed(core_pass), timed(json_pass)
        self.baseline("B_json_roundtrip", ms=json_ms, messages=len(log), tokens=surface.tokens)
        self.measurement("P9", plan_and_derive_ms=core_ms, messages=len(log), tokens=surface.tokens)
        self.bars.append(
            Bar(
                "P9",
                f"core: derive + plan + derive of {len(log):,} msgs / {surface.tokens:,} tokens",
                _ms(core_ms),
                f"JSON round trip {_ms(json_ms)}",
                core_ms / json_ms,
                "≤ 2 ×",
                core_ms / json_ms <= 2,
            )
        )

    # --- B_copy, B_row -----------------------------------------------------------------------

    def raw_writes(self) -> None:
        """B_row, and the scratch table and rows of B_copy, whose runs alternate with P1's
        (`copy_run`, `batch_ingest`)."""
        from bench.data import CALL_COLUMNS, call_row

        s = self.sizes
        n = s.p1_clients * s.p1_posts * s.p1_batch
        now = datetime.now(UTC)
        self.copy_rows = [call_row(1 + i // 100, i % 100 // 2, i % 2, now) for i in range(n)]
        cols = ", ".join(CALL_COLUMNS)
        with self.raw() as conn:
            conn.execute("DROP TABLE IF EXISTS bench_scratch_call")
            # the table ingest COPYs into (`telemetry.packing`: the view's hot table)
            conn.execute(f"CREATE TABLE bench_scratch_call (LIKE {bulk.hot_calls()} INCLUDING ALL)")
            self.cleanup.push("drop bench_scratch_call", self.drop_scratch)
            insert = (
                f"INSERT INTO bench_scratch_call ({cols}) "
                f"VALUES ({', '.join(['%s'] * len(CALL_COLUMNS))})"
            )
            single = self.copy_rows[: s.b_row_rows]

            def row_by_row(run: int) -> float:
                conn.execute("TRUNCATE bench_scratch_call")
                began = time.perf_counter()
                with conn.cursor() as cur:
                    for row in single:
                        cur.execute(insert, row)  # autocommit: one transaction per row
                return len(single) / (time.perf_counter() - began)

            row_rates = self.runs(row_by_row)
        self.baseline("B_row", rows_per_s=median(row_rates), runs=row_rates, rows=len(single))

    def copy_run(self) -> float:
        """One run of B_copy: P1's rows (as many as a P1 run sends) COPYed into the scratch copy
        of the calls table, `COPY_REPEATS` times (emptied before each), in rows/s. One COPY of
        20,000 rows lasts ~0.25 s, a fifth of a P1 run: repeated, it sees the machine over
        about as long as the P1 run it is paired with."""
        from bench.data import CALL_COLUMNS

        statement = f"COPY bench_scratch_call ({', '.join(CALL_COLUMNS)}) FROM STDIN"
        elapsed = 0.0
        with self.raw() as conn:
            for _ in range(COPY_REPEATS):
                conn.execute("TRUNCATE bench_scratch_call")
                began = time.perf_counter()
                with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
                    for row in self.copy_rows:
                        copy.write_row(row)
                elapsed += time.perf_counter() - began
        return COPY_REPEATS * len(self.copy_rows) / elapsed

    def drop_scratch(self) -> None:
        with self.raw() as conn:
            conn.execute("DROP TABLE IF EXISTS bench_scratch_call")

    @contextmanager
    def raw(self) -> Iterator[Any]:
        import psycopg

        with psycopg.connect(self.args.database_url, autocommit=True) as conn:
            yield conn

    # --- seeding for P3/P5 -------------------------------------------------------------------

    def seed_reads(self) -> None:
        self.seed_p3()
        self.seed_p5()

    def seed_p3(self) -> None:
        """P3's sessions (1,000 and 100,000 turns), their page's query counts, B_read."""
        from bench.data import record
        from telemetry.models import AgentSession

        s = self.sizes
        self.ingest([record("p3-small", t) for t in range(s.p3_small_turns)])
        # The big session and the list's sessions are generated by PostgreSQL (bench.bulk): the
        # API would take an hour for them, and these measure reads. The last turn of the big
        # session goes through ingest, so the product derives the session's figures itself.
        profile = self.key.profile
        big = [f"p3-big-{0:06d}"]
        with step(f"bulk: 1 session of {s.p3_turns:,} turns"):
            bulk.seed_sessions(profile.pk, "p3-big-", 1)
            bulk.seed_calls("s.external_id = ANY(%s)", [big], s.p3_turns - 1, 1)
            bulk.seed_turns("s.external_id = ANY(%s)", [big])
            bulk.refresh_session_figures("s.external_id = ANY(%s)", [big])
            self.ingest([record(big[0], s.p3_turns - 1)])
        sessions = AgentSession.objects.filter(profile=self.key.profile)
        self.small = sessions.get(external_id="p3-small")
        self.big = sessions.get(external_id=big[0])
        assert self.big.turns_count == s.p3_turns, self.big.turns_count
        page_small, page_big = (
            self.query_count(f"/sessions/{x.pk}/") for x in (self.small, self.big)
        )
        self.query_counts["P3"] = {
            f"{s.p3_small_turns} turns": page_small,
            f"{s.p3_turns} turns": page_big,
        }
        # B_read: the raw SELECT of the big session's turns.
        with self.raw() as conn:

            def read(run: int) -> float:
                began = time.perf_counter()
                rows = conn.execute(
                    "SELECT * FROM telemetry_turn WHERE session_id = %s ORDER BY turn",
                    [self.big.pk],
                ).fetchall()
                assert len(rows) == s.p3_turns
                return (time.perf_counter() - began) * 1000

            reads = self.runs(read) + [read(0) for _ in range(4)]
        self.baseline("B_read", ms=median(reads), samples_ms=reads, turns=s.p3_turns)

    def seed_p5(self) -> None:
        """The list's sessions (1,000, then 100,000), its query counts at both sizes, B_page."""
        from telemetry.models import AgentSession

        s = self.sizes
        profile = self.key.profile

        def fill(total: int) -> None:
            have = AgentSession.objects.count()
            if total <= have:
                return
            where = "s.external_id LIKE %s AND s.turns_count = 0"
            with step(f"bulk: sessions {have:,} → {total:,} (2 turns each)"):
                bulk.seed_sessions(profile.pk, "p5-", total - have, start=have)
                bulk.seed_calls(where, ["p5-%"], 2, 1)
                bulk.seed_turns(where, ["p5-%"])
                bulk.refresh_session_figures("s.external_id LIKE %s", ["p5-%"])
                bulk.analyze()

        fill(s.p5_small_sessions)
        list_small = self.query_count("/sessions/")
        fill(s.p5_sessions)
        list_big = self.query_count("/sessions/")
        self.query_counts["P5"] = {
            f"{s.p5_small_sessions} sessions": list_small,
            f"{s.p5_sessions} sessions": list_big,
        }
        # B_page: the raw SELECT of one page of the list.
        with self.raw() as conn:

            def page(run: int) -> float:
                began = time.perf_counter()
                rows = conn.execute(
                    "SELECT s.*, p.* FROM telemetry_agentsession s "
                    "JOIN telemetry_agentprofile p ON p.id = s.profile_id "
                    "ORDER BY s.last_seen_at DESC NULLS LAST, s.id DESC LIMIT 25"
                ).fetchall()
                assert len(rows) == 25
                return (time.perf_counter() - began) * 1000

            pages = self.runs(page) + [page(0) for _ in range(8)]
        self.baseline("B_page", ms=median(pages), samples_ms=pages, sessions=s.p5_sessions)

    def query_count(self, path: str) -> int:
        """SQL statements of one GET of `path` in this process, warm."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        self.client.get(path)  # warm (the first request of a process loads more)
        with CaptureQueriesContext(connection) as ctx:
            response = self.client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        return len(ctx.captured_queries)

    # --- HTTP: B_noop, P2, P3, P4, P5, P1 ----------------------------------------------------

    def serve(self) -> None:
        workers = self.args.web_workers or 2 * (os.cpu_count() or 1)
        self.gunicorn, self.port = start_gunicorn(
            dict(os.environ),
            self.log_dir,
            self.cleanup,
            workers=workers,
            worker_class=self.args.worker_class,
            threads=self.args.threads,
        )
        self.results["server"] = {
            "command": " ".join(self.gunicorn.process.args),  # type: ignore[arg-type]
            "workers": workers,
            "worker_class": self.args.worker_class,
            "threads": self.args.threads if self.args.worker_class == "gthread" else 1,
        }

    def single_records(self) -> None:
        """B_noop and P2 alternate run by run, so drift in the machine hits both alike; a B_noop
        run sends `NOOP_REPEATS` times the requests, to last about as long as a P2 run."""
        from bench.data import record, single_body
        from bench.urls import NOOP_PATH

        s = self.sizes
        noop_runs: list[LoadResult] = []
        ingest_runs: list[LoadResult] = []

        def plan(path: str, label: str, requests: int) -> list[list[Request]]:
            return [
                [
                    Request("POST", path, single_body(record(f"{label}-c{c}", t)), self.json_auth)
                    for t in range(requests)
                ]
                for c in range(s.p2_clients)
            ]

        def one(run: int) -> None:
            noop = run_load(
                self.port, plan(NOOP_PATH, f"noop-r{run}", NOOP_REPEATS * s.p2_requests)
            )
            p2 = run_load(self.port, plan("/api/v1/telemetry", f"p2-r{run}", s.p2_requests))
            if run >= 0:
                noop_runs.append(noop)
                ingest_runs.append(p2)
            bad = {k: v for k, v in p2.statuses.items() if k != 201}
            assert not bad and not p2.errors, (p2.statuses, p2.errors)

        self.runs(one)
        noop_rate = median([r.per_second for r in noop_runs])
        rate = median([r.per_second for r in ingest_runs])
        noop_lat = latency_summary([ms for r in noop_runs for ms in r.latencies_ms])
        lat = latency_summary([ms for r in ingest_runs for ms in r.latencies_ms])
        self.baseline(
            "B_noop",
            requests_per_s=noop_rate,
            runs=[r.per_second for r in noop_runs],
            latency=noop_lat,
            clients=s.p2_clients,
            client_cores=median([r.client_cores for r in noop_runs]),
        )
        self.measurement(
            "P2",
            requests_per_s=rate,
            runs=[r.per_second for r in ingest_runs],
            ratio_per_run=[
                p2.per_second / noop.per_second
                for p2, noop in zip(ingest_runs, noop_runs, strict=True)
            ],
            latency=lat,
            clients=s.p2_clients,
            client_cores=median([r.client_cores for r in ingest_runs]),
        )
        statements = self.single_record_statements()
        self.results["measurements"]["P2"]["statements_per_request"] = statements
        p99_ratio = lat["p99_ms"] / noop_lat["p99_ms"]
        self.bars.append(
            Bar(
                "P2",
                f"single-record ingest over HTTP, {s.p2_clients} clients "
                f"(p50/p95/p99 {lat['p50_ms']:.1f}/{lat['p95_ms']:.1f}/{lat['p99_ms']:.1f} ms); "
                f"{statements} SQL statements a request",
                f"{rate:,.0f} req/s",
                f"B_noop {noop_rate:,.0f} req/s",
                rate / noop_rate,
                "≥ 0.25 ×; p99 ≤ 5 × B_noop's",
                rate / noop_rate >= 0.25 and p99_ratio <= 5,
                f"p99 {p99_ratio:.1f} × B_noop's ({noop_lat['p99_ms']:.1f} ms); clients used "
                f"{median([r.client_cores for r in ingest_runs]):.2f} cores "
                f"(B_noop: {median([r.client_cores for r in noop_runs]):.2f}); machine idle "
                f"{median([r.idle_share for r in ingest_runs]):.0%}",
            )
        )

    def single_record_statements(self) -> int:
        """SQL statements of one single-record POST in a warm process (key and policy cached),
        sent as an agent and P2's load send it: the key and no cookie. `self.client` is the
        viewer's, signed in for the pages; its session cookie would add the session's and the
        user's reads (the audit trail's middleware names a signed-in user on every request)."""
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext

        from bench.data import record, single_body

        agent = Client(HTTP_HOST="127.0.0.1")

        def post(turn: int) -> Any:
            return agent.post(
                "/api/v1/telemetry",
                single_body(record("p2-statements", turn)),
                content_type="application/json",
                headers=dict(self.auth),
            )

        assert post(0).status_code == 201
        with CaptureQueriesContext(connection) as ctx:
            assert post(1).status_code == 201
        self.results["measurements"]["P2"]["statements"] = [
            " ".join(q["sql"].split())[:60] for q in ctx.captured_queries
        ]
        return len(ctx.captured_queries)

    def timed(
        self, path: str, headers: tuple[tuple[str, str], ...] | None = None
    ) -> tuple[list[float], bytes]:
        """Latencies (ms) of `page_requests` sequential GETs of `path` per run, and a body."""
        s = self.sizes
        requests = [Request("GET", path, None, headers or self.page_headers)] * s.page_requests
        sequential(self.port, requests[:3])  # warm-up: every gunicorn worker may serve it
        samples: list[float] = []
        body = b""
        for _ in range(max(1, s.runs)):
            latencies, statuses, body = sequential(self.port, requests)
            assert set(statuses) == {200}, (path, statuses)
            samples += latencies
        return samples, body

    def pages(self) -> None:
        """P3 and P4 (the big session's page), then P5."""
        s = self.sizes
        timed = self.timed
        b_read = self.results["baselines"]["B_read"]["ms"]
        samples, html = timed(f"/sessions/{self.big.pk}/")
        page = latency_summary(samples)
        api_samples, api_body = timed(f"/api/v1/sessions/{self.big.external_id}", self.auth)
        api = latency_summary(api_samples)
        api_counts = self.api_query_counts()
        counts = self.query_counts["P3"]
        constant = len(set(counts.values())) == 1
        self.measurement(
            "P3",
            session_page=page,
            api_session=api | {"bytes": len(api_body), "query_counts": api_counts},
            query_counts=counts,
            turns=s.p3_turns,
        )
        self.bars.append(
            Bar(
                "P3",
                f"session page, {s.p3_turns:,} turns: p95 (p50 {_ms(page['p50_ms'])}); "
                f"queries {' vs '.join(map(str, counts.values()))}",
                _ms(page["p95_ms"]),
                f"B_read {_ms(b_read)}",
                page["p95_ms"] / b_read,
                "≤ 3 ×; same query count",
                page["p95_ms"] / b_read <= 3 and constant,
                f"API /api/v1/sessions/{{id}} (all {s.p3_turns:,} turns, not downsampled): "
                f"p95 {_ms(api['p95_ms'])}, {len(api_body) / 1024:,.0f} KB, "
                f"queries {' vs '.join(map(str, api_counts.values()))}",
            )
        )
        self.figures(html)

        self.sessions_list()

    def sessions_list(self) -> None:
        """B_django and P5, alternating."""
        s = self.sizes
        timed = self.timed
        from bench.urls import DJANGO_PATH, DJANGO_ROWS

        b_page = self.results["baselines"]["B_page"]["ms"]
        # B_django and P5 alternate, so drift in the machine hits both alike.
        django_samples: list[float] = []
        samples = []
        for _ in range(3):
            django_samples += timed(DJANGO_PATH)[0]
            samples += timed("/sessions/")[0]
        b_django = latency_summary(django_samples)
        self.baseline("B_django", **b_django, rows=DJANGO_ROWS)
        listing = latency_summary(samples)
        counts = self.query_counts["P5"]
        constant = len(set(counts.values())) == 1
        ratio = listing["p95_ms"] / b_django["p95_ms"]
        self.measurement("P5", sessions_list=listing, query_counts=counts, sessions=s.p5_sessions)
        self.bars.append(
            Bar(
                "P5",
                f"sessions list, {s.p5_sessions:,} sessions: p95 (p50 {_ms(listing['p50_ms'])}); "
                f"queries {' vs '.join(map(str, counts.values()))}",
                _ms(listing["p95_ms"]),
                f"B_django p95 {_ms(b_django['p95_ms'])}",
                ratio,
                "≤ 2 ×; same query count",
                ratio <= 2 and constant,
                f"a raw SELECT of the page (B_page) takes {_ms(b_page)}",
            )
        )

    def api_query_counts(self) -> dict[str, int]:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        counts = {}
        for session in (self.small, self.big):
            path = f"/api/v1/sessions/{session.external_id}"
            headers = dict(self.auth)
            self.client.get(path, headers=headers)
            with CaptureQueriesContext(connection) as ctx:
                assert self.client.get(path, headers=headers).status_code == 200
            counts[f"{session.turns_count} turns"] = len(ctx.captured_queries)
        return counts

    def figures(self, html: bytes) -> None:
        text = html.decode()
        scripts = re.findall(
            r'<script id="(fig-[\w-]+)" type="application/json">(.*?)</script>', text, re.S
        )
        traces: dict[str, int] = {}
        payload = 0
        for fig_id, body in scripts:
            payload += len(body.encode())
            figure = json.loads(body)
            for i, trace in enumerate(figure.get("data", [])):
                points = max(
                    (len(trace[k]) for k in ("x", "y") if isinstance(trace.get(k), list)), default=0
                )
                traces[f"{fig_id}/{trace.get('name') or i}"] = points
        most = max(traces.values(), default=0)
        self.measurement(
            "P4",
            points_per_trace=traces,
            max_points=most,
            payload_bytes=payload,
            page_bytes=len(html),
        )
        ok = bool(scripts) and most <= 2_000 and payload <= 300 * 1024
        self.bars.append(
            Bar(
                "P4",
                f"series payload of the {self.sizes.p3_turns:,}-turn session "
                f"({len(traces)} traces, page {len(html) / 1024:,.0f} KB)",
                f"{most:,} pts, {payload / 1024:,.0f} KB",
                "—",
                None,
                "≤ 2,000 pts/trace; ≤ 300 KB",
                ok,
            )
        )

    def batched(self, label: str) -> LoadResult:
        """P1's load: each client posts its own sessions, 1,000 records a POST."""
        from bench.data import batch_body, batch_records

        s = self.sizes
        plan = []
        for c in range(s.p1_clients):
            requests = []
            for p in range(s.p1_posts):
                records = batch_records(f"{label}-c{c}", p, s.p1_batch)
                requests.append(
                    Request("POST", "/api/v1/telemetry", batch_body(records), self.json_auth)
                )
            plan.append(requests)
        return run_load(self.port, plan, parse_items=True)

    def check_stored(self, label: str, sent: int) -> tuple[int, int]:
        """(lost, duplicated) calls of the sessions whose ids start with `label`."""
        with self.raw() as conn:
            total, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT (c.session_id, c.turn, c.call)) "
                "FROM telemetry_llmcall c JOIN telemetry_agentsession s ON s.id = c.session_id "
                "WHERE s.external_id LIKE %s",
                [f"{label}-%"],
            ).fetchone()
        return max(0, sent - distinct), total - distinct

    def batch_ingest(self) -> None:
        s = self.sizes
        sent = s.p1_clients * s.p1_posts * s.p1_batch
        runs: list[LoadResult] = []
        copies: list[float] = []
        losses: list[dict[str, Any]] = []

        def one(run: int) -> None:
            # B_copy and P1 alternate run by run (as B_noop and P2 do), so a shared machine's
            # drift over the minutes of a bench run hits the ratio's two sides alike
            copied = self.copy_run()
            label = f"p1-r{run}"
            result = self.batched(label)
            assert not result.errors, result.errors
            lost, duplicated = self.check_stored(label, sent)
            losses.append(
                {
                    "lost": lost,
                    "duplicated": duplicated,
                    "created": result.created,
                    "duplicates_answered": result.duplicates,
                    "other": result.other_items,
                    "statuses": result.statuses,
                }
            )
            if run >= 0:
                runs.append(result)
                copies.append(copied)

        self.runs(one)
        self.drop_scratch()
        self.baseline("B_copy", rows_per_s=median(copies), runs=copies, rows=COPY_REPEATS * sent)
        rates = [sent / r.wall_s for r in runs]
        rate = median(rates)
        self.p1_wall = median([r.wall_s for r in runs])
        b_copy = self.results["baselines"]["B_copy"]["rows_per_s"]
        b_row = self.results["baselines"]["B_row"]["rows_per_s"]
        lost = sum(x["lost"] for x in losses)
        duplicated = sum(x["duplicated"] for x in losses)
        wrong = sum(x["other"] + x["duplicates_answered"] for x in losses)
        lat = latency_summary([ms for r in runs for ms in r.latencies_ms])
        self.measurement(
            "P1",
            rows_per_s=rate,
            runs=rates,
            ratio_per_run=[r / c for r, c in zip(rates, copies, strict=True)],
            rows_per_run=sent,
            latency_per_post=lat,
            integrity=losses,
            client_cores=median([r.client_cores for r in runs]),
            vs_B_row=rate / b_row,
            machine_idle=[round(r.idle_share, 3) for r in runs],
            first_client_done=[round(r.first_end_s / r.wall_s, 3) for r in runs],
        )
        self.bars.append(
            Bar(
                "P1",
                f"batched ingest, {s.p1_batch:,} records/POST, {s.p1_clients} clients "
                f"({sent:,} rows/run); lost {lost}, duplicated {duplicated}",
                f"{rate:,.0f} rows/s",
                f"B_copy {b_copy:,.0f} rows/s",
                rate / b_copy,
                "≥ 0.25 ×; 0 lost, 0 dup",
                rate / b_copy >= 0.25 and lost == 0 and duplicated == 0 and wrong == 0,
                f"{rate / b_row:.1f} × B_row ({b_row:,.0f} rows/s); POST p50/p95 "
                f"{lat['p50_ms']:.0f}/{lat['p95_ms']:.0f} ms; machine idle "
                f"{median([r.idle_share for r in runs]):.0%}",
            )
        )

    # --- the worker: P8, B_io, P6, P7 --------------------------------------------------------

    def start_worker(self) -> None:
        from bench.celery_app import NOOP_TASK

        self.worker = start_worker(
            dict(os.environ),
            self.log_dir,
            self.cleanup,
            queue=self.queue,
            concurrency=self.args.worker_concurrency,
        )
        self.cleanup.push("delete the bench queue", self.delete_queue)
        deadline = time.monotonic() + 90
        task_id = self.send(NOOP_TASK)
        while self.event("end", task_id) is None:
            if self.worker.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not start:\n{self.worker.log_tail()}")
            time.sleep(0.05)

    def delete_queue(self) -> None:
        from kombu import Queue

        from bench.celery_app import app

        with app.connection_for_write() as conn:
            Queue(self.queue).bind(conn.default_channel).delete()

    def send(self, name: str, args: list[Any] | None = None) -> str:
        from bench.celery_app import app

        return str(app.send_task(name, args=args or []).id)

    def events_of(self) -> dict[tuple[str, str], float]:
        found = {}
        for line in self.events.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                found[(parts[0], parts[1])] = float(parts[3])
        return found

    def event(self, kind: str, task_id: str) -> float | None:
        return self.events_of().get((kind, task_id))

    def wait_end(self, task_id: str, timeout: float = 600) -> tuple[float, float]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.events_of()
            if ("end", task_id) in found:
                return found[("start", task_id)], found[("end", task_id)]
            assert self.worker is not None
            if self.worker.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"task {task_id} did not finish:\n{self.worker.log_tail()}")
            time.sleep(0.002)

    def enqueue_latency(self) -> None:
        from bench.celery_app import NOOP_TASK

        relief = "compaction.relieve_session"
        samples: dict[str, list[float]] = {NOOP_TASK: [], relief: []}
        for i in range(-1, self.sizes.p8_samples):
            for name, args in ((NOOP_TASK, []), (relief, [self.small.pk])):
                sent_at = time.time()
                task_id = self.send(name, args)
                started, _ = self.wait_end(task_id)
                if i >= 0:
                    samples[name].append((started - sent_at) * 1000)
                time.sleep(0.05)  # idle again
        noop, job = latency_summary(samples[NOOP_TASK]), latency_summary(samples[relief])
        self.baseline("B_noop_task", enqueue_to_start=noop)
        self.measurement("P8", enqueue_to_start=job, task=relief)
        self.bars.append(
            Bar(
                "P8",
                f"enqueue → start, idle worker: {relief} p50/p95 "
                f"{job['p50_ms']:.1f}/{job['p95_ms']:.1f} ms",
                _ms(job["p50_ms"]),
                f"no-op task p50/p95 {noop['p50_ms']:.1f}/{noop['p95_ms']:.1f} ms",
                job["p50_ms"] / noop["p50_ms"],
                "report",
                None,
            )
        )

    def transcript(self) -> None:
        """The template session: a 1M-token transcript appended through the product's write path,
        then one call report that puts it at 0.7 of its window (automatic relief: prune)."""
        from bench.bench_core import build_transcript
        from bench.data import MODEL
        from compaction.rawjson import Span
        from compaction.transcripts import append_messages
        from telemetry.ingest.pipeline import ingest_records
        from telemetry.models import AgentSession

        s = self.sizes
        items = build_transcript(s.transcript_messages, s.result_chars)
        spans = []
        for seq, item in enumerate(items):
            value = {"seq": seq, **item}
            spans.append(Span(value, json.dumps(value, ensure_ascii=False)))
        # Its own profile, where it is the only session and has made REPORTED_CALLS calls: the
        # worth-it rule then expects as many more (compaction.cache_report), and a prune of the
        # 1M-token transcript pays back its re-write (the bench measures compaction, not skips).
        from telemetry.keys import create_agent_key

        owner = create_agent_key(profile_name="bench-compaction", name="bench").key
        session = AgentSession.objects.create(profile=owner.profile, external_id="p6-template")
        session.profile = owner.profile
        began = time.perf_counter()
        result = append_messages(session=session, fmt="anthropic", system=None, messages=spans)
        append_s = time.perf_counter() - began
        assert result.surface is not None
        tokens = result.surface.tokens_estimate
        window = int(tokens / 0.7) + 16_000
        reports = [
            {
                "session_id": "p6-template",
                "turn": turn,
                "model": MODEL,
                "usage": {
                    "input_tokens": 5_000,
                    "cache_read_input_tokens": max(0, tokens - 5_000),
                    "cache_creation_input_tokens": 0,
                    "output_tokens": 500,
                },
                "window_tokens": window,
            }
            for turn in range(REPORTED_CALLS)
        ]
        ingest_records(key=owner, raw_items=reports, batch=True)
        self.template = AgentSession.objects.get(pk=session.pk)
        assert self.template.pressure is not None and self.template.pressure >= 0.6
        self.transcript_figures = {
            "messages": len(items),
            "chars": sum(len(span.text) for span in spans),
            "tokens_estimate": tokens,
            "append_s": append_s,
        }

    def clone(self, label: str) -> int:
        """A copy of the template session with the same log and surface (raw SQL, not timed)."""
        from compaction.models import Surface, SurfaceVersion
        from telemetry.models import AgentSession

        copy = AgentSession.objects.get(pk=self.template.pk)
        copy.pk = None
        copy.external_id = label
        copy.relief_requested_at = None
        copy.save()
        with self.raw() as conn:
            conn.execute(
                "INSERT INTO compaction_logmessage "
                "(session_id, seq, format, role, raw, raw_hash, chars, bound_cap, created_at) "
                "SELECT %s, seq, format, role, raw, raw_hash, chars, bound_cap, created_at "
                "FROM compaction_logmessage WHERE session_id = %s",
                [copy.pk, self.template.pk],
            )
        surface = Surface.objects.get(session_id=self.template.pk)
        surface.pk = None
        surface.session_id = copy.pk
        surface.save()
        for version in SurfaceVersion.objects.filter(session_id=self.template.pk):
            version.pk = None
            version.session_id = copy.pk
            version.save()
        return int(copy.pk)

    def raw_io(self) -> None:
        """B_io: read the template's message rows, write them into a scratch copy of the archive
        chunk table (same indexes, the full-text GIN one included) — the I/O an archive needs."""
        with self.raw() as conn:
            conn.execute("DROP TABLE IF EXISTS bench_scratch_chunk")
            conn.execute(
                "CREATE TABLE bench_scratch_chunk (LIKE compaction_archivechunk INCLUDING ALL)"
            )
            conn.execute("DROP TABLE IF EXISTS bench_scratch_log")
            conn.execute(
                "CREATE TABLE bench_scratch_log (LIKE compaction_logmessage INCLUDING ALL)"
            )

            def read_rows() -> list[tuple[Any, ...]]:
                rows: list[tuple[Any, ...]] = conn.execute(
                    "SELECT seq, format, role, raw, raw_hash, chars, bound_cap, created_at "
                    "FROM compaction_logmessage WHERE session_id = %s ORDER BY seq",
                    [self.template.pk],
                ).fetchall()
                return rows

            def io(run: int) -> float:
                conn.execute("TRUNCATE bench_scratch_chunk")
                began = time.perf_counter()
                rows = read_rows()
                with (
                    conn.transaction(),
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY bench_scratch_chunk (archive_id, seq, part, role, text, search) FROM STDIN"
                    ) as copy,
                ):
                    for row in rows:
                        # the raw text stands in for the decoded search text (same size)
                        copy.write_row((1, row[0], 0, row[2], row[3], row[3]))
                return time.perf_counter() - began

            def io_plain(run: int) -> float:
                conn.execute("TRUNCATE bench_scratch_log")
                began = time.perf_counter()
                rows = read_rows()
                with (
                    conn.transaction(),
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY bench_scratch_log (session_id, seq, format, role, raw, raw_hash, "
                        "chars, bound_cap, created_at) FROM STDIN"
                    ) as copy,
                ):
                    for row in rows:
                        copy.write_row((1, *row))
                return time.perf_counter() - began

            indexed = self.runs(io)
            plain = self.runs(io_plain)
            conn.execute("DROP TABLE bench_scratch_chunk")
            conn.execute("DROP TABLE bench_scratch_log")
        self.baseline(
            "B_io",
            s=median(indexed),
            runs=indexed,
            without_fulltext_index_s=median(plain),
            **self.transcript_figures,
        )

    def compaction(self) -> None:
        from compaction.models import CompactionRun

        assert self.worker is not None
        durations: list[float] = []
        rss_mb: list[float] = []
        breakdown: list[dict[str, Any]] = []

        def one(run: int) -> None:
            assert self.worker is not None
            session_id = self.clone(f"p6-r{run}")
            children = pool_children(self.worker.process.pid)
            for child in children:
                reset_peak_rss(child)
            task_id = self.send("compaction.relieve_session", [session_id])
            started, ended = self.wait_end(task_id)
            peak = max((status_kb(c, "VmHWM") or 0) for c in pool_children(self.worker.process.pid))
            done = CompactionRun.objects.get(task_id=task_id)
            assert done.status == "applied" and done.archived, (
                done.status,
                done.reason,
                done.error,
            )
            if run >= 0:
                durations.append(ended - started)
                rss_mb.append(peak / 1024)
                breakdown.append(
                    {
                        "plan_ms": done.plan_ms,
                        "archive_ms": done.archive_ms,
                        "apply_ms": done.apply_ms,
                        "tokens_before": done.tokens_before,
                        "tokens_after": done.tokens_after,
                        "action": done.action,
                    }
                )

        self.runs(one)
        took = median(durations)
        peak_mb = max(rss_mb)
        b_io = self.results["baselines"]["B_io"]["s"]
        self.p6_seconds = took
        self.measurement(
            "P6",
            s=took,
            runs=durations,
            worker_peak_rss_mb=peak_mb,
            rss_runs_mb=rss_mb,
            runs_breakdown=breakdown,
            rss_reset_per_run=True,
        )
        plan = median([b["plan_ms"] or 0 for b in breakdown])
        archive = median([b["archive_ms"] or 0 for b in breakdown])
        apply = median([b["apply_ms"] or 0 for b in breakdown])
        tokens = self.transcript_figures["tokens_estimate"]
        self.bars.append(
            Bar(
                "P6",
                f"compaction of a {tokens:,}-token transcript in the worker, archive included; "
                f"peak RSS {peak_mb:,.0f} MB",
                f"{took:.2f} s",
                f"B_io {b_io:.2f} s",
                took / b_io,
                "≤ 3 ×; RSS ≤ 300 MB",
                took / b_io <= 3 and peak_mb <= 300,
                f"plan {plan / 1000:.2f} s, archive {archive / 1000:.2f} s, apply {apply / 1000:.2f} s "
                f"(B_io without the full-text index: "
                f"{self.results['baselines']['B_io']['without_fulltext_index_s']:.2f} s)",
            )
        )

    def ingest_under_compaction(self) -> None:
        s = self.sizes
        sent = s.p1_clients * s.p1_posts * s.p1_batch
        jobs_per_run = max(2, math.ceil(2 * self.p1_wall / max(self.p6_seconds, 0.01)) + 1)
        rates, coverage, losses, adjacent = [], [], [], []
        for run in range(s.runs):
            # P1's load alone first, with the worker idle: the ratio is of the two loads measured
            # side by side (as B_copy's runs alternate with P1's), not against P1 minutes earlier
            alone = self.batched(f"p7p1-r{run}")
            assert not alone.errors, alone.errors
            adjacent.append(sent / alone.wall_s)
            sessions = [self.clone(f"p7-r{run}-j{j}") for j in range(jobs_per_run)]
            task_ids = [self.send("compaction.relieve_session", [sid]) for sid in sessions]
            # Wait until the first compaction is running, then load.
            deadline = time.monotonic() + 120
            while self.event("start", task_ids[0]) is None and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.time()
            result = self.batched(f"p7-r{run}")
            t1 = time.time()
            assert not result.errors, result.errors
            lost, duplicated = self.check_stored(f"p7-r{run}", sent)
            losses.append({"lost": lost, "duplicated": duplicated})
            rates.append(sent / result.wall_s)
            spans = []
            for task_id in task_ids:
                started, ended = self.wait_end(task_id)
                spans.append((started, ended))
            busy = sum(max(0.0, min(t1, e) - max(t0, b)) for b, e in spans)
            coverage.append(min(1.0, busy / (t1 - t0)))
        rate = median(rates)
        p1_run = self.results["measurements"]["P1"]["rows_per_s"]
        p1 = median(adjacent)
        self.measurement(
            "P7",
            rows_per_s=rate,
            runs=rates,
            compaction_coverage=coverage,
            jobs_per_run=jobs_per_run,
            P1_adjacent=p1,
            P1_adjacent_runs=adjacent,
            vs_P1_of_the_run=rate / p1_run,
            integrity=losses,
        )
        ok = rate / p1 >= 0.5 and all(x["lost"] == 0 and x["duplicated"] == 0 for x in losses)
        self.bars.append(
            Bar(
                "P7",
                f"batched ingest while compactions run (a compaction ran during "
                f"{100 * min(coverage):.0f}% of every run)",
                f"{rate:,.0f} rows/s",
                f"P1 beside it {p1:,.0f} rows/s",
                rate / p1,
                "≥ 0.5 ×",
                ok,
                f"{rate / p1_run:.2f} × P1 of the run ({p1_run:,.0f} rows/s); the Celery pool "
                f"runs at WORKER_NICE",
            )
        )

    # --- output ------------------------------------------------------------------------------

    def report(self) -> None:
        self.results["bars"] = [asdict(b) | {"result": b.result} for b in self.bars]
        self.results["meta"] = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "smoke": self.args.smoke,
            "runs": self.sizes.runs,
            "sizes": asdict(self.sizes),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": self.postgres_version(),
            "seconds": time.monotonic() - self.started,
            "worker_concurrency": self.args.worker_concurrency,
        }
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.results, indent=2, default=str) + "\n")
        print()
        print(render_table(self.bars))
        print(f"\nwritten to {out} in {time.monotonic() - self.started:.0f} s")

    def postgres_version(self) -> str:
        with self.raw() as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0])

    # --- the whole run -----------------------------------------------------------------------

    def steps(self) -> list[tuple[str, str, Callable[[], None]]]:
        """Every step of the full run, in its order: (key, what it measures, how). An `--only`
        selection (ONLY) runs a subset of these keys, in this same order."""

        def transcript_and_io() -> None:
            self.transcript()
            self.raw_io()

        return [
            ("core", "P9: the pure core", self.core),
            (
                "raw",
                "B_copy, B_row: raw writes into a scratch copy of the calls table",
                self.raw_writes,
            ),
            ("seed", "seed P3/P5 sessions; query counts; B_read, B_page", self.seed_reads),
            ("seed_p3", "seed P3 sessions; B_read", self.seed_p3),
            ("seed_p5", "seed P5 sessions; query counts; B_page", self.seed_p5),
            (
                "p12",
                "P12: cache-miss classification vs reading the calls",
                lambda: measure_p12(self),
            ),
            ("serve", "gunicorn", self.serve),
            ("p2", "B_noop and P2: single requests, alternating runs", self.single_records),
            ("p3", "P3, P4, P5: console pages", self.pages),
            ("p5", "B_django and P5: the sessions list", self.sessions_list),
            (
                "pov",
                "POV: the overview at 10,000 and 1,000,000 calls",
                lambda: measure_overview(self),
            ),
            (
                "browser",
                "PG1-PG3: the chart pages in Chromium (bytes cold and warm, live update)",
                lambda: measure_pages(self),
            ),
            ("p1", "P1: batched ingest", self.batch_ingest),
            ("worker", "Celery worker", self.start_worker),
            ("p8", "P8: enqueue → start on the idle worker", self.enqueue_latency),
            ("io", "1M-token transcript; B_io", transcript_and_io),
            ("p6", "P6: compaction in the worker", self.compaction),
            ("p7", "P7: ingest while compactions run", self.ingest_under_compaction),
            ("pal", "PAL: ingest with 50 alert rules against none", lambda: measure_pal(self)),
            ("p10", "P10: GenAI spans through the OTel SDK exporter", lambda: measure_p10(self)),
            ("p11", "P11: transcript import", lambda: measure_p11(self)),
            ("p13", "P13: worker memory after maximal OTLP exports", lambda: measure_p13(self)),
        ]

    def run(self) -> None:
        self.setup()
        selected = ONLY[self.args.only]
        if self.args.smoke and self.args.only == "all":  # a browser: not in the smoke run
            selected = selected - {"browser"}
        for key, name, measure in self.steps():
            if key in selected:
                with step(name):
                    measure()
        self.report()


# What each `--only` runs (keys of `Bench.steps`, run in the full run's order). "storage" is the
# fleet seed's own path (bench.fleet) and runs none of these.
_FULL = frozenset(
    {"core", "raw", "seed", "p12", "serve", "p2", "p3", "pov", "browser", "p1", "worker", "p8"}
    | {"io", "p6", "p7", "pal", "p10", "p11", "p13"}
)
ONLY: dict[str, frozenset[str]] = {
    "all": _FULL,
    "ingest": frozenset({"raw", "serve", "p2", "p1", "p10"}),
    "import": frozenset({"p11"}),
    "list": frozenset({"seed_p5", "serve", "p5"}),
    "compaction": frozenset({"worker", "io", "p6"}),
    "memory": frozenset({"p13"}),
    "alerts": frozenset({"serve", "worker", "pal"}),
    "pages": frozenset({"serve", "browser"}),
    "overview": frozenset({"serve", "pov"}),
    "perf": frozenset(
        {"raw", "seed_p3", "p12", "serve", "p2", "pov", "p1", "worker", "io", "p6", "p7", "p10"}
    ),
    "storage": frozenset(),
}


def render_table(bars: list[Bar]) -> str:
    header = ("#", "measurement", "measured", "baseline", "ratio", "bar", "result")
    rows = [
        (
            b.id,
            b.measurement,
            b.value,
            b.baseline,
            "—" if b.ratio is None else f"{b.ratio:.2f}",
            b.bar,
            b.result,
        )
        for b in bars
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row, bar in zip(rows, bars, strict=True):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if bar.note:
            lines.append(" " * (widths[0] + 2) + f"  ({bar.note})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, one run: proves the harness"
    )
    parser.add_argument("--runs", type=int, default=3, help="measured runs after the warm-up")
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    )
    parser.add_argument(
        "--broker-url", default=os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER_URL)
    )
    parser.add_argument("--out", default="", help="default var/bench/latest.json (fleet.json)")
    parser.add_argument("--var-dir", default=str(ROOT / "var" / "bench" / "run"))
    parser.add_argument("--web-workers", type=int, default=0, help="default: 2 × CPU cores")
    parser.add_argument("--worker-class", default="gthread", choices=("gthread", "sync"))
    parser.add_argument("--threads", type=int, default=2, help="threads per gthread worker")
    parser.add_argument("--worker-concurrency", type=int, default=1, help="Celery pool processes")
    parser.add_argument("--keep-db", action="store_true", help="leave the bench database behind")
    parser.add_argument(
        "--only",
        default="all",
        choices=tuple(ONLY),
        help="ingest: only B_copy, B_row, B_noop, P1, P2 and P10 (the ingest doors); "
        "import: only P11; overview: only POV; compaction: only B_io and P6; "
        "list: only B_page, B_django and P5; memory: only P13; alerts: only PAL; "
        "pages: only PG1-PG3 (the chart pages in Chromium); "
        "storage (with --scale fleet): only the seed and its bytes per million calls; "
        "perf: only the rows of the ingest, overview and cache-report bars (B_copy, B_row, "
        "B_calls, P12, B_noop, P2, POV, P1, B_io, P6, P7, P10)",
    )
    parser.add_argument(
        "--scale",
        default=os.environ.get("BENCH_SCALE") or "default",
        choices=("default", "fleet"),
        help="fleet: 100,000 sessions / 5M calls and 2 web + 2 workers (bench.fleet)",
    )
    parser.add_argument(
        "--pooler",
        action="store_true",
        help="with --scale fleet: every web and worker process through a pgbouncer in "
        "transaction mode (Debian's, started and stopped by the bench)",
    )
    parser.add_argument(
        "--fleet-sessions",
        type=int,
        default=0,
        help="with --scale fleet: sessions to seed (50 calls each), default 100,000",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.out:
        name = "fleet.json" if args.scale == "fleet" else "latest.json"
        args.out = str(ROOT / "var" / "bench" / name)
    cleanup = Cleanup()
    cleanup.install_signal_handlers()
    try:
        if args.scale == "fleet":
            from bench.fleet import FleetBench

            FleetBench(args, cleanup).run()
        else:
            Bench(args, cleanup).run()
    finally:
        cleanup.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
