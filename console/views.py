"""Operator-facing views. (The full console arrives with its own issue.)"""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from telemetry.models import Heartbeat


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the database answers; the worker's last heartbeat age."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    beat = Heartbeat.objects.filter(name="worker").first()
    age = (timezone.now() - beat.at).total_seconds() if beat else None
    return JsonResponse({"database": connection.vendor, "worker_heartbeat_age_s": age})
