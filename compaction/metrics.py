"""Prometheus metrics computed from the database rows at scrape time.

Counters are derived from `CompactionRun` and `OverflowEvent` rows rather than kept in process
memory, so they add up across web and worker processes and hosts and survive a crash or restart.
The per-profile gauges (bands, spend, cache hit, relief states) are `compaction.fleet_metrics`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from compaction.fleet_metrics import FleetCollector
from compaction.models import Archive, CompactionRun, OverflowEvent
from telemetry.models import AgentSession

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Collectors of apps that build on compaction (the alerts' firing gauge), registered by their
# AppConfig.ready: compaction imports none of them.
EXTRA_COLLECTORS: list[Callable[[], Collector]] = []


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        runs = CounterMetricFamily(
            "compaction_runs", "Compaction runs by mode and status", labels=["mode", "status"]
        )
        for row in (
            CompactionRun.objects.values("mode", "status")
            .annotate(n=Count("id"))
            .order_by("mode", "status")
        ):
            runs.add_metric([row["mode"], row["status"]], row["n"])
        yield runs
        failures = CounterMetricFamily(
            "compaction_archive_failures",
            "Compaction runs whose archive failed (automatic ones compacted anyway, D5)",
            labels=["mode"],
        )
        for row in (
            CompactionRun.objects.exclude(archive_error="")
            .values("mode")
            .annotate(n=Count("id"))
            .order_by("mode")
        ):
            failures.add_metric([row["mode"]], row["n"])
        yield failures
        skipped = CounterMetricFamily(
            "compaction_relief_skipped",
            "Relief passes the worth-it rule skipped: they could not pay back their cache re-write"
            " within the session's typical remaining calls, or freed under the policy minimum",
            labels=["pass"],
        )
        counts = dict.fromkeys(("prune", "summarize"), 0)
        for names in CompactionRun.objects.exclude(skipped=[]).values_list("skipped", flat=True):
            for name in names or ():
                counts[name] = counts.get(name, 0) + 1
        for name, count in sorted(counts.items()):
            skipped.add_metric([name], count)
        yield skipped
        overflows = CounterMetricFamily(
            "compaction_overflows",
            "Context-length overflows reported by agents",
            labels=["recovered"],
        )
        for row in (
            OverflowEvent.objects.values("recovered").annotate(n=Count("id")).order_by("recovered")
        ):
            overflows.add_metric(["true" if row["recovered"] else "false"], row["n"])
        yield overflows
        # The calls ingested are the sessions' call counts, which retention keeps (it removes
        # raw calls, not what was ingested): a counter that never goes down, read from the
        # sessions alone.
        sessions = AgentSession.objects.aggregate(calls=Sum("calls_count"), n=Count("id"))
        yield CounterMetricFamily(
            "telemetry_calls", "LLM calls ingested", value=sessions["calls"] or 0
        )
        yield GaugeMetricFamily("telemetry_sessions", "Agent sessions known", value=sessions["n"])
        yield GaugeMetricFamily(
            "compaction_archives", "Archives kept", value=Archive.objects.count()
        )


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text. With `METRICS_TOKEN` set, scrapers must send `Authorization: Bearer …`."""
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            response = HttpResponse(
                "metrics need Authorization: Bearer <METRICS_TOKEN>\n", status=401
            )
            response["WWW-Authenticate"] = "Bearer"
            return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(FleetCollector())
    for make in EXTRA_COLLECTORS:
        registry.register(make())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE)
