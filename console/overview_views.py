"""The overview page (the console's home): the fleet, or one profile, over a chosen period,
with the previous period beside on request; it refreshes its own figures (`overview_live`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Final
from urllib.parse import urlencode

from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from alerts.models import Alert
from compaction.relief_state import relief_counts_from, relief_counts_read
from console import charts, fleet_charts, overview_rows
from console.overview import ORIGINS, load_overview
from console.parts import held
from console.period_request import with_period
from console.periods import BUCKET_STEPS, Period, change, local_midnight
from console.roles import Role, require_role
from console.selectors.relief import relief_summary
from console.session_context import rendered_part
from telemetry.compiled import CompiledRead, Read
from telemetry.policy_rules import PolicyValues

# the overview's parts, each refreshed on its own when what it shows changed
OVERVIEW_PARTS: Final = ("totals", "bands", "charts", "compactions", "tops", "profiles")
# seconds between two refreshes of the overview (the page says so beside the switch)
REFRESH_SECONDS: Final = 30
TEMPLATE: Final = "console/overview.html"


def drill_link(
    period: Period, start: datetime, end: datetime, profile: str, sessions_url: str = ""
) -> str:
    """The sessions list of the sessions active in [start, end) (a whole bucket of `period`, in
    its zone: the same link on every refresh), of `profile` when one is chosen. `sessions_url`:
    the list's address when the caller already has it (a page of many links), else reversed."""
    query = _bucket_query(start, end, period.zone)
    if profile:
        query = f"{query}&{urlencode({'profile': profile})}"
    return f"{sessions_url or reverse('sessions')}?{query}"


@lru_cache(maxsize=4096)
def _bucket_query(start: datetime, end: datetime, zone: str) -> str:
    """The query string of the period [start, end) in `zone`: written once for a bucket drawn
    on every refresh (its words depend on the instants and the zone alone)."""
    return urlencode(Period(start, end, zone).query())


def _firing_query() -> QuerySet[Alert, dict[str, Any]]:
    """The alerts open now, counted: one row, or none when none is open (grouped by their
    `resolved_at`, which is NULL for every one of them, so the count is a compiled read)."""
    return (
        Alert.objects.filter(resolved_at__isnull=True)
        .order_by()
        .values("resolved_at")
        .annotate(n=Count("pk"))
        .values("n")
    )


_FIRING: Final = CompiledRead(Alert)


def _beside(policies: dict[int, PolicyValues]) -> list[Read]:
    """What the page shows beside the overview, read in the overview's last round trip: the
    relief counts under every profile's policy as the overview read them, and the alerts
    open now."""
    return [relief_counts_read(policies), _FIRING.read("open", (), _firing_query)]


def _context(request: HttpRequest, period: Period) -> dict[str, Any]:
    found = load_overview(period, request.GET.get("profile", ""), beside=_beside)
    relief_read, firing_read = found.beside
    firing = firing_read.dicts()
    starts = [b.start for b in found.buckets]
    step = BUCKET_STEPS[found.bucket]
    labels = dict(ORIGINS)
    zone, label = period.tz, period.zone_label()
    span = (period.start, period.end)  # each time axis spans the period
    previous_cost = None
    if found.previous_buckets is not None:
        # the previous period's n-th bucket drawn over this period's n-th
        before = [float(b.cost) for b in found.previous_buckets]
        previous_cost = (before + [0.0] * len(starts))[: len(starts)]
    figures = {
        "spend": fleet_charts.spend_figure(
            starts=starts,
            step=step,
            costs={key: [float(b.costs[key]) for b in found.buckets] for key in charts.COST_KEYS},
            saved=[float(b.saved) for b in found.buckets],
            zone=zone,
            zone_label=label,
            span=span,
            previous_cost=previous_cost,
        ),
        "hit": fleet_charts.hit_trend_figure(
            starts=starts,
            step=step,
            hit=[b.hit for b in found.buckets],
            zone=zone,
            zone_label=label,
            span=span,
        ),
        "compactions": fleet_charts.compactions_figure(
            days=[d.day for d in found.days],
            counts={key: [d.counts[key] for d in found.days] for key in labels},
            labels=labels,
            freed=[d.freed for d in found.days],
            zone=zone,
            zone_label=label,
            span=span,
        ),
    }
    tz = period.tz
    day_ends = [
        local_midnight(d.day.astimezone(tz).date() + timedelta(days=1), tz) for d in found.days
    ]
    # the spend and hit charts share their buckets, so their links (built once)
    url = reverse("sessions")
    bucket_links = [drill_link(period, b.start, b.end, found.profile, url) for b in found.buckets]
    drills = {
        "spend": bucket_links,
        "hit": bucket_links,
        "compactions": [
            drill_link(period, d.day, end, found.profile, url)
            for d, end in zip(found.days, day_ends, strict=True)
        ],
    }
    current, previous = found.totals, found.previous
    deltas = (
        {
            "cost": change(current.cost, previous.cost),
            "calls": change(current.calls, previous.calls),
            "saved": change(current.saved, previous.saved),
            "sessions": change(current.sessions, previous.sessions),
        }
        if previous is not None
        else {}
    )
    return {
        "o": found,
        "period": period,
        # the headline figures, summed over the buckets once
        "totals": current,
        "previous": previous,
        "deltas": deltas,
        "origins": ORIGINS,
        "figures": figures,
        "drills": drills,
        "band_counts": [
            (band, n, overview_rows.band_link(period, band, found.profile, url))
            for band, n in found.bands.items()
        ],
        # a row a bucket, as one text (`table_body`: the loop's lines, indented as in the page)
        "bucket_rows": overview_rows.table_body(
            overview_rows.bucket_rows(found.buckets, bucket_links), " " * 6
        ),
        "top_cost_rows": overview_rows.top_cost_rows(found.top_cost),
        "top_pressure_rows": overview_rows.top_pressure_rows(found.top_pressure),
        "profile_rows": overview_rows.profile_rows(found.lines, period, url),
        "relief": relief_summary(found.profile, found.policies, relief_counts_from(relief_read)),
        "nav": "overview",
        "refresh_seconds": REFRESH_SECONDS,
        "export_query": urlencode(
            period.query() | ({"profile": found.profile} if found.profile else {})
        ),
        # one indexed count: the alerts open now (the Alerts page lists them)
        "firing_alerts": firing[0]["n"] if firing else 0,
    }


@require_GET
@require_role(Role.VIEWER)
@with_period
def overview(request: HttpRequest, period: Period) -> HttpResponse:
    """Spend and cache savings over time, the cache-hit trend, sessions by pressure band now,
    compactions by origin, and the top sessions: read from the hour rollups; sessions whose
    automatic relief is in trouble now (`console.selectors.relief`)."""
    context = _context(request, period)
    context["parts"] = {
        name: mark_safe(rendered_part(name, context, request, template=TEMPLATE) or "")
        for name in OVERVIEW_PARTS
    }
    return render(request, TEMPLATE, context)


@require_GET
@require_role(Role.VIEWER)
@with_period
def overview_live(request: HttpRequest, period: Period) -> HttpResponse:
    """The overview's refresh: the parts whose content differs from what the browser holds
    (the `have` keys its parts carry, `console.parts`), out of band; nothing when none did."""
    context = _context(request, period) | {"oob": True}
    holds = held(request.GET.getlist("have"))
    html = "".join(
        rendered_part(name, context, request, holds, template=TEMPLATE) or ""
        for name in OVERVIEW_PARTS
    )
    response = HttpResponse(html)
    response["Cache-Control"] = "no-store"
    return response
