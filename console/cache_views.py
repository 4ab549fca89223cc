"""Cache economics in the console (D1, D2): a session's misses and compaction plan (htmx
fragments the session page loads after it renders, each with a real page at the same URL), and
the fleet's miss premiums by cause, top offending sessions and D2 flags.

Look up, call the read functions of `compaction.cache_report` and `compaction.plans`, render.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Final

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import (
    get_conditional_response,
    patch_cache_control,
    patch_vary_headers,
    set_response_etag,
)
from django.views.decorators.http import require_GET

from compaction.cache_report import compaction_outcomes, fleet_cache, session_misses
from compaction.plans import plan_now
from console.cache_charts import (
    MissPoint,
    miss_markers,
    misses_figure,
    premiums_by_bucket_figure,
)
from console.overview_views import drill_link
from console.period_request import with_period
from console.periods import BUCKET_STEPS, Period, change, preset_period
from console.roles import Role, require_role
from console.selectors.session import session_or_404
from console.selectors.unpriced import unpriced_calls
from telemetry.cache_misses import CAUSE_LABELS, CAUSES, ttl_advice
from telemetry.cache_tiers import nearest_rank
from telemetry.models import AgentProfile
from telemetry.policy_store import effective_policy

# the cache page's period when none is asked for: two weeks, as the TTL advice reads
CACHE_DEFAULT: Final = "14d"


def cache_period(request: HttpRequest, period: Period) -> Period:
    """The cache page's period: the one asked for, else `CACHE_DEFAULT` (its export reads the
    same)."""
    if request.GET.get("range") or request.GET.get("from") or request.GET.get("to"):
        return period
    return preset_period(CACHE_DEFAULT, now=period.end, zone=period.zone)


def revalidated(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """A fragment the session page reloads on every live update (`session-changed`): tagged by
    its content, so the browser revalidates it and an unchanged one comes back as a bodiless
    304 that the browser's cache answers from."""
    set_response_etag(response)
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ("HX-Request",))
    answer = get_conditional_response(request, etag=response["ETag"], response=response)
    assert isinstance(answer, HttpResponse)
    return answer


def _fragment_or_page(
    request: HttpRequest, fragment: str, context: dict[str, Any], title: str
) -> HttpResponse:
    if request.headers.get("HX-Request") == "true":
        return revalidated(request, render(request, fragment, context))
    return render(
        request,
        "console/cache_page.html",
        context | {"fragment": fragment, "title": title, "nav": "sessions"},
    )


def _premiums_figure(period: Period, by_bucket: Any) -> dict[str, Any] | None:
    """The premiums-by-cause bars of `period` (the fleet's section and the cache page alike);
    None when no bucket had a premium."""
    if not by_bucket:
        return None
    return premiums_by_bucket_figure(
        starts=period.bucket_starts(),
        step=BUCKET_STEPS[period.bucket],
        by_bucket=by_bucket,
        labels=CAUSE_LABELS,
        zone=period.tz,
        zone_label=period.zone_label(),
        span=(period.start, period.end),
    )


@require_GET
@require_role(Role.VIEWER)
def session_cache(request: HttpRequest, pk: int) -> HttpResponse:
    """The session's cache misses: a chart by cause and the table (turn, missed tokens,
    premium, cause, evidence), premiums by cause, and the D2 flag."""
    session = session_or_404(pk)
    report = session_misses(session)
    points = [
        MissPoint(
            turn=m.turn,
            missed_tokens=m.missed_tokens,
            premium_usd=m.premium_usd,
            cause=m.cause,
            label=m.cause_label,
            evidence=m.evidence,
        )
        for m in report.misses
    ]
    context = {
        "session": session,
        "report": report,
        "causes": [(c, CAUSE_LABELS[c], report.by_cause[c]) for c in CAUSES],
        "misses_figure": misses_figure(points, last_turn=session.last_turn) if points else None,
        # the session page's cache chart marks each miss with its cause (console.js adds them)
        "miss_markers": miss_markers(points),
    }
    return _fragment_or_page(
        request, "console/_cache_misses.html", context, f"Cache misses of {session}"
    )


@require_GET
@require_role(Role.VIEWER)
def session_plan(request: HttpRequest, pk: int) -> HttpResponse:
    """What Compact now would do and cost (the manual, forced plan) and what automatic relief
    would decide, then each applied compaction's predicted vs measured re-write and its running
    net saving."""
    session = session_or_404(pk)
    policy = effective_policy(session.profile)
    context = {
        "session": session,
        "manual": plan_now(session, policy, mode="manual"),
        "auto": plan_now(session, policy, mode="auto"),
        "outcomes": compaction_outcomes(session),
    }
    return _fragment_or_page(
        request, "console/_compact_plan.html", context, f"Compaction plan of {session}"
    )


