"""POV: the overview page (the console's home) at 10,000 and at 1,000,000 calls.

The calls are seeded server-side (INSERT … SELECT, spread over the last 30 days), the hour
rollups rebuilt from them (`telemetry.rollups.rebuild_rollups`, what the migration does), then:

- the overview's query count at both sizes (Django's test client, captured queries): the page
  must never read the calls, so it must not grow;
- the page's p95 over HTTP (`/?range=30d`, gunicorn as for P3/P5) against **B_django**, the
  same gunicorn rendering a console page that reads nothing, as P5 is measured (runs
  alternating); bar ≤ 2 ×;
- the overview's own reads in-process (`load_overview`, every query the page's figures need)
  against **B_rollup**, the raw `SELECT *` of the same hour buckets (the rows the page
  aggregates) on one connection, same runs; bar ≤ 2 ×.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import bulk
from bench.load import Request, latency_summary, sequential
from bench.services import pool_children

if TYPE_CHECKING:
    from bench.run import Bench

PATH = "/?range=30d"
PREFIX = "ov-"


def _seed(bench: Bench, profile_id: int, sessions: int, start: int, turns: int) -> int:
    """`sessions` × `turns` calls (one a turn) for new sessions, at times over the last 30 d."""
    from telemetry.models import LLMCall

    bulk.seed_sessions(profile_id, PREFIX, sessions, start=start)
    rate = "0.000003::numeric"
    return bulk.insert_select(
        LLMCall,
        {
            "session_id": "s.id",
            "turn": "t",
            "call": "0",
            "model": "'claude-sonnet-4-5-20250929'",
            "provider": "'anthropic'",
            "uncached_input": "500",
            "cache_read": "20000",
            "cache_write_5m": "1000",
            "cache_write_1h": "0",
            "output": "300",
            "reported_cache": "TRUE",
            "context_tokens": "21500",
            "raw_usage": "'{}'::jsonb",
            "flags": "NULL",
            "at": "now() - ((s.id * 7919 + t * 104729) %% 2592000) * interval '1 second'",
            "cost_uncached_input": f"500 * {rate}",
            "cost_cache_read": f"2000 * {rate}",
            "cost_cache_write_5m": f"1250 * {rate}",
            "cost_cache_write_1h": "0",
            "cost_output": f"1500 * {rate}",
            "cost_usd": f"5250 * {rate}",
            "no_cache_cost_usd": f"23000 * {rate}",
            "payload_hash": "sha256(convert_to('ov-' || s.id || '-' || t, 'UTF8'))",
        },
        f"telemetry_agentsession s, generate_series(0, {turns - 1}) AS t "
        "WHERE s.external_id LIKE %s AND s.turns_count = 0 AND s.profile_id = %s "
        "AND NOT EXISTS (SELECT 1 FROM telemetry_llmcall x WHERE x.session_id = s.id)",
        [PREFIX + "%", profile_id],
    )


def _figures() -> int:
    """What ingest would have left on the new seeded sessions: calls, cost, last seen and a
    pressure from 0 to 1.1 (some over the window; one in twenty unknown), so the band counts and
    the top sessions by cost and by pressure have every session to rank."""
    from django.db import connection

    with connection.cursor() as cursor:
        # Statistics of the bulk load first: without them the planner took one session to match
        # and re-ran the calls' GROUP BY once per session (for 10,000 sessions: hours).
        cursor.execute("ANALYZE telemetry_agentsession")
        cursor.execute(f"ANALYZE {bulk.hot_calls()}")
        cursor.execute(
            "UPDATE telemetry_agentsession s SET turns_count = c.n, calls_count = c.n, "
            "cost_usd = c.cost, no_cache_cost_usd = c.no_cache, last_seen_at = c.last, "
            "pressure = CASE WHEN s.id %% 20 = 0 THEN NULL "
            "ELSE ((s.id * 7919) %% 1100) / 1000.0 END "
            "FROM (SELECT session_id, count(*) AS n, sum(cost_usd) AS cost, "
            "sum(no_cache_cost_usd) AS no_cache, max(at) AS last FROM telemetry_llmcall "
            "GROUP BY session_id) c "
            "WHERE c.session_id = s.id AND s.external_id LIKE %s AND s.turns_count = 0",
            [PREFIX + "%"],
        )
        return int(cursor.rowcount)


def _vacuum_sessions() -> None:
    """What autovacuum does within a minute of a bulk load: mark the sessions' pages
    all-visible, so the band counts read the `(profile, pressure, id)` index alone, as they do
    on a fleet whose idle sessions were vacuumed. Right after rewriting every session row
    (before autovacuum) each per-profile count reads the table's pages instead."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) telemetry_agentsession")


