"""The operators' tags as an API: `PUT /api/v1/profiles/{profile}/sessions/{session_id}/tags`.

Tags are the operators' own word on a session, not an agent's: this route takes a signed-in
console user with the operator role or above (the console's session cookie and its CSRF token,
as the console's own pages send them), never an agent key. Agents name and describe their
sessions through metadata (`metadata=` of a record or the client, OTLP attributes), which the
console keeps apart from tags. A session is named by its profile and its agent's id, as the
read API lists it. The write goes through `telemetry.session_tags` (audited as on the page).
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema
from ninja.errors import HttpError
from ninja.security import SessionAuth
from pydantic import Field

from console.roles import Role, role_of
from telemetry.models import AgentSession
from telemetry.schemas import ErrorOut
from telemetry.session_tags import set_tags
from telemetry.tag_rules import MAX_TAGS_PER_CHANGE, TAG_HELP

router = Router(tags=["console"])


class OperatorAuth(SessionAuth):
    """A console user signed in with the operator role or above; another role is 403."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = super().authenticate(request, key)
        if user is None:
            return None
        role = role_of(user)
        if role is None or role < Role.OPERATOR:
            raise HttpError(403, "tags are set by operators and admins")
        return user


operator_auth = OperatorAuth()


class TagsIn(Schema):
    tags: list[Annotated[str, Field(max_length=200)]] = Field(
        max_length=MAX_TAGS_PER_CHANGE,
        description=f"the session's tags after the change, as typed (normalised: {TAG_HELP})",
    )


class TagsOut(Schema):
    profile: str
    session_id: str
    tags: list[str] = Field(description="the session's tags, normalised and sorted")


@router.put(
    "/profiles/{profile}/sessions/{session_id}/tags",
    auth=operator_auth,
    response={200: TagsOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut},
    summary="Set a session's operator tags (a signed-in console operator, not an agent key)",
)
def put_tags(request: HttpRequest, profile: str, session_id: str, payload: TagsIn) -> Any:
    """Make the session's tags exactly `tags` (idempotent: the same list again changes
    nothing). A bad tag is a 422 on `tags` and nothing changes."""
    session = get_object_or_404(
        AgentSession.objects.only("pk"), profile__name=profile, external_id=session_id
    )
    tags = set_tags(session_id=session.pk, texts=payload.tags)
    return {"profile": profile, "session_id": session_id, "tags": list(tags)}
