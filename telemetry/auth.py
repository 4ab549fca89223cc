"""Bearer-key authentication for the agent API."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from telemetry.keys import find_active_key, mark_key_used
from telemetry.models import AgentKey
from telemetry.ratelimit import check_rate


class AgentKeyAuth(HttpBearer):
    """`Authorization: Bearer clc_…`. A key without the route's scope gets 403, not 401."""

    def __init__(self, scope: str = AgentKey.SCOPE_INGEST) -> None:
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest) -> AgentKey | None:
        """`HttpBearer.__call__`, reading the header from `META` itself: `request.headers`
        builds a dict of every header on first use, on every request (make bench P2)."""
        auth_value = request.META.get("HTTP_AUTHORIZATION")
        if not auth_value:
            return None
        parts = auth_value.split(" ")
        if parts[0].lower() != self.openapi_scheme:
            return None
        return self.authenticate(request, " ".join(parts[1:]))

    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        key = find_active_key(token)
        if key is None:
            return None
        if not key.has_scope(self.scope):
            raise HttpError(403, f"this key lacks the '{self.scope}' scope")
        check_rate(key.pk)
        mark_key_used(key)
        return key


ingest_auth = AgentKeyAuth(AgentKey.SCOPE_INGEST)
compact_auth = AgentKeyAuth(AgentKey.SCOPE_COMPACT)


def request_key(request: HttpRequest) -> AgentKey:
    """The authenticated key of an API request (set by `AgentKeyAuth`)."""
    key = request.auth  # type: ignore[attr-defined]
    assert isinstance(key, AgentKey)
    return key
