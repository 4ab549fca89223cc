"""Operator-facing views: look up, validate, call, respond.

A view reads through `console.selectors`, hands what it read to `console.presenters` (rows,
labels, chart inputs) and renders. The same view renders the page or, for an htmx request, just
the fragment (a named `{% partialdef %}`). Every view checks the role on the server
(`console.roles.require_role`); writes go through the services (`telemetry.policy_store`,
`telemetry.catalogue`, `telemetry.keys`, `telemetry.profiles`, `compaction.services`).
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.utils.crypto import constant_time_compare
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from compaction.archives import archive_json, archive_jsonl
from compaction.errors import CompactionBusy, CompactionRefused
from compaction.imports.queries import imported_view
from compaction.log_retention import removed_note
from compaction.models import Archive, CompactionRun
from compaction.services import compact_session
from compaction.summarizers import SummarizerError
from console.advisor import ProposalForm, round_advice
from console.cache_views import revalidated
from console.forms import (
    CatalogueForm,
    KeyCreateForm,
    PolicyForm,
    ProfileCreateForm,
    SessionFilterForm,
    WindowOverridesForm,
)
from console.parts import held
from console.period_request import refused_period, remembered_zone, request_period
from console.periods import PRESETS
from console.policy_impact import PolicyImpact, policy_impact, windows_impact
from console.presenters.search import hits_page
from console.presenters.sessions import (
    SESSION_COLUMNS,
    run_outcome,
    session_meta,
    sessions_listing,
)
from console.presenters.transcripts import archive_view, shown_surface
from console.roles import Role, require_role
from console.selectors.compaction import (
    archive_hits,
    archived_transcript,
    archives_page,
    compaction_runs,
    latest_archive,
    session_archives,
    surface_now,
    surface_on_turn,
)
from console.selectors.policies import load_policies, profiles_overview, stored_overrides
from console.selectors.relief import RELIEF_FILTER_LABELS
from console.selectors.session import (
    first_seen,
    session_detail,
    turn_bounds,
    turns_page,
)
from console.selectors.session_list import sessions_page, sessions_version
from console.selectors.unpriced import unpriced_models
from console.session_context import (
    LIVE_PARTS,
    compaction_parts,
    live_figures,
    live_parts,
    rendered_part,
    rendered_parts,
)
from console.tag_views import list_tools_context, tags_context
from telemetry import database_errors
from telemetry.band_sql import BANDS
from telemetry.catalogue import save_price
from telemetry.errors import FieldError
from telemetry.keys import create_agent_key, revoke_agent_key
from telemetry.models import AgentKey, AgentProfile, AgentSession, CatalogueModel, Heartbeat
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import update_policy
from telemetry.profiles import get_or_create_profile, set_window_overrides
from telemetry.usage import model_vendor
from telemetry.windows import format_window_overrides


class HtmxHttpRequest(HttpRequest):
    """What django-htmx's middleware makes of every request (for the type checker)."""

    htmx: HtmxDetails


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the database answers; the worker's last heartbeat age.

    503 while the database is away (the middleware) or was found full within
    `DATABASE_FULL_HEALTH_SECONDS` (reads still work then, writes do not: the check remembers
    the last refused write rather than writing itself on every probe).
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    beat = Heartbeat.objects.filter(name="worker").first()
    age = (timezone.now() - beat.at).total_seconds() if beat else None
    body: dict[str, object] = {"database": connection.vendor, "worker_heartbeat_age_s": age}
    full_ago = database_errors.full_seconds_ago()
    if full_ago is None:
        return JsonResponse(body)
    retry = database_errors.FULL_RETRY_AFTER_SECONDS
    response = JsonResponse(
        {
            **body,
            "healthy": False,
            "error": "database_full",
            "detail": f"{database_errors.full_detail()}: a write was refused {full_ago:.0f} s ago",
        },
        status=503,
    )
    response["Retry-After"] = str(retry)
    response["Cache-Control"] = "no-store"
    return response


def _versioned(request: HttpRequest, version: str) -> HttpResponse | None:
    """304 when the poller already holds `version` (it sends it back as If-None-Match)."""
    return get_conditional_response(request, etag=f'"{version}"')


