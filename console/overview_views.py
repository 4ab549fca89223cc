"""The overview page (the console's home): the fleet, or one profile, over a chosen range."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from alerts.models import Alert
from console import charts, fleet_charts
from console.overview import BUCKET_STEPS, ORIGINS, RANGES, load_overview
from console.roles import Role, require_role
from console.selectors.relief import relief_summary


@require_GET
@require_role(Role.VIEWER)
def overview(request: HttpRequest) -> HttpResponse:
    """Spend and cache savings over time, the cache-hit trend, sessions by pressure band now,
    compactions by origin, and the top sessions: read from the hour rollups; sessions whose
    automatic relief is in trouble now (`console.selectors.relief`)."""
    found = load_overview(request.GET.get("range", ""), request.GET.get("profile", ""))
    starts = [b.start for b in found.buckets]
    step = BUCKET_STEPS[found.bucket]
    labels = dict(ORIGINS)
    figures = {
        "spend": fleet_charts.spend_figure(
            starts=starts,
            step=step,
            costs={key: [float(b.costs[key]) for b in found.buckets] for key in charts.COST_KEYS},
            saved=[float(b.saved) for b in found.buckets],
        ),
        "hit": fleet_charts.hit_trend_figure(
            starts=starts, step=step, hit=[b.hit for b in found.buckets]
        ),
        "compactions": fleet_charts.compactions_figure(
            days=[d.day for d in found.days],
            counts={key: [d.counts[key] for d in found.days] for key in labels},
            labels=labels,
            freed=[d.freed for d in found.days],
        ),
    }
    context = {
        "o": found,
        "ranges": list(RANGES),
        "origins": ORIGINS,
        "figures": figures,
        "relief": relief_summary(found.profile),
        "nav": "overview",
        # one indexed count: the alerts open now (the Alerts page lists them)
        "firing_alerts": Alert.objects.filter(resolved_at__isnull=True).count(),
    }
    return render(request, "console/overview.html", context)
