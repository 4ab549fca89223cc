"""Per-profile gauges on `/metrics`, computed from the database at scrape time.

What Grafana alerts on per profile: sessions per pressure band, spend and the calls it could not
price, the cache hit ratio, and sessions whose automatic relief is pending (and of them, pending
too long), failing or given up (`compaction.relief_state`). Each family is one aggregate query
(grouped by profile, and band), never a query per session; every profile gets a sample of the
count families, zero included, so an alert sees 0 rather than no series.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timedelta
from decimal import Decimal

from django.db.models import Case, CharField, Count, Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from compaction.relief_state import ReliefCounts, profile_policies, relief_counts
from telemetry.band_sql import BANDS, band_case
from telemetry.models import AgentProfile, AgentSession, HourlyUsage
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import global_policy

# Sessions count in a band when the agent reported within this long: an idle session's stored
# pressure says nothing about what is about to overflow.
ACTIVE = timedelta(hours=1)


def band_expression(policies: Mapping[int, PolicyValues]) -> Case:
    """`telemetry.pressure.pressure_band` as SQL (`telemetry.band_sql`), each profile under its
    own thresholds; a profile created after `policies` was read, under the global ones."""
    return band_case(policies, fallback=global_policy(), label=str, output_field=CharField())


class FleetCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        names = dict(AgentProfile.objects.values_list("pk", "name"))
        policies = profile_policies()
        yield self._bands(names, policies)
        yield from self._spend(names)
        yield self._cache_hit(names)
        yield from self._relief(names, policies)

    def _bands(self, names: dict[int, str], policies: Mapping[int, PolicyValues]) -> Metric:
        family = GaugeMetricFamily(
            "telemetry_sessions_in_band",
            "Sessions that reported within the last hour, by profile and pressure band",
            labels=["profile", "band"],
        )
        counts = {(pk, band): 0 for pk in names for band in BANDS}
        rows = (
            AgentSession.objects.filter(last_seen_at__gte=timezone.now() - ACTIVE)
            .annotate(band=band_expression(policies))
            .values("profile_id", "band")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for row in rows:
            counts[(row["profile_id"], row["band"])] = row["n"]
        for (pk, band), n in sorted(counts.items()):
            if pk in names:
                family.add_metric([names[pk], band], n)
        return family

    def _spend(self, names: dict[int, str]) -> Iterator[Metric]:
        spend = GaugeMetricFamily(
            "telemetry_spend_usd",
            "Spend of the priced calls ingested, USD, by profile (unpriced calls count zero)",
            labels=["profile"],
        )
        unpriced = GaugeMetricFamily(
            "telemetry_unpriced_calls",
            "Calls ingested whose model has no price in the catalogue, by profile",
            labels=["profile"],
        )
        sums = {
            row["profile_id"]: row
            for row in HourlyUsage.objects.values("profile_id")
            .annotate(cost=Sum("cost_usd"), unpriced=Sum("unpriced_calls"))
            .order_by()
        }
        for pk, name in sorted(names.items(), key=lambda item: item[1]):
            row = sums.get(pk, {})
            spend.add_metric([name], float(row.get("cost") or Decimal(0)))
            unpriced.add_metric([name], row.get("unpriced") or 0)
        yield spend
        yield unpriced

    def _cache_hit(self, names: dict[int, str]) -> Metric:
        family = GaugeMetricFamily(
            "telemetry_cache_hit_ratio",
            "Cache reads / context tokens of the calls that reported cache fields, in the"
            " current and the previous UTC hour, by profile (no sample: no such call)",
            labels=["profile"],
        )
        since = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
        rows = (
            HourlyUsage.objects.filter(hour__gte=since, cache_reported_calls__gt=0)
            .values("profile_id")
            .annotate(read=Sum("cache_read_reported"), total=Sum("cache_denominator"))
            .order_by()
        )
        for row in sorted(rows, key=lambda row: names.get(row["profile_id"], "")):
            if row["profile_id"] in names:
                total = row["total"] or 0
                family.add_metric(
                    [names[row["profile_id"]]], (row["read"] or 0) / total if total else 0.0
                )
        return family

    def _relief(
        self, names: dict[int, str], policies: Mapping[int, PolicyValues]
    ) -> Iterator[Metric]:
        families = {
            state: GaugeMetricFamily(
                f"compaction_relief_{state}_sessions",
                help_text,
                labels=["profile"],
            )
            for state, help_text in (
                ("pending", "Sessions whose automatic relief is queued or not yet asked"),
                (
                    "failing",
                    "Sessions over their threshold whose latest automatic relief failed"
                    " (the sweeper retries with backoff)",
                ),
                (
                    "given_up",
                    "Sessions over their threshold whose automatic relief failed"
                    " RELIEF_RETRY_MAX_ATTEMPTS times in a row (the sweeper stopped)",
                ),
                (
                    "overdue",
                    "Pending sessions whose relief job was asked for more than"
                    " RELIEF_PENDING_TOO_LONG_SECONDS ago and has not finished",
                ),
            )
        }
        counts = relief_counts(policies)
        for pk, name in sorted(names.items(), key=lambda item: item[1]):
            per_profile = counts.get(pk, ReliefCounts())
            for state, family in families.items():
                family.add_metric([name], getattr(per_profile, state))
        yield from families.values()
