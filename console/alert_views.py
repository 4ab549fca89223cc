"""The alerts page: rules (admins create, switch off and delete them) and the history of
firing and resolved alerts, each linked to its session, compaction run or cache misses."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from alerts.firing import CHANNELS, METRICS, RuleError
from alerts.models import Alert, AlertRule
from alerts.services import RuleValues, create_rule, delete_rule
from console.roles import Role, forbidden, require_role, role_of
from telemetry.models import AgentProfile


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


@require_http_methods(["GET", "POST"])
@require_role(Role.VIEWER)
def alerts_page(request: HttpRequest) -> HttpResponse:
    is_admin = (role_of(request.user) or 0) >= Role.ADMIN
    form = RuleForm(request.POST or None)
    if request.method == "POST":
        if not is_admin:
            return forbidden(request, Role.ADMIN)
        if form.is_valid():
            data = form.cleaned_data
            try:
                rule = create_rule(
                    RuleValues(
                        name=data["name"],
                        metric=data["metric"],
                        threshold=data["threshold"],
                        profile=data["profile"],
                        window_minutes=data["window_minutes"],
                        cooldown_minutes=data["cooldown_minutes"],
                        channel=data["channel"],
                        target=data["target"],
                    )
                )
            except RuleError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Rule “{rule.name}” created.")
                return redirect("alerts")
    state = request.GET.get("state", "all")
    alerts = Alert.objects.select_related("rule", "session", "profile").prefetch_related(
        "notifications"
    )
    if state == "firing":
        alerts = alerts.filter(resolved_at__isnull=True)
    elif state == "resolved":
        alerts = alerts.filter(resolved_at__isnull=False)
    return render(
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
        },
        # a form that could not be kept answers 422 (the page shows each field's error)
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
