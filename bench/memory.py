"""P13: gunicorn worker memory after maximal OTLP exports, against the same workers' baseline.

A gunicorn of its own, started as production starts it (`console.gunicorn_conf`: gthread
workers and threads, `WEB_CONCURRENCY` of them) with `WEB_MAX_REQUESTS=0`, so no worker is
replaced during the measurement: the figure is the code's, not the safety net's.

- Baseline: each worker's resident memory (VmRSS) after a warm-up of small exports.
- Then `p13_requests` maximal exports (100 in a full run): gzip protobuf traces at the caps,
  OTLP_MAX_ITEMS_PER_EXPORT items (one resource, one scope, the rest GenAI call spans, each of
  new calls) near OTLP_MAX_DECODED_BYTES once inflated, sent by one client per worker.
- After: the same workers' RSS again. Bar: after ≤ 1.5 × baseline, summed over the workers and
  for the worst single worker; the figures are in the results' `P13` measurement.
"""

from __future__ import annotations

import gzip
import http.client
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.services import pool_children, start_gunicorn, status_kb

if TYPE_CHECKING:
    from bench.run import Bench

BAR = 1.5
SPANS_PER_TRACE = 10
WARMUP_PER_WORKER = 10
ENVELOPES = 2  # the resource and the scope count against the item cap too


@dataclass(frozen=True)
class Export:
    body: bytes  # gzipped
    decoded_bytes: int
    spans: int


