"""The per-call page: one LLM call of a session, everything stored about it (issue 39)."""

from __future__ import annotations

import json

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from compaction.call_detail import call_detail
from console.roles import Role, require_role
from console.selectors.session import session_or_404


@require_GET
@require_role(Role.VIEWER)
def call_page(request: HttpRequest, pk: int, call_pk: int) -> HttpResponse:
    """Model, time by the agent's clock, latency when reported, the provider's request id, the
    token buckets with the cost of each, the raw usage as received, the surface version, and
    the cache outcome with the miss's cause."""
    session = session_or_404(pk)
    found = call_detail(session, call_pk)
    if found is None:
        raise Http404("no such call in this session")
    return render(
        request,
        "console/call.html",
        {
            "session": session,
            "detail": found,
            "call": found.call,
            "raw_usage": json.dumps(found.call.usage_as_sent, indent=2, sort_keys=True),
            "nav": "sessions",
        },
    )
