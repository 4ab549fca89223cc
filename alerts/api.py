"""The alerts API: a profile's rules (an agent key with the `compact` scope edits them) and its
alert history. Fleet-wide rules are edited in the console by admins."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema, Status

from alerts.models import Alert, AlertRule
from alerts.schemas import AlertOut, RuleIn, RuleOut
from alerts.services import RuleValues, create_rule, delete_rule, update_rule
from telemetry.auth import compact_auth, ingest_auth, request_key
from telemetry.schemas import ErrorOut

router = Router(tags=["alerts"])


def rule_out(rule: AlertRule) -> RuleOut:
    return RuleOut(
        id=rule.pk,
        name=rule.name,
        profile=rule.profile.name if rule.profile else None,
        metric=rule.metric,
        threshold=float(rule.threshold),
        window_minutes=rule.window_minutes,
        cooldown_minutes=rule.cooldown_minutes,
        channel=rule.channel,
        target=rule.target,
        enabled=rule.enabled,
        time_zone=rule.time_zone,
        secret=rule.secret,
    )


def _values(request: HttpRequest, payload: RuleIn) -> RuleValues:
    return RuleValues(
        name=payload.name,
        metric=payload.metric,
        threshold=payload.threshold,
        profile=request_key(request).profile,
        window_minutes=payload.window_minutes,
        cooldown_minutes=payload.cooldown_minutes,
        channel=payload.channel,
        target=payload.target,
        enabled=payload.enabled,
        time_zone=payload.time_zone,
    )


@router.get("/alerts/rules", response={200: list[RuleOut], 401: ErrorOut}, auth=ingest_auth)
def list_rules(request: HttpRequest) -> list[RuleOut]:
    """The alert rules of the key's profile."""
    profile = request_key(request).profile
    return [
        rule_out(r) for r in AlertRule.objects.filter(profile=profile).select_related("profile")
    ]


@router.post(
    "/alerts/rules",
    response={201: RuleOut, 401: ErrorOut, 403: ErrorOut, 422: ErrorOut},
    auth=compact_auth,
)
def post_rule(request: HttpRequest, payload: RuleIn) -> Status[RuleOut]:
    """Create a rule for the key's profile. A bad value answers 422 naming the field: an unknown
    metric, a negative threshold, a time zone that is not IANA, a non-HTTPS receiver (in production) or one resolving to a
    loopback or private address."""
    return Status(201, rule_out(create_rule(_values(request, payload))))


@router.put(
    "/alerts/rules/{rule_id}",
    response={200: RuleOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut},
    auth=compact_auth,
)
def put_rule(request: HttpRequest, rule_id: int, payload: RuleIn) -> RuleOut:
    """Replace a rule of the key's profile (404 for another profile's)."""
    get_object_or_404(AlertRule, pk=rule_id, profile=request_key(request).profile)
    return rule_out(update_rule(rule_id, _values(request, payload)))


@router.delete(
    "/alerts/rules/{rule_id}",
    response={204: None, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut},
    auth=compact_auth,
)
def remove_rule(request: HttpRequest, rule_id: int) -> Status[None]:
    """Delete a rule of the key's profile and its history."""
    get_object_or_404(AlertRule, pk=rule_id, profile=request_key(request).profile)
    delete_rule(rule_id)
    return Status(204, None)


class AlertFilter(Schema):
    state: Literal["firing", "resolved", "all"] = "all"


@router.get("/alerts", response={200: list[AlertOut], 401: ErrorOut}, auth=ingest_auth)
def list_alerts(request: HttpRequest, filters: Query[AlertFilter]) -> list[AlertOut]:
    """The latest 200 alerts of the key's profile's rules, newest first."""
    alerts = Alert.objects.filter(rule__profile=request_key(request).profile).select_related("rule")
    if filters.state == "firing":
        alerts = alerts.filter(resolved_at__isnull=True)
    elif filters.state == "resolved":
        alerts = alerts.filter(resolved_at__isnull=False)
    return [
        AlertOut(
            id=a.pk,
            rule_id=a.rule_id,
            rule=a.rule.name,
            metric=a.rule.metric,
            subject=a.subject,
            subject_label=a.subject_label,
            session_id=a.session_id,
            value=float(a.value),
            firing=a.firing,
            fired_at=a.fired_at,
            resolved_at=a.resolved_at,
            detail=a.detail,
        )
        for a in alerts[:200]
    ]
