"""P10: GenAI spans stored per second through the OpenTelemetry SDK's own exporter.

Each client is its own process (forked, like `bench.load`) running what an instrumented app
runs: a `TracerProvider` whose `BatchSpanProcessor` hands the `OTLPSpanExporter`
(http/protobuf) 512 spans an export, posting to `/api/v1/otlp/v1/traces` with the agent key in
`Authorization`. A client makes as many GenAI `chat` spans per run as a P1 client posts records
(in traces of 10 under an `invoke_agent` span, 50 calls a session) before the clock starts, as
P1's clients build their bodies before it; from behind a barrier it hands them to the batch
processor as the spans' ends would, and the clock stops when every client's `force_flush` has
returned (the SDK's encoding and posting run under it). The request bodies' bytes are counted
as sent, for the throughput in MB/s that OTel backends are sized by. Integrity is counted in the
database like P1's: every span one call, none twice.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.run import Bench

SPANS_PER_TRACE = 10
SPANS_PER_SESSION = 50
BATCH = 512


@dataclass
class ClientReport:
    spans: int = 0
    exports: int = 0
    failed_exports: int = 0
    start: float = 0.0
    end: float = 0.0
    cpu_s: float = 0.0
    body_bytes: int = 0
    errors: list[str] = field(default_factory=list)


def _chat_attributes(session: str, made: int) -> dict[str, Any]:
    return {
        "gen_ai.conversation.id": session,
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.usage.input_tokens": 20_000 + made,
        "gen_ai.usage.cache_read.input_tokens": 18_000,
        "gen_ai.usage.cache_creation.input_tokens": 1_500,
        "gen_ai.usage.output_tokens": 400,
    }


def make_spans(tracer: Any, label: str, spans: int) -> int:
    """`spans` GenAI spans as P10's clients make them: traces of SPANS_PER_TRACE `chat` spans
    under an `invoke_agent` span, SPANS_PER_SESSION calls a session `{label}-s<n>`."""
    made = 0
    while made < spans:
        session = f"{label}-s{made // SPANS_PER_SESSION}"
        with tracer.start_as_current_span(
            "invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            for _ in range(min(SPANS_PER_TRACE, spans - made)):
                with tracer.start_as_current_span(
                    "chat claude-sonnet-4-5", attributes=_chat_attributes(session, made)
                ):
                    made += 1
    return made


def export_bodies(label: str, exports: int) -> list[bytes]:
    """`exports` protobuf bodies of BATCH spans each, as the SDK's exporter encodes P10's spans
    (for `bench.inprocess --kind otlp`)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    kept = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"bench-{label}"}))
    provider.add_span_processor(SimpleSpanProcessor(kept))
    make_spans(provider.get_tracer("bench.otlp"), label, exports * BATCH)
    finished = kept.get_finished_spans()
    return [
        encode_spans(finished[i : i + BATCH]).SerializeToString()
        for i in range(0, exports * BATCH, BATCH)
    ]


def _client(url: str, key: str, label: str, spans: int, barrier: Any, results: Any) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    report = ClientReport()

    class CountingExporter(OTLPSpanExporter):
        def export(self, batch: Sequence[Any]) -> SpanExportResult:
            result = super().export(batch)
            report.exports += 1
            if result is not SpanExportResult.SUCCESS:
                report.failed_exports += 1
            return result

    exporter = CountingExporter(
        endpoint=f"{url}/api/v1/otlp/v1/traces",
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    post = exporter._client.export  # the request body, as sent (OTel backends size by it)

    def counted(data: bytes, *args: Any, **kwargs: Any) -> Any:
        report.body_bytes += len(data)
        return post(data, *args, **kwargs)

    exporter._client.export = counted  # type: ignore[method-assign]
    # The application's spans are made before the clock starts, as P1's bodies are built: what
    # runs under the clock is the SDK's batch processor and exporter (encoding and posting).
    made_spans = InMemorySpanExporter()
    maker = TracerProvider(resource=Resource.create({"service.name": f"bench-{label}"}))
    maker.add_span_processor(SimpleSpanProcessor(made_spans))
    made = make_spans(maker.get_tracer("bench.otlp"), label, spans)
    finished = made_spans.get_finished_spans()
    processor = BatchSpanProcessor(
        exporter,
        max_queue_size=len(finished) + BATCH,
        max_export_batch_size=BATCH,
        schedule_delay_millis=200,
    )
    barrier.wait()
    cpu0 = time.process_time()
    report.start = time.monotonic()
    for span in finished:
        processor.on_end(span)
    if not processor.force_flush(600_000):
        report.errors.append("force_flush timed out")
    report.end = time.monotonic()
    report.cpu_s = time.process_time() - cpu0
    report.spans = made
    processor.shutdown()  # type: ignore[no-untyped-call]
    results.put(report)


@dataclass
class P10Run:
    wall_s: float
    spans: int
    exports: int
    failed_exports: int
    client_cpu_s: float
    body_bytes: int
    errors: list[str]


def export_spans(port: int, key: str, label: str, clients: int, spans: int) -> P10Run:
    """`clients` processes, `spans` GenAI spans each, through the SDK's batch exporter."""
    import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401  (before fork)
    import opentelemetry.sdk.trace  # noqa: F401

    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients)
    results: Any = ctx.Queue()
    url = f"http://127.0.0.1:{port}"
    processes = [
        ctx.Process(target=_client, args=(url, key, f"{label}-c{c}", spans, barrier, results))
        for c in range(clients)
    ]
    for process in processes:
        process.start()
    reports: list[ClientReport] = [results.get(timeout=900) for _ in processes]
    for process in processes:
        process.join()
    return P10Run(
        wall_s=max(r.end for r in reports) - min(r.start for r in reports),
        spans=sum(r.spans for r in reports),
        exports=sum(r.exports for r in reports),
        failed_exports=sum(r.failed_exports for r in reports),
        client_cpu_s=sum(r.cpu_s for r in reports),
        body_bytes=sum(r.body_bytes for r in reports),
        errors=[e for r in reports for e in r.errors][:10],
    )


