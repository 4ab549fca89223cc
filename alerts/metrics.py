"""`/metrics` families of the alerts: what fires now, and the outbox's state."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alerts.firing import METRICS
from alerts.models import Alert, Notification


class AlertCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        firing = GaugeMetricFamily(
            "alerts_firing", "Alerts firing now, by the metric of their rule", labels=["metric"]
        )
        counts = dict.fromkeys(METRICS, 0)
        for row in (
            Alert.objects.filter(resolved_at__isnull=True)
            .values("rule__metric")
            .annotate(n=Count("id"))
            .order_by()
        ):
            counts[row["rule__metric"]] = row["n"]
        for metric, count in sorted(counts.items()):
            firing.add_metric([metric], count)
        yield firing
        outbox = GaugeMetricFamily(
            "alerts_notifications",
            "Alert notifications by delivery status (failed: every attempt failed)",
            labels=["status"],
        )
        by_status = dict.fromkeys(Notification.Status.values, 0)
        for row in Notification.objects.values("status").annotate(n=Count("id")).order_by():
            by_status[row["status"]] = row["n"]
        for status, count in sorted(by_status.items()):
            outbox.add_metric([status], count)
        yield outbox
