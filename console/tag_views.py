"""Operators' tags on sessions, and each user's saved views of the sessions list.

Tags: operators and admins add and remove them on a session's page (htmx swaps the tags block;
without JavaScript the form posts and the page reloads), and add them to every session the
list's filters select (up to `MAX_BULK_SESSIONS`). Saved views: any signed-in role saves the
list's current query under a name, and renames or deletes its own views; a view is its user's
alone.

A refused value answers 422 with the form and a message naming the field (to htmx, the form
with the message in place); nothing stored is lost (`telemetry.session_tags`, `console.saved_views` change nothing on a refusal).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.forms import SessionFilterForm
from console.list_filters import BOUNDS
from console.roles import Role, require_role
from console.saved_views import delete_view, rename_view, save_view, views_of
from console.selectors.policies import load_policies
from console.selectors.session import session_or_404
from console.selectors.session_list import matching_sessions
from telemetry.errors import FieldError
from telemetry.models import AgentProfile, AgentSession
from telemetry.session_tags import add_tags, add_tags_to_many, remove_tag, tags_of
from telemetry.tag_rules import MAX_TAGS_PER_SESSION, TAG_CHARS, TAG_HELP, parse_tags

# what the add form's one input may hold: every tag a session may hold, with separators
TAG_INPUT_CHARS: Final = MAX_TAGS_PER_SESSION * (TAG_CHARS + 2)
MAX_BULK_SESSIONS: Final = 100  # sessions one bulk change may tag


def tags_context(session: AgentSession, **extra: Any) -> dict[str, Any]:
    """What the session page's tags block draws: the session's tags and the form's limits."""
    return {
        "session": session,
        "tags": tags_of([session.pk]).get(session.pk, ()),
        "tag_help": TAG_HELP,
        "tag_input_chars": TAG_INPUT_CHARS,
        **extra,
    }


def list_tools_context(request: HttpRequest, form: SessionFilterForm) -> dict[str, Any]:
    """What the sessions list draws beside its filters: the range inputs as typed with each one's
    message (`console.list_filters`), the user's saved views, and the query a view or a bulk
    tag would keep (`form.filters()` has run)."""
    return {
        "range_inputs": [
            (
                bound,
                [
                    (p, request.GET.get(p, "")[:40], form.list_errors.get(p, ""))
                    for p in bound.params
                ],
            )
            for bound in BOUNDS
        ],
        "list_errors": sorted(form.list_errors.items()),
        "saved_views": views_of(request.user),  # type: ignore[arg-type]  # require_role
        "list_query": urlencode(
            [(k, v) for k, values in request.GET.lists() if k != "page" for v in values if v]
        ),
        "tag_help": TAG_HELP,
        "tag_input_chars": TAG_INPUT_CHARS,
    }


def _tags_answer(
    request: HttpRequest, session: AgentSession, error: FieldError | None, typed: str = ""
) -> HttpResponse:
    """The tags block (htmx) or, without JavaScript, the session page again (a success) or the
    block on a page of its own (a refusal, 422). To htmx a refusal is an answer shown in place
    of the form, as Compact now's is (200: htmx swaps no 4xx)."""
    context = tags_context(
        session,
        tag_error=error.message if error else "",
        tag_field=error.field if error else "",
        tag_input=typed if error else "",
    )
    status = error.status if error else 200
    if getattr(request, "htmx", False):
        return render(request, "console/session.html#tags", context)
    if error is None:
        return redirect(reverse("session", args=[session.pk]) + "#session-tags")
    return render(request, "console/session_tags.html", context, status=status)


@require_POST
@require_role(Role.OPERATOR)
def session_tags_add(request: HttpRequest, pk: int) -> HttpResponse:
    """Add the comma-separated tags of `tags` to the session."""
    session = session_or_404(pk)
    typed = request.POST.get("tags", "")[:TAG_INPUT_CHARS]
    try:
        add_tags(session_id=session.pk, texts=[typed])
    except FieldError as exc:
        return _tags_answer(request, session, exc, typed)
    return _tags_answer(request, session, None)


@require_POST
@require_role(Role.OPERATOR)
def session_tag_remove(request: HttpRequest, pk: int) -> HttpResponse:
    """Remove the tag `tag` from the session (one it does not hold: nothing changes)."""
    session = session_or_404(pk)
    remove_tag(session_id=session.pk, tag=request.POST.get("tag", "")[:TAG_INPUT_CHARS])
    return _tags_answer(request, session, None)


