"""The alerts page: rules (admins create, edit, switch off and delete them) and the history of
firing and resolved alerts, each linked to its session, compaction run or cache misses."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from alerts.firing import CHANNELS, METRICS, RuleError
from alerts.models import Alert, AlertRule
from alerts.services import RuleValues, create_rule, delete_rule, update_rule
from console.period_request import refused_period, remember_zone, request_period
from console.periods import COMMON_ZONES, DEFAULT_ZONE
from console.roles import Role, forbidden, require_role, role_of
from telemetry.errors import FieldError
from telemetry.models import AgentProfile

# the metrics that count over a local day: the rule's time zone says where it starts
DAILY_METRICS = tuple(name for name, m in METRICS.items() if m.daily)


class RuleForm(forms.Form):
    name = forms.CharField(max_length=200)
    profile = forms.ModelChoiceField(
        queryset=AgentProfile.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="every profile (fleet-wide)",
    )
    metric = forms.ChoiceField(
        choices=[(name, f"{name} — {m.unit}") for name, m in METRICS.items()],
        help_text="fires when the value is at or above the threshold (docs: Alerts)",
    )
    threshold = forms.DecimalField(min_value=0, max_digits=18, decimal_places=6)
    window_minutes = forms.IntegerField(min_value=0, initial=60, max_value=10_080)
    cooldown_minutes = forms.IntegerField(min_value=0, initial=30, max_value=10_080)
    channel = forms.ChoiceField(choices=[(c, c) for c in CHANNELS], initial="none")
    target = forms.CharField(
        max_length=500, required=False, help_text="webhook or Slack URL, or an email address"
    )
    time_zone = forms.CharField(
        max_length=64,
        required=False,  # empty: UTC
        initial=DEFAULT_ZONE,
        widget=forms.TextInput({"list": "rule-zones", "autocomplete": "off"}),
        help_text="IANA name (Europe/Berlin): the day of "
        + ", ".join(DAILY_METRICS)
        + " starts at its midnight",
    )

    def rule_values(self, *, enabled: bool = True) -> RuleValues:
        data = self.cleaned_data
        return RuleValues(
            name=data["name"],
            metric=data["metric"],
            threshold=data["threshold"],
            profile=data["profile"],
            window_minutes=data["window_minutes"],
            cooldown_minutes=data["cooldown_minutes"],
            channel=data["channel"],
            target=data["target"],
            enabled=enabled,
            time_zone=data["time_zone"] or DEFAULT_ZONE,
        )


class RuleEditForm(RuleForm):
    """A rule as it stands, to change: every field of a new one, and whether it is on."""

    enabled = forms.BooleanField(required=False, initial=True, label="On (evaluated)")

    @classmethod
    def of(cls, rule: AlertRule, data: Any = None) -> RuleEditForm:
        return cls(
            data,
            initial={
                "name": rule.name,
                "profile": rule.profile.name if rule.profile else None,
                "metric": rule.metric,
                "threshold": rule.threshold.normalize(),
                "window_minutes": rule.window_minutes,
                "cooldown_minutes": rule.cooldown_minutes,
                "channel": rule.channel,
                "target": rule.target,
                "enabled": rule.enabled,
                "time_zone": rule.time_zone,
            },
        )


@require_http_methods(["GET", "POST"])
@require_role(Role.VIEWER)
def alerts_page(request: HttpRequest) -> HttpResponse:
    is_admin = (role_of(request.user) or 0) >= Role.ADMIN
    form = RuleForm(request.POST or None)
    if request.method == "POST":
        if not is_admin:
            return forbidden(request, Role.ADMIN)
        if form.is_valid():
            try:
                rule = create_rule(form.rule_values())
            except RuleError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Rule “{rule.name}” created.")
                return redirect("alerts")
    state = request.GET.get("state", "all")
    alerts = Alert.objects.select_related("rule", "session", "profile").prefetch_related(
        "notifications"
    )
    # the history of any time, or of a period (`console.periods`): the alerts fired in it
    try:
        period = request_period(request)
    except FieldError as exc:
        return refused_period(request, exc)
    bounded = any(request.GET.get(name) for name in ("range", "from", "to"))
    if bounded:
        alerts = alerts.filter(fired_at__gte=period.start, fired_at__lt=period.end)
    if state == "firing":
        alerts = alerts.filter(resolved_at__isnull=True)
    elif state == "resolved":
        alerts = alerts.filter(resolved_at__isnull=False)
    return remember_zone(
        request,
        render(
            request,
            "console/alerts.html",
            {
                "nav": "alerts",
                "form": form,
                "is_admin": is_admin,
                "rules": AlertRule.objects.select_related("profile"),
                "alerts": alerts[:200],
                "firing_count": Alert.objects.filter(resolved_at__isnull=True).count(),
                "state": state,
                "period": period,
                "bounded": bounded,
                "daily_metrics": DAILY_METRICS,
                "zones": COMMON_ZONES,
            },
            # a form that could not be kept answers 422 (the page shows each field's error)
            status=422 if request.method == "POST" else 200,
        ),
        period,
    )


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def alert_rule_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """One rule's form, filled with what it is; a save checks it as a new rule is checked (the
    same `RuleError`s, a 422 naming the field) and keeps its history."""
    rule = get_object_or_404(AlertRule.objects.select_related("profile"), pk=pk)
    form = RuleEditForm.of(rule, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            update_rule(rule.pk, form.rule_values(enabled=form.cleaned_data["enabled"]))
        except RuleError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Rule “{form.cleaned_data['name']}” saved.")
            return redirect("alerts")
    return render(
        request,
        "console/alert_rule_form.html",
        {"nav": "alerts", "form": form, "rule": rule, "zones": COMMON_ZONES},
        status=422 if request.method == "POST" else 200,
    )


@require_POST
@require_role(Role.ADMIN)
def alert_rule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    if not AlertRule.objects.filter(pk=pk).exists():
        raise Http404("no such rule")
    delete_rule(pk)
    messages.success(request, "Rule deleted with its history.")
    return redirect("alerts")
