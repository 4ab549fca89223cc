"""The agent-facing telemetry API (mounted under /api/v1 by `console.api`)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from telemetry.auth import ingest_auth, request_key
from telemetry.policies import effective_policy
from telemetry.schemas import ErrorOut, PolicyOut

router = Router(tags=["telemetry"])


@router.get("/policy", response={200: PolicyOut, 401: ErrorOut}, auth=ingest_auth)
def get_policy(request: HttpRequest) -> dict[str, object]:
    """The effective policy of the calling key's profile (global defaults + profile overrides)."""
    key = request_key(request)
    return {"profile": key.profile.name, **effective_policy(key.profile).as_dict()}