def _mark_polled(response: HttpResponse, version: str) -> HttpResponse:
    # The fragment is per user and changes any second: keep it out of shared caches, and let
    # the htmx poller ask with If-None-Match (the browser passes the 304 through to it).
    response["ETag"] = f'"{version}"'
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ("HX-Request",))
    return response


# --- sessions ------------------------------------------------------------------------------------


@require_GET
@require_role(Role.VIEWER)
def sessions_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every session, sortable, filterable, searchable and paginated; the table polls itself.
    `?from=&to=` (a period in `?tz=`, `console.periods`): the sessions active in it; the page
    refuses a bad one naming the field (the table's poll ignores it)."""
    zone = remembered_zone(request)
    period = None
    if request.GET.get("from") or request.GET.get("to"):
        try:
            period = request_period(request)
        except FieldError as exc:
            if not request.htmx:
                return refused_period(request, exc)
    form = SessionFilterForm(request.GET)
    filters = form.filters(zone)
    # "active in the last hour" changes with the clock alone: such a list is new every minute
    # a time filter's result moves with the clock: the version does too
    minute = timezone.now().strftime("%Y-%m-%dT%H:%M") if filters.active or filters.seen else ""
    found = sessions_page(filters)
    # times are shown in the operator's zone (`console.middleware.operator_zone`)
    shown_zone = timezone.get_current_timezone_name()
    version = sessions_version(found, request.GET.urlencode() + minute + shown_zone)
    if request.htmx:
        not_modified = _versioned(request, version)
        if not_modified is not None:
            return not_modified
    context = {
        "listing": sessions_listing(found),
        "version": version,
        "filters": filters,
        "columns": SESSION_COLUMNS,
        "bands": BANDS,
        "relief_filters": RELIEF_FILTER_LABELS,
        "seen_ranges": list(PRESETS),
        "period": period,
        "zone": shown_zone,
        "nav": "sessions",
    } | list_tools_context(request, form)
    if request.htmx:
        return _mark_polled(render(request, "console/sessions.html#table", context), version)
    return render(request, "console/sessions.html", context)


def _session_or_404(pk: int) -> tuple[AgentSession, PolicyValues, str]:
    found = session_detail(pk)
    if found is None:
        raise Http404("no such session")
    return found


# The session page's fragments an htmx request may ask for by target (HX-Target).
SESSION_FRAGMENTS = ("turns", "surface", "runs", "archives")


def _surface_turn(request: HttpRequest) -> int | None:
    """`?surface_turn=N` picks the surface the model saw on turn N; anything else means now."""
    value = request.GET.get("surface_turn", "")
    return int(value) if value.isdigit() and len(value) < 10 else None


@require_GET
@require_role(Role.VIEWER)
def session_page(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One session: live figures and gauge, pressure, cache and cost charts, the turns table,
    the surface (now or on a chosen turn), the compaction runs and archives, and Compact now."""
    session, policy, version = _session_or_404(pk)
    target = request.htmx.target if request.htmx else None
    if target == "turns":
        turns = turns_page(session, request.GET.get("turns_page"))
        return _part(request, "turns", {"session": session, "turns": turns})
    if target == "surface":
        surface = shown_surface(
            surface_now(session)
            if (turn := _surface_turn(request)) is None
            else surface_on_turn(session, turn)
        )
        context = {
            "session": session,
            "surface": surface,
            "turn_bounds": turn_bounds(session),
            "surface_archive": latest_archive(session),
            "surface_removed": removed_note(session.pk),
        }
        # tagged by its content: reloading the page, the browser gets a bodiless 304 for an
        # unchanged transcript instead of hundreds of KB
        response = _part(request, "surface", context)
        patch_vary_headers(response, ("HX-Target",))
        return revalidated(request, response)
    if target == "runs":
        return _part(request, "runs", {"session": session, "runs": compaction_runs(session)})
    if target == "archives":
        context = {"session": session, "archives": session_archives(session)}
        return _part(request, "archives", context)
    context = live_parts(session, policy, version, request.GET.get("turns_page")) | {
        "nav": "sessions",
        "first_seen": first_seen(session),
        "session_meta": session_meta(session),
        **tags_context(session),
        "imported": imported_view(session),
        # the surface (the whole transcript) arrives right after the page, not inside it,
        # unless asked for inline (the link a browser without JavaScript follows)
        "surface_deferred": request.GET.get("surface") != "inline",
        "surface_turn": _surface_turn(request),
    }
    if not context["surface_deferred"]:
        context |= compaction_parts(session, surface_turn=_surface_turn(request))
    context["parts"] = rendered_parts(LIVE_PARTS, context, request)
    return render(request, "console/session.html", context)


def _part(request: HttpRequest, name: str, context: dict[str, Any]) -> HttpResponse:
    """One part of the session page as an htmx fragment, keyed (`console.parts`)."""
    return HttpResponse(rendered_part(name, context, request))


@require_POST
@require_role(Role.OPERATOR)
def session_compact(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Compact now: the manual, never-lossy compaction (D5), shown in place.

    A refusal (the archive failed, nothing changed) or a busy session is an answer, not an
    error: 200 with the reason, so the page shows it where the button is. The surface, runs and
    archives on the page are swapped out of band with what the compaction left.
    """
    session, _, _ = _session_or_404(pk)
    try:
        run = compact_session(
            session_id=session.pk,
            mode="manual",
            trigger="console",
            requested_by=f"user:{request.user.get_username()}",
        ).run
    except (CompactionRefused, CompactionBusy) as exc:
        run = exc.run
    except SummarizerError as exc:
        # The configured LLM summarizer failed: nothing was applied; this request's run says why.
        assert exc.run_id is not None  # compact_session records every failure on its run
        run = CompactionRun.objects.get(pk=exc.run_id)
    title, detail = run_outcome(run)
    if not request.htmx:
        level = (
            messages.success
            if run.status in (CompactionRun.Status.APPLIED, CompactionRun.Status.NOOP)
            else messages.error
        )
        level(request, f"{title} — {detail}")
        return redirect(reverse("session", args=[session.pk]) + "#compaction")
    # the compaction moved the figures too (D6: the surface estimate replaces the projection)
    session, policy, version = _session_or_404(pk)
    context = (
        live_figures(session, policy, version)
        | compaction_parts(session)
        | {"compact_run": run, "outcome_title": title, "outcome_detail": detail}
    )
    context |= live_parts(session, policy, version, request.GET.get("turns_page"))
    html = str(render_to_string("console/session.html#compact", context, request))
    html += render_to_string("console/session.html#poller", context | {"oob": True}, request)
    for name in (*LIVE_PARTS, "surface"):
        html += rendered_part(name, context | {"oob": True}, request) or ""
    response = HttpResponse(html)
    # the Compact panel's economics (plan now, predicted vs measured) reload on this event
    response["HX-Trigger"] = "compacted"
    return response


@require_GET
@require_role(Role.VIEWER)
def session_live(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One poll for the whole session page: 304 while the session's version is unchanged, else
    the poller (with the new version) and, out of band, every live part whose content differs
    from what the browser holds (the `have` keys its parts carry, `console.parts`): figures,
    gauge, charts, turns, runs and archives change together, and an unchanged part is not sent
    again. The surface joins when the reader is looking at the surface now (`surface_now`);
    while the transcript is unchanged only its turn picker comes, when its bounds moved.
    The page's panels that load on their own (cache misses, compaction economics) reload on the
    `session-changed` event this answer triggers."""
    session, policy, version = _session_or_404(pk)
    not_modified = _versioned(request, version)
    if not_modified is not None:
        return not_modified
    context = live_parts(session, policy, version, request.GET.get("turns_page")) | {"oob": True}
    html = str(render_to_string("console/session.html#poller", context, request))
    holds = held(request.GET.getlist("have"))
    for name in LIVE_PARTS:
        html += rendered_part(name, context, request, holds) or ""
    if request.GET.get("surface_now") == "1":
        context |= {
            "surface": shown_surface(surface_now(session)),
            "surface_now": True,
            "surface_archive": context["archives"][0] if context["archives"] else None,
            "surface_removed": removed_note(session.pk),
        }
        surface = rendered_part("surface", context, request, holds)
        # an unchanged surface stays; its turn picker, whose bounds follow the turns, may not
        html += (
            surface
            or rendered_part("surface_picker", context | {"picker_oob": True}, request, holds)
            or ""
        )
    response = HttpResponse(html)
    response["HX-Trigger"] = "session-changed"
    return _mark_polled(response, version)


# --- archives ------------------------------------------------------------------------------------


@require_GET
@require_role(Role.VIEWER)
def archives(request: HtmxHttpRequest) -> HttpResponse:
    """Full-text search across every profile's archives (or one session's), else the latest
    archives. Operators are trusted staff: every profile's archives are visible to all roles."""
    query = request.GET.get("q", "").strip()[:200]
    session = None
    session_pk = request.GET.get("session", "")
    if session_pk.isdigit():
        session = AgentSession.objects.select_related("profile").filter(pk=session_pk).first()
    context = {
        "query": query,
        "scope": session,
        "found": hits_page(archive_hits(query, session, _page_number(request))) if query else None,
        "listing": None if query else archives_page(request.GET.get("page"), session),
        "nav": "archives",
    }
    if request.htmx and request.htmx.target == "results":
        return render(request, "console/archives.html#results", context)
    return render(request, "console/archives.html", context)


def _page_number(request: HttpRequest) -> int:
    value = request.GET.get("page", "")
    return int(value) if value.isdigit() and len(value) < 7 else 1


def _archive_or_404(pk: int) -> Archive:
    return get_object_or_404(Archive.objects.select_related("session__profile"), pk=pk)


@require_GET
@require_role(Role.VIEWER)
def archive_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One archive: the log as received and the surface as it was, side by side."""
    shown = archive_view(archived_transcript(_archive_or_404(pk)))
    query = request.GET.get("q", "").strip()[:200]
    context = {"shown": shown, "query": query, "nav": "archives"}
    return render(request, "console/archive.html", context)


@require_GET
@require_role(Role.VIEWER)
def archive_message(request: HttpRequest, pk: int, seq: int) -> HttpResponse:
    """One archived log message whole, however long (the archive page cuts long blocks)."""
    shown = archive_view(archived_transcript(_archive_or_404(pk)), whole_seq=seq)
    if not shown.log and not shown.problem:
        raise Http404("no such message in this archive")
    return render(request, "console/archive_message.html", {"shown": shown, "nav": "archives"})


def _download_name(archive: Archive, extension: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", archive.session.external_id)[:80].strip("._")
    return f"archive-{archive.pk}-{stem or 'session'}.{extension}"


@require_GET
@require_role(Role.VIEWER)
def archive_download(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """The archive whole as JSON (`archive_json`, what `GET /api/v1/archives/{id}` serves), or its
    log as JSONL (`archive_jsonl`): one message a line, each with its seq."""
    if fmt not in ("json", "jsonl"):
        raise Http404("downloads are .json or .jsonl")
    archive = _archive_or_404(pk)
    # the stored text as stored: each message byte for byte as appended, as the API serves it
    if fmt == "json":
        body = archive_json(archive) + "\n"
        content_type = "application/json; charset=utf-8"
    else:
        body = archive_jsonl(archive)
        content_type = "application/x-ndjson; charset=utf-8"
    response = HttpResponse(body.encode("utf-8"), content_type=content_type)
    disposition = content_disposition_header(
        as_attachment=True, filename=_download_name(archive, fmt)
    )
    response["Content-Disposition"] = disposition or "attachment"
    return response


# --- policy and profiles (admins) ----------------------------------------------------------------


@require_GET
@require_role(Role.ADMIN)
def policy_overview(request: HttpRequest) -> HttpResponse:
    """Profiles with their effective policy, the TTL counterfactual of their traffic and the
    D8 advisor (rounds per turn against the current and a proposed soft limit / hard cap)."""
    policies = load_policies()
    proposal_form = ProposalForm(request.GET or None)
    proposal = None
    if proposal_form.is_bound and proposal_form.is_valid():
        proposal = (proposal_form.cleaned_data["soft"], proposal_form.cleaned_data["hard"])
    return render(
        request,
        "console/policy.html",
        {
            "global_policy": policies.global_policy,
            "overviews": profiles_overview(),
            "profile_form": ProfileCreateForm(),
            "advice": round_advice(proposal),
            "proposal_form": proposal_form,
            "nav": "policy",
        },
        status=400 if proposal_form.is_bound and not proposal_form.is_valid() else 200,
    )


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def policy_edit(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """Edit the global policy (no `name`) or a profile's overrides (blank inherits)."""
    profile = get_object_or_404(AgentProfile, name=name) if name is not None else None
    global_policy = load_policies().global_policy
    if profile is None:
        inherited, current = None, global_policy.as_dict()
    else:
        inherited, current = global_policy, stored_overrides(profile)
    form = PolicyForm(request.POST or None, inherited=inherited, current=current)
    impact = None
    if request.method == "POST" and form.is_valid():
        impact = policy_impact(profile, form.values())
        # A refused reserve goes straight to the write path, which names the field.
        if (
            impact is not None
            and impact.changes_anything
            and not impact.refused
            and not _confirmed(request, impact)
        ):
            pass  # `_confirmed` said why it is not saved yet
        else:
            try:
                update_policy(profile=profile, values=form.values())
            except FieldError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                note = ""
                if impact is not None and impact.changes_anything:
                    note = f" {_effects_note(impact)}"
                messages.success(request, f"Saved the policy of {profile or 'all profiles'}.{note}")
                return redirect("policy")
    elif request.method == "GET":
        impact = policy_impact(
            profile, PolicyForm(current=current, inherited=inherited).initial_values()
        )
    return render(
        request,
        "console/policy_form.html",
        {
            "form": form,
            "profile": profile,
            "impact": impact,
            "needs_confirm": impact is not None and impact.changes_anything,
            "preview_url": request.path + "preview",
            "nav": "policy",
        },
    )


def _confirmed(request: HttpRequest, impact: PolicyImpact) -> bool:
    """A change that moves a session's band, usable window or billing is saved only once the
    admin confirmed the very values previewed (the confirm carries their digest, which also
    covers the stored policy and windows: a stale confirm is refused and previewed again)."""
    sent = request.POST.get("confirm", "")
    if sent and constant_time_compare(sent, impact.digest):
        return True
    if sent:
        messages.warning(
            request,
            "Not saved: the values or the stored policy changed since the preview you "
            "confirmed. Review the new preview (below) and confirm again.",
        )
    else:
        messages.warning(
            request,
            "Not saved yet: these values would change sessions' pressure band, usable window "
            "or billing, or remove calls or transcript text now (below). Confirm to save.",
        )
    return False


def _effects_note(impact: PolicyImpact) -> str:
    effects = impact.effects
    retention = (
        f" The call retention will remove {impact.expiring_calls} call(s)."
        if impact.expiring_turns
        else ""
    )
    if impact.expiring_texts or impact.expiring_texts_more:
        retention += (
            " The log retention will remove the text of "
            f"{'at least ' if impact.expiring_texts_more else ''}{impact.expiring_texts} transcript "
            "message(s) (their archive keeps it)."
        )
    return (
        f"{effects.band_moves} session(s) change band ({effects.prune_new} newly at prune, "
        f"{effects.compact_new} newly at summarize), {effects.usable_moves} change usable "
        f"window, {effects.billing} change billing; stored figures are being recomputed."
        if impact.proposal.pressure_profiles()
        else f"{effects.band_moves} session(s) change band ({effects.prune_new} newly at "
        f"prune, {effects.compact_new} newly at summarize), {effects.billing} change billing."
    ) + retention


@require_POST
@require_role(Role.ADMIN)
def policy_preview(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """The impact panel for the values typed so far (htmx, as the admin types)."""
    profile = get_object_or_404(AgentProfile, name=name) if name is not None else None
    global_policy = load_policies().global_policy
    inherited = None if profile is None else global_policy
    current = global_policy.as_dict() if profile is None else stored_overrides(profile)
    form = PolicyForm(request.POST, inherited=inherited, current=current)
    impact = policy_impact(profile, form.values()) if form.is_valid() else None
    return render(request, "console/_policy_impact.html", {"impact": impact})


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def profile_windows(request: HttpRequest, name: str) -> HttpResponse:
    """Edit the windows a profile's agents run with, per model and by default."""
    profile = get_object_or_404(AgentProfile, name=name)
    initial = {"windows": format_window_overrides(profile.window_overrides or {})}
    form = WindowOverridesForm(request.POST or None, initial=initial)
    impact = None
    if request.method == "POST" and form.is_valid():
        try:
            overrides = form.overrides()
        except FieldError:
            pass  # the form carries the error, naming the line
        else:
            impact = windows_impact(profile, overrides)
            if not impact.changes_anything or impact.refused or _confirmed(request, impact):
                try:
                    set_window_overrides(profile=profile, overrides=overrides)
                except FieldError as exc:
                    form.add_error("windows", exc.message)
                else:
                    note = f" {_effects_note(impact)}" if impact.changes_anything else ""
                    messages.success(request, f"Saved the windows of {profile.name}.{note}")
                    return redirect("policy")
    return render(
        request,
        "console/profile_windows.html",
        {
            "form": form,
            "profile": profile,
            "impact": impact,
            "needs_confirm": impact is not None and impact.changes_anything,
            "nav": "policy",
        },
    )


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def profile_create(request: HttpRequest) -> HttpResponse:
    """Create a profile (POST); a GET shows the policy page with the new-profile form."""
    form = ProfileCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            profile = get_or_create_profile(
                name=form.cleaned_data["name"], description=form.cleaned_data["description"]
            )
        except FieldError as exc:
            form.add_error("name", exc.message)
        else:
            messages.success(request, f"Profile {profile.name} is ready; it inherits the policy.")
            return redirect("policy_profile", name=profile.name)
    return render(
        request,
        "console/policy.html",
        {
            "global_policy": load_policies().global_policy,
            "overviews": profiles_overview(),
            "profile_form": form,
            "nav": "policy",
        },
    )


# --- model catalogue (admins) --------------------------------------------------------------------


@require_GET
@require_role(Role.ADMIN)
def catalogue_list(request: HttpRequest) -> HttpResponse:
    """The catalogue's rows, and the models calls named that it has no price for."""
    return render(
        request,
        "console/catalogue.html",
        {
            "rows": CatalogueModel.objects.order_by("provider", "model"),
            "unpriced": unpriced_models(),
            "nav": "catalogue",
        },
    )


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def catalogue_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """Add or edit a model's window and prices; they apply to calls reported from now on."""
    row = get_object_or_404(CatalogueModel, pk=pk) if pk is not None else None
    # "add it" from the unpriced models: the form starts with the model's id and vendor
    named = request.GET.get("model", "")[:200] if row is None else ""
    initial = {"model": named, "family": named, "provider": model_vendor(named)} if named else None
    form = CatalogueForm(request.POST or None, instance=row, initial=initial)
    if request.method == "POST" and form.is_valid():
        saved = save_price(row=row, values=form.cleaned_data)
        messages.success(request, f"Saved {saved.model}.")
        return redirect("catalogue")
    return render(
        request,
        "console/catalogue_form.html",
        {"form": form, "row": row, "nav": "catalogue"},
    )


# --- agent keys (admins) -------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def keys(request: HttpRequest) -> HttpResponse:
    """Agent keys; a created key is shown in this response only (it is stored as a hash)."""
    form = KeyCreateForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        try:
            issued = create_agent_key(
                profile_name=form.cleaned_data["profile"].name,
                scopes=["compact"] if form.cleaned_data["compact"] else [],
                name=form.cleaned_data["name"],
            )
        except FieldError as exc:
            form.add_error(None, str(exc))
        else:
            form = KeyCreateForm()
    response = render(
        request,
        "console/keys.html",
        {
            "form": form,
            "issued": issued,
            "keys": AgentKey.objects.select_related("profile").order_by("-created_at"),
            "nav": "keys",
        },
    )
    if issued is not None:
        patch_cache_control(response, no_store=True)
    return response


@require_POST
@require_role(Role.ADMIN)
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    if not AgentKey.objects.filter(pk=pk).exists():
        raise Http404("no such key")
    key = revoke_agent_key(key_id=pk)
    messages.success(request, f"Revoked clc_{key.prefix}_… ({key.profile.name}).")
    return redirect("keys")