@require_GET
@require_role(Role.VIEWER)
@with_period
def fleet_cache_page(request: HttpRequest, period: Period) -> HttpResponse:
    """Miss premiums by cause over time for the fleet and per profile, the top offending
    sessions, the profiles flagged for D2 and the TTL advice from measured expiry gaps, over
    the period (by default the last 14 days, in its zone's days)."""
    period = cache_period(request, period)
    report = fleet_cache(since=period.start, until=period.end, bucket=period.bucket_of)
    rows = {p.name: p for p in AgentProfile.objects.filter(name__in=report.profiles)}
    profiles = []
    for name, profile in sorted(report.profiles.items()):
        policy = effective_policy(rows[name])
        profiles.append(
            {
                "name": name,
                "profile": profile,
                "tier": policy.cache_ttl,
                "causes": [profile.by_cause[c] for c in CAUSES],
                "advice": ttl_advice(policy.cache_ttl, profile.expiry),
            }
        )
    context = {
        "report": report,
        "labels": [CAUSE_LABELS[c] for c in CAUSES],
        "fleet_causes": [
            (CAUSE_LABELS[c], report.by_cause[c], report.misses_by_cause[c]) for c in CAUSES
        ],
        "profiles": profiles,
        "figure": _premiums_figure(period, report.by_bucket),
        "drill": [drill_link(period, start, end, "") for start, end in period.intervals()],
        # calls over the same period whose misses have no premium: their model has no price
        "unpriced": unpriced_calls(since=report.since),
        "period": period,
        "nav": "cache",
    }
    return render(request, "console/cache.html", context)


@require_GET
@require_role(Role.ADMIN)
def ttl_advisor(request: HttpRequest) -> HttpResponse:
    """The TTL advisor's measured half (the policy page loads it): per profile, the expiry
    misses of recent traffic, their gaps and premiums, and what they say about the tier."""
    report = fleet_cache()
    rows = {p.name: p for p in AgentProfile.objects.filter(name__in=report.profiles)}
    advice = []
    for name, profile in sorted(report.profiles.items()):
        tier = effective_policy(rows[name]).cache_ttl
        gaps = [timedelta(seconds=gap) for gap, _ in profile.expiry]
        advice.append(
            {
                "name": name,
                "tier": tier,
                "count": len(profile.expiry),
                "premium": sum((p or Decimal(0) for _, p in profile.expiry), Decimal(0)),
                "gap_p50": nearest_rank(gaps, 50),
                "gap_p90": nearest_rank(gaps, 90),
                "text": ttl_advice(tier, profile.expiry),
            }
        )
    context = {"advice": advice, "report": report}
    if request.headers.get("HX-Request") == "true":
        return render(request, "console/_ttl_advice.html", context)
    return render(
        request,
        "console/cache_page_plain.html",
        context | {"fragment": "console/_ttl_advice.html", "title": "TTL advice", "nav": "policy"},
    )


@require_GET
@require_role(Role.VIEWER)
@with_period
def cache_summary(request: HttpRequest, period: Period) -> HttpResponse:
    """The overview's section over its period and profile (`?range=` or `?from=&to=`, `?tz=`,
    `?profile=`): premiums by cause, per bucket as a chart, the costliest sessions, D2 flags;
    with the previous period's total beside when it asks for the comparison."""
    name = request.GET.get("profile", "")
    profile = AgentProfile.objects.filter(name=name).first() if name else None
    report = fleet_cache(
        since=period.start, until=period.end, profile=profile, bucket=period.bucket_of
    )
    previous = None
    if period.compare:
        before = period.previous()
        previous = fleet_cache(since=before.start, until=before.end, profile=profile)
    context = {
        "period": period,
        "range_key": period.key,
        "profile": profile,
        "figure": _premiums_figure(period, report.by_bucket),
        "drill": [
            drill_link(period, start, end, profile.name if profile else "")
            for start, end in period.intervals()
        ],
        "report": report,
        "previous": previous,
        "premium_change": change(report.premium_usd, previous.premium_usd) if previous else None,
        "fleet_causes": [
            (CAUSE_LABELS[c], report.by_cause[c], report.misses_by_cause[c]) for c in CAUSES
        ],
        "flagged": sorted(n for n, p in report.profiles.items() if p.churn.violates_d2),
        "unpriced": unpriced_calls(since=report.since, profile=profile),
    }
    if request.headers.get("HX-Request") == "true":
        return render(request, "console/_cache_summary.html", context)
    return render(
        request,
        "console/cache_page_plain.html",
        context
        | {
            "fragment": "console/_cache_summary.html",
            "title": "Cache miss premiums",
            "nav": "cache",
        },
    )
