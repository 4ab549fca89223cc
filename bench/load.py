"""HTTP load from client processes on loopback, and the statistics the table reports.

Each client is its own process (forked, so request bodies are built before the clock starts and
never pickled) holding one keep-alive `http.client` connection and sending its requests one after
another. The processes start together behind a barrier. Each reports its latencies, the statuses
it got, what the responses said (for ingest: created/duplicates) and the CPU it used, so the
table can show whether the client, not the server, was the limit.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing as mp
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class ClientReport:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    created: int = 0
    duplicates: int = 0
    other_items: int = 0
    cpu_s: float = 0.0
    start: float = 0.0
    end: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass
class LoadResult:
    clients: int
    requests: int
    wall_s: float
    latencies_ms: list[float]
    statuses: dict[int, int]
    created: int
    duplicates: int
    other_items: int
    client_cpu_s: float
    errors: list[str]
    # the machine's idle share while the load ran, and when the first client finished
    idle_share: float = 0.0
    first_end_s: float = 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0

    @property
    def client_cores(self) -> float:
        """CPU the clients used, in cores (client CPU seconds / wall seconds)."""
        return self.client_cpu_s / self.wall_s if self.wall_s else 0.0


def _client(
    port: int,
    requests: Sequence[Request],
    parse_items: bool,
    barrier: Any,
    results: Any,
) -> None:
    report = ClientReport()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    barrier.wait()
    cpu0 = time.process_time()
    report.start = time.monotonic()
    for req in requests:
        began = time.perf_counter()
        try:
            conn.request(req.method, req.path, body=req.body, headers=dict(req.headers))
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            report.errors.append(f"{req.method} {req.path}: {type(exc).__name__}: {exc}")
            conn.close()
            continue
        report.latencies_ms.append((time.perf_counter() - began) * 1000)
        report.statuses[response.status] += 1
        if parse_items and response.status < 300:
            payload = json.loads(data)
            report.created += payload["created"]
            report.duplicates += payload["duplicates"]
            report.other_items += payload["conflicts"] + payload["invalid"]
        elif response.status >= 400 and len(report.errors) < 5:
            report.errors.append(f"{req.method} {req.path}: {response.status} {data[:300]!r}")
    report.end = time.monotonic()
    report.cpu_s = time.process_time() - cpu0
    conn.close()
    results.put(report)


def run_load(
    port: int, per_client: Sequence[Sequence[Request]], *, parse_items: bool = False
) -> LoadResult:
    """Send each client's requests from its own process, all clients at once."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(per_client))
    results: Any = ctx.Queue()
    processes = [
        ctx.Process(target=_client, args=(port, requests, parse_items, barrier, results))
        for requests in per_client
    ]
    idle0 = _cpu_idle()
    for process in processes:
        process.start()
    reports: list[ClientReport] = [results.get(timeout=900) for _ in processes]
    for process in processes:
        process.join()
    idle1 = _cpu_idle()
    latencies = [ms for r in reports for ms in r.latencies_ms]
    statuses: Counter[int] = Counter()
    for r in reports:
        statuses.update(r.statuses)
    return LoadResult(
        clients=len(per_client),
        requests=sum(len(r) for r in per_client),
        wall_s=max(r.end for r in reports) - min(r.start for r in reports),
        latencies_ms=latencies,
        statuses=dict(statuses),
        created=sum(r.created for r in reports),
        duplicates=sum(r.duplicates for r in reports),
        other_items=sum(r.other_items for r in reports),
        client_cpu_s=sum(r.cpu_s for r in reports),
        errors=[e for r in reports for e in r.errors][:10],
        idle_share=(idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]),
        first_end_s=min(r.end for r in reports) - min(r.start for r in reports),
    )


def _cpu_idle() -> tuple[int, int]:
    """(idle + iowait, all) jiffies of the machine so far, from /proc/stat (Linux)."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return 0, 0
    fields = [int(x) for x in first.split()[1:]]
    return fields[3] + fields[4], sum(fields)


def sequential(
    port: int,
    requests: Sequence[Request],
    *,
    warm: Sequence[Request] = (),
    ready: Callable[[], object] | None = None,
) -> tuple[list[float], Counter[int], bytes]:
    """Requests one at a time on one connection in this process: latencies, statuses, last body.
    `warm`: requests sent first on the same connection, not counted, then `ready()` is called: a
    keep-alive connection stays with one server worker, so the measured requests are served by
    a worker that has served these (a worker's first request compiles what it reads)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    for req in warm:
        conn.request(req.method, req.path, body=req.body, headers=dict(req.headers))
        conn.getresponse().read()
    if ready is not None:
        ready()
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    body = b""
    for req in requests:
        began = time.perf_counter()
        conn.request(req.method, req.path, body=req.body, headers=dict(req.headers))
        response = conn.getresponse()
        body = response.read()
        latencies.append((time.perf_counter() - began) * 1000)
        statuses[response.status] += 1
    conn.close()
    return latencies, statuses, body


# --- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of `values`."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": float(len(values)),
        "p50_ms": percentile(values, 50),
        "p95_ms": percentile(values, 95),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values) if values else math.nan,
    }


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan
