"""The audit page: who changed a policy, a price, a profile, a key, a user, a group or a
session tag, and how.

Admins only. Reads django-auditlog's entries newest first, filtered by object type, by who made
the change and by period, 50 a page; each row lists its fields before → after
(`console.presenters.audit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from auditlog.models import LogEntry
from django import forms
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from console.periods import DEFAULT_ZONE, PRESETS, local_midnight
from console.presenters.audit import (
    API_ACTOR_PREFIX,
    SYSTEM_ACTOR,
    FieldChange,
    actor_label,
    field_changes,
)
from console.roles import Role, require_role

PAGE_SIZE: Final = 50

# The audited models (settings.AUDITLOG_INCLUDE_TRACKING_MODELS) as the filter names them.
OBJECT_TYPES: Final = {
    "policy": ("telemetry", "policy", "Policy"),
    "price": ("telemetry", "cataloguemodel", "Model price"),
    "profile": ("telemetry", "agentprofile", "Profile"),
    "key": ("telemetry", "agentkey", "Agent key"),
    "user": ("auth", "user", "User"),
    "group": ("auth", "group", "Group"),
    "tag": ("telemetry", "sessiontag", "Session tag"),
}
TYPE_LABELS: Final = {(app, model): label for app, model, label in OBJECT_TYPES.values()}
# the presets the audit page offers, from the console's one period model (`console.periods`)
PERIODS: Final = {key: PRESETS[key] for key in ("24h", "7d", "30d")}
ACTIONS: Final = {
    LogEntry.Action.CREATE: "created",
    LogEntry.Action.UPDATE: "changed",
    LogEntry.Action.DELETE: "deleted",
    LogEntry.Action.ACCESS: "accessed",
}


class AuditFilterForm(forms.Form):
    type = forms.ChoiceField(
        required=False,
        label="Object",
        choices=[("", "any")] + [(name, label) for name, (_, _, label) in OBJECT_TYPES.items()],
    )
    actor = forms.CharField(
        required=False,
        label="Who",
        help_text='a user name, "api" (any agent key), "api:<prefix>" or "system"',
        max_length=150,
    )
    period = forms.ChoiceField(
        required=False,
        label="Period",
        choices=[("", "any time"), ("24h", "last 24 hours"), ("7d", "last 7 days")]
        + [("30d", "last 30 days")],
    )
    since = forms.DateField(required=False, label="From", widget=forms.DateInput({"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput({"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            self.add_error("until", "must not be before From")
        return data


@dataclass(frozen=True)
class AuditRow:
    at: datetime
    actor: str
    action: str
    object_type: str
    object_repr: str
    changes: list[FieldChange]
    remote_addr: str | None


def filtered_entries(
    data: dict[str, Any], now: datetime, zone: ZoneInfo | None = None
) -> QuerySet[LogEntry]:
    """The entries the filters select, newest first; From and To are days in `zone` (the
    operator's, as the page shows its times; UTC when none)."""
    zone = zone or ZoneInfo(DEFAULT_ZONE)
    entries: QuerySet[LogEntry] = LogEntry.objects.select_related("actor", "content_type").order_by(
        "-timestamp", "-pk"
    )
    app_model = OBJECT_TYPES.get(data.get("type") or "")
    if app_model:
        entries = entries.filter(
            content_type=ContentType.objects.get_by_natural_key(app_model[0], app_model[1])
        )
    else:
        entries = entries.filter(
            content_type__in=[
                ContentType.objects.get_by_natural_key(app, model)
                for app, model, _ in OBJECT_TYPES.values()
            ]
        )
    actor = (data.get("actor") or "").strip()
    if actor == SYSTEM_ACTOR:
        entries = entries.filter(actor__isnull=True).exclude(
            additional_data__actor__startswith=API_ACTOR_PREFIX
        )
    elif actor == API_ACTOR_PREFIX.rstrip(":"):
        entries = entries.filter(
            actor__isnull=True, additional_data__actor__startswith=API_ACTOR_PREFIX
        )
    elif actor.startswith(API_ACTOR_PREFIX):
        entries = entries.filter(actor__isnull=True, additional_data__actor=actor)
    elif actor:
        user_field = get_user_model().USERNAME_FIELD
        entries = entries.filter(**{f"actor__{user_field}__iexact": actor})
    period = PERIODS.get(data.get("period") or "")
    if period is not None:
        entries = entries.filter(timestamp__gte=now - period)
    if data.get("since"):
        entries = entries.filter(timestamp__gte=local_midnight(data["since"], zone))
    if data.get("until"):
        entries = entries.filter(
            timestamp__lt=local_midnight(data["until"] + timedelta(days=1), zone)
        )
    return entries


def audit_row(entry: LogEntry) -> AuditRow:
    content_type = entry.content_type
    return AuditRow(
        at=entry.timestamp,
        actor=actor_label(
            entry.actor.get_username() if entry.actor is not None else None,
            entry.additional_data,
        ),
        action=ACTIONS.get(entry.action, str(entry.action)),
        object_type=TYPE_LABELS.get(
            (content_type.app_label, content_type.model), content_type.model
        ),
        object_repr=entry.object_repr,
        changes=field_changes(entry.changes if isinstance(entry.changes, dict) else None),
        remote_addr=entry.remote_addr,
    )


@require_GET
@require_role(Role.ADMIN)
def audit(request: HttpRequest) -> HttpResponse:
    """Every audited change, newest first, filtered and paged."""
    form = AuditFilterForm(request.GET)
    if not form.is_valid():
        return render(
            request,
            "console/audit.html",
            {"form": form, "page": None, "rows": [], "nav": "audit"},
            status=422,
        )
    # the days are the operator's, as the times shown (`console.middleware.operator_zone`)
    zone = ZoneInfo(timezone.get_current_timezone_name())
    paginator = Paginator(filtered_entries(form.cleaned_data, timezone.now(), zone), PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "console/audit.html",
        {
            "form": form,
            "page": page,
            "rows": [audit_row(entry) for entry in page.object_list],
            "nav": "audit",
        },
    )
