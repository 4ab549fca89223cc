"""The audit trail's wiring to django-auditlog: who a change is attributed to, and what it hides.

The library records each change of a tracked model (settings.AUDITLOG_INCLUDE_TRACKING_MODELS)
with the field values before and after. Its middleware names the signed-in user of a console,
admin or form request; an API request has no user, so `AuditActorMiddleware` adds the agent key
that authenticated it ("api:<key prefix>"), read when the entry is written (ninja authenticates
inside the view, after every middleware ran).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from auditlog.middleware import AuditlogMiddleware
from django.http import HttpRequest

from console.limits import client_address
from console.presenters.audit import HIDDEN, api_actor
from telemetry.models import AgentKey


def hidden(value: str) -> str:
    """`AUDITLOG_MASK_CALLABLE`: a masked field (a password hash) shows that it changed, never
    any part of its value (the library's default keeps half of it). No value stays no value."""
    return value if value == "None" else HIDDEN


def _api_actor(request: HttpRequest) -> Callable[[], dict[str, str] | None]:
    def additional_data() -> dict[str, str] | None:
        key = getattr(request, "auth", None)
        if isinstance(key, AgentKey):
            return {"actor": api_actor(key.prefix)}
        return None

    return additional_data


class AuditActorMiddleware(AuditlogMiddleware):  # type: ignore[misc]  # untyped base (auditlog)
    """auditlog's middleware, with the API's agent key as the actor of an API request and the
    client address read as the sign-in throttle reads it (a forwarded address only from a
    trusted proxy, `console.limits.client_address`)."""

    @staticmethod
    def _get_remote_addr(request: HttpRequest) -> str | None:
        return client_address(request)

    def get_extra_data(self, request: HttpRequest) -> dict[str, Any]:
        data: dict[str, Any] = super().get_extra_data(request)
        data["additional_data"] = _api_actor(request)
        return data