def _settle_calls() -> None:
    """What autovacuum does within a minute or two of the seed's million calls, done before
    the next measurement instead of during it: P1, which follows, ran while autovacuum walked the
    calls table and its indexes (its three runs 11.7k, 6.5k and 8.8k rows/s in one full run,
    17.5k in `--only ingest` on the same hour's machine)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {bulk.hot_calls()}")


def _queries(bench: Bench) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    bench.client.get(PATH)
    with CaptureQueriesContext(connection) as ctx:
        response = bench.client.get(PATH)
    assert response.status_code == 200, response.status_code
    assert not any("telemetry_llmcall" in q["sql"] for q in ctx.captured_queries)
    return len(ctx.captured_queries)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes `pids` have used so far (/proc/<pid>/stat)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def measure_overview(bench: Bench) -> None:
    from bench.run import Bar, _ms
    from bench.urls import DJANGO_PATH
    from console.overview import load_overview
    from telemetry.models import AgentProfile
    from telemetry.rollups import rebuild_rollups

    smoke = bench.args.smoke
    turns = 100
    small_sessions, big_sessions = (10, 50) if smoke else (100, 10_000)
    profile, _ = AgentProfile.objects.get_or_create(name="bench-overview")
    seeded = _seed(bench, profile.pk, small_sessions, 0, turns)
    _figures()
    rebuild_rollups()
    small_calls = seeded
    counts = {f"{small_calls:,} calls": _queries(bench)}
    began = time.monotonic()
    seeded += _seed(bench, profile.pk, big_sessions - small_sessions, small_sessions, turns)
    _figures()
    seed_s = time.monotonic() - began
    began = time.monotonic()
    rows = rebuild_rollups()
    rebuild_s = time.monotonic() - began
    bulk.analyze()
    _vacuum_sessions()
    _settle_calls()
    counts[f"{seeded:,} calls"] = _queries(bench)
    constant = len(set(counts.values())) == 1

    def raw(conn: Any) -> float:
        began = time.perf_counter()
        found = conn.execute(
            "SELECT * FROM telemetry_hourlyusage WHERE hour >= now() - interval '30 days'"
        ).fetchall()
        assert found
        return (time.perf_counter() - began) * 1000

    s = bench.sizes
    raw_samples: list[float] = []
    page_samples: list[float] = []
    django_samples: list[float] = []
    reads: list[float] = []
    requests = [Request("GET", PATH, None, bench.page_headers)] * s.page_requests
    django_requests = [Request("GET", DJANGO_PATH, None, bench.page_headers)] * s.page_requests
    workers = pool_children(bench.gunicorn.process.pid)
    # CPU per request beside the wall times: on a shared machine the wall p95 is mostly waiting
    # for a core. The page's and B_django's in the web workers, B_rollup's in this thread (its
    # driver work); none counts PostgreSQL's own.
    cpu = {"page": 0.0, "django": 0.0, "rollup": 0.0}
    # each measured on a connection whose worker served it first (warm-up, not counted): the
    # workers' first requests are not what a running console serves
    mark = [0.0]

    def ready() -> None:
        mark[0] = _cpu_s(workers)

    for _ in range(max(1, s.runs)):
        # alternating, so drift in the machine hits both alike
        with bench.raw() as conn:  # one connection, as the page's worker keeps one
            raw(conn)
            began = time.thread_time()
            raw_samples += [raw(conn) for _ in range(s.page_requests)]
            cpu["rollup"] += time.thread_time() - began
        latencies, statuses, _body = sequential(
            bench.port, requests, warm=requests[:3], ready=ready
        )
        cpu["page"] += _cpu_s(workers) - mark[0]
        assert set(statuses) == {200}, statuses
        page_samples += latencies
        latencies, statuses, _body = sequential(
            bench.port, django_requests, warm=django_requests[:3], ready=ready
        )
        cpu["django"] += _cpu_s(workers) - mark[0]
        assert set(statuses) == {200}, statuses
        django_samples += latencies
        load_overview("30d")  # warm, as the page's workers are
        for _i in range(s.page_requests):
            began = time.perf_counter()
            load_overview("30d")
            reads.append((time.perf_counter() - began) * 1000)
    per_request = {
        name: round(seconds * 1000 / (max(1, s.runs) * s.page_requests), 2)
        for name, seconds in cpu.items()
    }
    b_rollup = latency_summary(raw_samples)
    b_django = latency_summary(django_samples)
    page = latency_summary(page_samples)
    own = latency_summary(reads)
    bench.baseline("B_rollup", **b_rollup, rows=rows, cpu_ms=per_request["rollup"])
    bench.baseline("B_django_overview", **b_django, cpu_ms=per_request["django"])
    bench.measurement(
        "POV",
        overview_page=page,
        vs_B_django=page["p95_ms"] / b_django["p95_ms"],
        reads_vs_B_rollup=own["p95_ms"] / b_rollup["p95_ms"],
        cpu_ms_per_request=per_request,
        overview_reads=own,
        query_counts=counts,
        calls=seeded,
        seed_s=round(seed_s, 1),
        rollup_rebuild_s=round(rebuild_s, 2),
        rollup_rows=rows,
    )
    ratio = page["p95_ms"] / b_django["p95_ms"]
    reads_ratio = own["p95_ms"] / b_rollup["p95_ms"]
    bench.bars.append(
        Bar(
            "POV",
            f"overview page (30 d) at {seeded:,} calls: p95 (p50 {_ms(page['p50_ms'])}); "
            f"queries {' vs '.join(map(str, counts.values()))}; its reads alone "
            f"(load_overview, in-process) p95 {_ms(own['p95_ms'])} = {reads_ratio:.2f} × "
            f"B_rollup p95 {_ms(b_rollup['p95_ms'])}",
            _ms(page["p95_ms"]),
            f"B_django p95 {_ms(b_django['p95_ms'])}",
            ratio,
            "≤ 2 ×; reads ≤ 2 × B_rollup; same query count",
            ratio <= 2 and reads_ratio <= 2 and constant,
            f"CPU per request: page {per_request['page']} ms, B_django (a console page with "
            f"no reads) {per_request['django']} ms, B_rollup {per_request['rollup']} ms; "
            f"rollups rebuilt from {seeded:,} calls in {rebuild_s:.1f} s ({rows:,} hour rows)",
        )
    )
