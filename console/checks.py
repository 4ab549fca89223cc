"""Deployment checks of our own (`manage.py check --deploy`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register

OPEN_METRICS = (
    "METRICS_TOKEN is not set: /metrics (session names, costs, compaction counts) answers anyone "
    "who can reach it. Set METRICS_TOKEN and have Prometheus send it as a bearer token."
)


@register(Tags.security, deploy=True)
def metrics_token(app_configs: Any, **kwargs: Any) -> list[Warning]:
    if settings.DEBUG or settings.METRICS_TOKEN:
        return []
    return [Warning(OPEN_METRICS, id="console.W001")]