def build_export(label: str, spans: int, decoded_bytes: int, seed: int) -> Export:
    """One gzip protobuf traces export of `spans` GenAI call spans, padded (a `gen_ai.prompt`
    text per span, random so it compresses like text, not like zeros) to about
    `decoded_bytes` once inflated."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def make(pads: list[str]) -> bytes:
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.add(
            key="service.name", value=AnyValue(string_value=f"bench-{label}")
        )
        scope = resource.scope_spans.add()
        for n in range(spans):
            span = scope.spans.add(
                trace_id=(seed * 1_000_003 + n // SPANS_PER_TRACE).to_bytes(16, "big"),
                span_id=(n + 1).to_bytes(8, "big"),
                name="chat claude-sonnet-4-5",
                start_time_unix_nano=time.time_ns() - 60 * 10**9 + n,
                end_time_unix_nano=time.time_ns() - 59 * 10**9 + n,
            )
            for key, value in (
                ("gen_ai.conversation.id", AnyValue(string_value=f"{label}-{seed}")),
                ("gen_ai.operation.name", AnyValue(string_value="chat")),
                ("gen_ai.provider.name", AnyValue(string_value="anthropic")),
                ("gen_ai.request.model", AnyValue(string_value="claude-sonnet-4-5")),
                ("gen_ai.usage.input_tokens", AnyValue(int_value=20_000 + n)),
                ("gen_ai.usage.cache_read.input_tokens", AnyValue(int_value=18_000)),
                ("gen_ai.usage.output_tokens", AnyValue(int_value=400)),
                ("gen_ai.prompt", AnyValue(string_value=pads[n])),
            ):
                span.attributes.append(KeyValue(key=key, value=value))
        data: bytes = request.SerializeToString()
        return data

    bare = len(make([""] * spans))
    per_span = max(0, (decoded_bytes - bare) // max(spans, 1) - 4)
    rng = random.Random(seed)
    pads = []
    for _ in range(spans):
        chunk = rng.randbytes(1024).hex()  # 2 kB of text, repeated within its span only
        pads.append((chunk * (per_span // len(chunk) + 1))[:per_span])
    data = make(pads)
    return Export(gzip.compress(data, compresslevel=1), len(data), spans)


def post(port: int, auth: str, export: Export) -> int:
    """One export on a connection of its own (so the kernel spreads them over the workers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request(
            "POST",
            "/api/v1/otlp/v1/traces",
            body=export.body,
            headers={
                "Authorization": auth,
                "Content-Type": "application/x-protobuf",
                "Content-Encoding": "gzip",
                "Connection": "close",
            },
        )
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def rss_mb(pid: int) -> float:
    kb = status_kb(pid, "VmRSS")
    if kb is None:
        raise RuntimeError(f"no VmRSS for process {pid}")
    return kb / 1024


def send_all(
    port: int,
    auth: str,
    exports: list[tuple[str, int]],
    clients: int,
    make: Callable[[str, int], Export],
) -> list[int]:
    """Send the exports built by `make(label, seed)` from `clients` threads; their statuses."""
    statuses: list[int] = []
    lock = threading.Lock()
    todo = list(exports)

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                label, seed = todo.pop()
            status = post(port, auth, make(label, seed))
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def measure_p13(bench: Bench) -> None:
    from django.conf import settings

    from bench.run import Bar

    s = bench.sizes
    workers = 2
    items = s.p13_items or int(settings.OTLP_MAX_ITEMS_PER_EXPORT)
    decoded = s.p13_bytes or int(settings.OTLP_MAX_DECODED_BYTES * 0.95)
    spans = items - ENVELOPES
    env = {**os.environ, "WEB_CONCURRENCY": str(workers), "WEB_MAX_REQUESTS": "0"}
    server, port = start_gunicorn(
        env,
        bench.log_dir,
        bench.cleanup,
        workers=workers,
        worker_class="gthread",
        threads=2,
        config="python:console.gunicorn_conf",
        name="gunicorn-p13",
    )
    auth = dict(bench.auth)["Authorization"]
    pids = pool_children(server.process.pid)

    def small(label: str, seed: int) -> Export:
        return build_export(label, SPANS_PER_TRACE, 0, seed)

    def maximal(label: str, seed: int) -> Export:
        return build_export(label, spans, decoded, seed)

    warm = send_all(
        port, auth, [("p13-warm", n) for n in range(WARMUP_PER_WORKER * workers)], workers, small
    )
    time.sleep(1)
    before = {pid: rss_mb(pid) for pid in pids}
    sample = maximal("p13-sample", 0)
    began = time.monotonic()
    statuses = send_all(
        port, auth, [("p13-max", n + 1) for n in range(s.p13_requests)], workers, maximal
    )
    wall = time.monotonic() - began
    time.sleep(1)
    after_pids = pool_children(server.process.pid)
    after = {pid: rss_mb(pid) for pid in after_pids}
    server.stop()
    ratio = sum(after.values()) / sum(before.values())
    worst = max(after[p] / before[p] for p in pids if p in after) if set(pids) & set(after) else 0
    refused = [x for x in statuses + warm if x != 200]
    bench.measurement(
        "P13",
        rss_ratio=ratio,
        worst_worker_ratio=worst,
        baseline_rss_mb={str(p): round(v, 1) for p, v in before.items()},
        after_rss_mb={str(p): round(v, 1) for p, v in after.items()},
        workers_replaced=sorted(set(pids) ^ set(after_pids)),
        requests=s.p13_requests,
        items_per_export=items,
        decoded_bytes_per_export=sample.decoded_bytes,
        wire_bytes_per_export=len(sample.body),
        non_200=refused[:10],
        wall_s=wall,
    )
    bench.bars.append(
        Bar(
            "P13",
            f"gunicorn worker RSS after {s.p13_requests} maximal OTLP exports ({items} items, "
            f"{sample.decoded_bytes / 2**20:.1f} MB inflated, {len(sample.body) / 2**20:.1f} MB "
            f"gzip), {workers} workers",
            f"{sum(after.values()):,.0f} MB",
            f"warm-up {sum(before.values()):,.0f} MB",
            ratio,
            f"≤ {BAR} ×",
            ratio <= BAR and worst <= BAR and not refused and set(pids) == set(after_pids),
            f"worst worker {worst:.2f} ×",
        )
    )