@require_POST
@require_role(Role.OPERATOR)
def sessions_tag_bulk(request: HttpRequest) -> HttpResponse:
    """Add `tags` to every session the list's filters select (`query`, the list's query string,
    read as the list reads it), then back to that list. At most `MAX_BULK_SESSIONS` sessions:
    more is refused (422 on `query`: narrow the filters), as are a bad tag and no filter at all;
    nothing is added then. A session that would pass the per-session limit is skipped and
    named."""
    query = request.POST.get("query", "").lstrip("?")
    back = _list_url(query)
    typed = request.POST.get("tags", "")[:TAG_INPUT_CHARS]
    filters = SessionFilterForm(QueryDict(query)).filters()
    try:
        parse_tags([typed])  # a bad tag refuses the whole change, before any session changes
        if not filters.is_filtered:
            raise FieldError("query", "filter the list first: tags go to the sessions it shows")
        profiles = list(AgentProfile.objects.order_by("name"))
        chosen = dict(
            matching_sessions(filters, profiles, load_policies())
            .order_by("-pk")
            .values_list("pk", "external_id")[: MAX_BULK_SESSIONS + 1]
        )
        if len(chosen) > MAX_BULK_SESSIONS:
            raise FieldError(
                "query",
                f"more than {MAX_BULK_SESSIONS} sessions match: narrow the filters",
            )
        if not chosen:
            raise FieldError("query", "no session matches these filters")
        full = [chosen[pk] for pk in add_tags_to_many(session_ids=chosen, texts=[typed])]
    except FieldError as exc:
        return _refused(request, exc, back)
    done = len(chosen) - len(full)
    messages.success(request, f"Tagged {done} session{'s' if done != 1 else ''}.")
    if full:
        messages.warning(
            request,
            f"Not tagged, already holding {MAX_TAGS_PER_SESSION} tags: {', '.join(full)}",
        )
    return redirect(back)


def _list_url(query: str) -> str:
    """The sessions list at `query` (only a query: `next` never leads elsewhere)."""
    pairs = parse_qsl(query.lstrip("?"), keep_blank_values=False)
    return reverse("sessions") + (f"?{urlencode(pairs)}" if pairs else "")


# --- saved views ---------------------------------------------------------------------------------


def _view_id(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise Http404("no such view")
    return int(text)


def _refused(request: HttpRequest, exc: FieldError, back: str) -> HttpResponse:
    return render(
        request,
        "console/refused.html",
        {"field": exc.field, "message": exc.message, "back": back, "nav": "sessions"},
        status=exc.status,
    )


@require_POST
@require_role(Role.VIEWER)
def saved_view_save(request: HttpRequest) -> HttpResponse:
    """Save the list's query (`query`, as the list's URL has it) as the user's view `name`."""
    query = request.POST.get("query", "").lstrip("?")
    back = _list_url(query)
    try:
        view = save_view(
            user=request.user,  # type: ignore[arg-type]  # require_role: signed in
            name=request.POST.get("name", ""),
            pairs=parse_qsl(query, keep_blank_values=False),
        )
    except FieldError as exc:
        return _refused(request, exc, back)
    messages.success(request, f"View “{view.name}” saved.")
    return redirect(reverse("sessions") + (f"?{view.query}" if view.query else ""))


@require_POST
@require_role(Role.VIEWER)
def saved_view_rename(request: HttpRequest, view_id: str) -> HttpResponse:
    back = _list_url(request.POST.get("next", ""))
    try:
        view = rename_view(
            user=request.user,  # type: ignore[arg-type]  # require_role: signed in
            view_id=_view_id(view_id),
            name=request.POST.get("name", ""),
        )
    except FieldError as exc:
        return _refused(request, exc, back)
    messages.success(request, f"View renamed “{view.name}”.")
    return redirect(back)


@require_POST
@require_role(Role.VIEWER)
def saved_view_delete(request: HttpRequest, view_id: str) -> HttpResponse:
    delete_view(user=request.user, view_id=_view_id(view_id))  # type: ignore[arg-type]
    messages.success(request, "View deleted.")
    return redirect(_list_url(request.POST.get("next", "")))