def measure_p10(bench: Bench) -> None:
    """P10 against P1's load: ≥ 0.5 × P1's rows/s, 0 lost, 0 duplicated.

    Each P10 run follows a run of P1's load (`P1_adjacent`), as B_copy's runs alternate with
    P1's: on a shared machine whose capacity drifts over the minutes of a bench, the ratio is
    of the two loads measured side by side. P1's own figure (earlier in the run) is reported
    beside it."""
    from bench.load import median
    from bench.run import Bar

    s = bench.sizes
    clients = s.p1_clients
    per_client = s.p1_posts * s.p1_batch  # as many calls as a P1 client posts records
    sent = clients * per_client
    runs: list[P10Run] = []
    adjacent: list[float] = []
    losses: list[dict[str, Any]] = []

    def one(run: int) -> None:
        batch = bench.batched(f"p10p1-r{run}")
        assert not batch.errors, batch.errors
        label = f"p10-r{run}"
        key = dict(bench.auth)["Authorization"].removeprefix("Bearer ")
        result = export_spans(bench.port, key, label, clients, per_client)
        lost, duplicated = bench.check_stored(label, sent)
        losses.append(
            {
                "lost": lost,
                "duplicated": duplicated,
                "failed_exports": result.failed_exports,
                "errors": result.errors,
            }
        )
        if run >= 0:
            runs.append(result)
            adjacent.append(sent / batch.wall_s)

    bench.runs(one)
    rates = [sent / r.wall_s for r in runs]
    rate = median(rates)
    p1_run = bench.results["measurements"]["P1"]["rows_per_s"]
    p1 = median(adjacent)
    lost = sum(x["lost"] for x in losses)
    duplicated = sum(x["duplicated"] for x in losses)
    failed = sum(x["failed_exports"] for x in losses)
    cores = median([r.client_cpu_s / r.wall_s for r in runs])
    mb_per_s = median([r.body_bytes / r.wall_s / 1e6 for r in runs])
    body_kb = median([r.body_bytes / max(r.exports, 1) / 1024 for r in runs])
    bench.measurement(
        "P10",
        spans_per_s=rate,
        runs=rates,
        spans_per_run=sent,
        exports_per_run=median([r.exports for r in runs]),
        integrity=losses,
        client_cores=cores,
        request_body_mb_per_s=mb_per_s,
        request_body_kb=body_kb,
        P1_adjacent=p1,
        P1_adjacent_runs=adjacent,
        vs_P1=rate / p1,
        vs_P1_of_the_run=rate / p1_run,
    )
    bench.bars.append(
        Bar(
            "P10",
            f"GenAI spans via the OTel SDK exporter (http/protobuf, batch processor, {BATCH} "
            f"spans/export), {clients} clients ({sent:,} spans/run); lost {lost}, "
            f"duplicated {duplicated}",
            f"{rate:,.0f} spans/s",
            f"P1 beside it {p1:,.0f} rows/s",
            rate / p1,
            "≥ 0.5 ×; 0 lost, 0 dup",
            rate / p1 >= 0.5 and lost == 0 and duplicated == 0 and failed == 0,
            f"{rate / p1_run:.2f} × P1 of the run ({p1_run:,.0f} rows/s); "
            f"{mb_per_s:.1f} MB/s of request bodies ({body_kb:,.0f} KB an export, "
            f"uncompressed protobuf); clients used {cores:.2f} cores (the SDK's batch "
            "processor and exporter: encoding and posting; the spans are made before the clock)",
        )
    )
