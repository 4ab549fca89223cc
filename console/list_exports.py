"""Every console table as CSV or JSON Lines: `<the table's page>/export.csv` and `.jsonl`.

An export is the page's table with the page's filters and order (the same query string, read by
the same code the page reads it with), every row rather than one page, and the page's role. The
rows are read in chunks of `EXPORT_CHUNK` along the table's order (keyset: each chunk starts
after the last row of the one before, so no chunk costs more than the first) and written as they
are read (`StreamingHttpResponse` over `console.export_format`'s generators): a list of any
length costs the server one chunk of memory. Each chunk is its own read, as the API's pages are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from django.db.models import Q
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from compaction.cache_report import fleet_cache, session_misses
from compaction.models import Archive, CompactionRun
from console.cache_views import cache_period
from console.export_format import CONTENT_TYPES, FORMATS, Column, Format, export_lines
from console.forms import PRICE_FIELDS, SessionFilterForm
from console.overview import load_overview
from console.period_request import refused_period, remembered_zone, request_period
from console.roles import Role, require_role
from console.selectors.compaction import HistoryKey, compaction_history
from console.selectors.policies import load_policies
from console.selectors.session import session_or_404
from console.selectors.session_list import after_keys, filtered_sessions, key_values
from telemetry.band_sql import BANDS
from telemetry.cache_misses import CAUSES, ttl_advice
from telemetry.errors import FieldError
from telemetry.models import AgentKey, AgentProfile, AgentSession, CatalogueModel, ContextEvent
from telemetry.policy_store import effective_policy
from telemetry.session_state import session_band
from telemetry.session_tags import tags_of

EXPORT_CHUNK: Final = 1000

Row = Sequence[object]
T = TypeVar("T")
K = TypeVar("K")


def keyset_chunks(
    read: Callable[[K | None, int], list[T]], key: Callable[[T], K], size: int | None = None
) -> Iterator[T]:
    """Every row `read` returns, chunk after chunk: `read(after, size)` gives up to `size` rows
    after the row whose key is `after` (from the start when None). Stops at a short chunk."""
    size = size or EXPORT_CHUNK
    after: K | None = None
    while True:
        chunk = read(after, size)
        yield from chunk
        if len(chunk) < size:
            return
        after = key(chunk[-1])


def _format(fmt: str) -> Format:
    for known in FORMATS:
        if fmt == known:
            return known
    raise Http404("exports are .csv or .jsonl")


def streamed(
    fmt: str, name: str, columns: Sequence[Column], rows: Iterable[Row]
) -> StreamingHttpResponse:
    """The download of `rows` in `fmt`, named `<name>-<UTC time>.<fmt>`, written as read."""
    chosen = _format(fmt)
    response = StreamingHttpResponse(
        (line.encode("utf-8") for line in export_lines(chosen, columns, rows)),
        content_type=CONTENT_TYPES[chosen],
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    filename = f"{name}-{stamp}.{chosen}"
    response["Content-Disposition"] = (
        content_disposition_header(as_attachment=True, filename=filename) or "attachment"
    )
    # per user and as of now: never kept by a shared cache
    response["Cache-Control"] = "private, no-store"
    return response


# --- the sessions list ---------------------------------------------------------------------------

SESSION_EXPORT_COLUMNS: Final = (
    Column("id", "int"),
    Column("session"),
    Column("pressure_band"),
    Column("pressure", "float"),
    Column("profile"),
    Column("model"),
    Column("last_turn_cache_hit", "float"),
    Column("cache_hit", "float"),
    Column("cost_usd", "money"),
    Column("unpriced_calls", "int"),
    Column("turns", "int"),
    Column("last_turn_rounds", "int"),
    Column("last_seen_at", "time"),
    Column("created_at", "time"),
    Column("title"),
    Column("tags", "list"),
)


@require_GET
@require_role(Role.VIEWER)
def sessions_export(request: HttpRequest, fmt: str) -> HttpResponseBase:
    """The sessions list with its filters and sort (`SessionFilterForm`, `filtered_sessions`),
    every page of it, keyset-read along the list's own order (`after_keys`); its period
    (`?from=&to=`) refused as the page refuses it."""
    _format(fmt)
    if request.GET.get("from") or request.GET.get("to"):
        try:
            request_period(request)
        except FieldError as exc:
            return refused_period(request, exc)
    filters = SessionFilterForm(request.GET).filters(remembered_zone(request))
    profiles = list(AgentProfile.objects.order_by("name"))
    policies = load_policies()

    def read(
        after: tuple[Any, ...] | None, size: int
    ) -> list[tuple[AgentSession, tuple[str, ...]]]:
        sessions = filtered_sessions(filters, profiles, policies)
        if after is not None:
            sessions = sessions.filter(after_keys(filters.sort, after))
        chunk = list(sessions[:size])
        tags = tags_of([s.pk for s in chunk]) if chunk else {}  # one query a chunk
        return [(s, tags.get(s.pk, ())) for s in chunk]

    def rows() -> Iterator[Row]:
        for session, tags in keyset_chunks(read, lambda found: key_values(found[0], filters.sort)):
            policy = policies.of(session.profile_id)
            yield (
                session.pk,
                session.external_id,
                session_band(session, policy),
                session.pressure,
                session.profile.name,
                session.model,
                session.last_turn_cache_hit_ratio,
                session.cache_hit_ratio,
                session.cost_usd,
                session.unpriced_calls,
                session.turns_count,
                session.last_turn_rounds,
                session.last_seen_at,
                session.created_at,
                session.title,
                tags,
            )

    return streamed(fmt, "sessions", SESSION_EXPORT_COLUMNS, rows())


# --- spend per profile (the overview) ------------------------------------------------------------

SPEND_EXPORT_COLUMNS: Final = (
    Column("profile"),
    Column("range"),
    Column("since", "time"),
    Column("calls", "int"),
    Column("cost_usd", "money"),
    Column("unpriced_calls", "int"),
    Column("saved_usd", "money"),
    Column("cache_hit", "float"),
    *(Column(f"sessions_{band}", "int") for band in BANDS),
    Column("until", "time"),
    Column("time_zone"),
)


@require_GET
@require_role(Role.VIEWER)
def spend_export(request: HttpRequest, fmt: str) -> HttpResponseBase:
    """The overview's per-profile table over its period (`?range=` or `?from=&to=`, `?tz=`;
    `?profile=` as the page takes it): calls, spend, what the cache saved, hit ratio and
    sessions by band now."""
    _format(fmt)
    try:
        period = request_period(request)
    except FieldError as exc:
        return refused_period(request, exc)
    found = load_overview(period, request.GET.get("profile", ""))
    rows = (
        (
            line.name,
            found.range_key,
            found.since,
            line.calls,
            line.cost,
            line.unpriced,
            line.saved,
            line.hit,
            *(line.bands.get(band, 0) for band in BANDS),
            period.end,
            period.zone,
        )
        for line in found.lines
    )
    return streamed(fmt, f"spend-{found.range_key}", SPEND_EXPORT_COLUMNS, rows)


# --- cache misses --------------------------------------------------------------------------------

MISS_EXPORT_COLUMNS: Final = (
    Column("session"),
    Column("turn", "int"),
    Column("call", "int"),
    Column("at", "time"),
    Column("model"),
    Column("expected_tokens", "int"),
    Column("read_tokens", "int"),
    Column("missed_tokens", "int"),
    Column("premium_usd", "money"),
    Column("cause"),
    Column("evidence"),
)


@require_GET
@require_role(Role.VIEWER)
def session_misses_export(request: HttpRequest, pk: int, fmt: str) -> StreamingHttpResponse:
    """A session's cache misses as its cache table lists them (`session_misses`)."""
    _format(fmt)
    session = session_or_404(pk)
    report = session_misses(session)
    rows = (
        (
            session.external_id,
            miss.turn,
            miss.call,
            miss.at,
            miss.model,
            miss.expected_tokens,
            miss.read_tokens,
            miss.missed_tokens,
            miss.premium_usd,
            miss.cause,
            miss.evidence,
        )
        for miss in report.misses
    )
    return streamed(fmt, f"cache-misses-{session.pk}", MISS_EXPORT_COLUMNS, rows)


FLEET_CACHE_COLUMNS: Final = (
    Column("profile"),
    Column("since", "time"),
    Column("cache_ttl"),
    *(Column(f"premium_{cause}_usd", "money") for cause in CAUSES),
    Column("premium_usd", "money"),
    Column("system_changed_calls", "int"),
    Column("system_call_pairs", "int"),
    Column("violates_d2", "bool"),
    Column("ttl_advice"),
)


@require_GET
@require_role(Role.VIEWER)
def fleet_cache_export(request: HttpRequest, fmt: str) -> HttpResponseBase:
    """The cache page's profiles table over its period: miss premiums by cause, D2 churn and
    TTL advice."""
    _format(fmt)
    try:
        period = cache_period(request, request_period(request))
    except FieldError as exc:
        return refused_period(request, exc)
    report = fleet_cache(since=period.start, until=period.end)
    stored = {p.name: p for p in AgentProfile.objects.filter(name__in=report.profiles)}

    def rows() -> Iterator[Row]:
        for name, profile in sorted(report.profiles.items()):
            tier = effective_policy(stored[name]).cache_ttl
            yield (
                name,
                report.since,
                tier,
                *(profile.by_cause[cause] for cause in CAUSES),
                profile.premium_usd,
                profile.churn.changed,
                profile.churn.pairs,
                profile.churn.violates_d2,
                ttl_advice(tier, profile.expiry),
            )

    return streamed(fmt, "cache-misses", FLEET_CACHE_COLUMNS, rows())


# --- compaction runs -----------------------------------------------------------------------------

RUN_EXPORT_COLUMNS: Final = (
    Column("session"),
    Column("at", "time"),
    Column("origin"),
    Column("kind"),
    Column("status"),
    Column("action"),
    Column("requested_by"),
    Column("trigger"),
    Column("turn", "int"),
    Column("tokens_before", "int"),
    Column("tokens_after", "int"),
    Column("estimate_tokens", "int"),
    Column("archived", "bool"),
    Column("finished_at", "time"),
    Column("reason"),
)


def _history_row(session: AgentSession, entry: CompactionRun | ContextEvent) -> Row:
    if isinstance(entry, CompactionRun):
        return (
            session.external_id,
            entry.started_at,
            entry.mode,  # ours: manual, auto or overflow (the overview's origins)
            "run",
            entry.status,
            entry.action,
            entry.requested_by,
            entry.trigger,
            None,
            entry.tokens_before,
            entry.tokens_after,
            entry.estimate_tokens,
            entry.archived,
            entry.finished_at,
            entry.reason or entry.error,
        )
    return (
        session.external_id,
        entry.at,
        entry.origin,  # the agent's or the provider's
        entry.kind,
        None,
        None,
        None,
        entry.trigger,
        entry.turn,
        entry.tokens_before,
        entry.tokens_after,
        None,
        None,
        None,
        entry.summary,
    )


@require_GET
@require_role(Role.VIEWER)
def session_runs_export(request: HttpRequest, pk: int, fmt: str) -> StreamingHttpResponse:
    """A session's whole compaction history, oldest first: our runs (every outcome) and the
    agent's and provider's context events, in `compaction_history`'s one order."""
    _format(fmt)
    session = session_or_404(pk)

    def read(
        after: HistoryKey | None, size: int
    ) -> list[tuple[HistoryKey, CompactionRun | ContextEvent]]:
        return compaction_history(session, after=after, limit=size)[:size]

    rows = (
        _history_row(session, entry) for _, entry in keyset_chunks(read, lambda found: found[0])
    )
    return streamed(fmt, f"compactions-{session.pk}", RUN_EXPORT_COLUMNS, rows)


# --- archives ------------------------------------------------------------------------------------

ARCHIVE_EXPORT_COLUMNS: Final = (
    Column("id", "int"),
    Column("session"),
    Column("profile"),
    Column("created_at", "time"),
    Column("log_messages", "int"),
    Column("surface_version", "int"),
    Column("format"),
    Column("chars", "int"),
)


@require_GET
@require_role(Role.VIEWER)
def archives_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    """The archives list (every profile's, or one session's with `?session=`), newest first."""
    _format(fmt)
    archives = Archive.objects.select_related("session__profile").defer("surface")
    session_pk = request.GET.get("session", "")
    if session_pk.isdigit() and len(session_pk) < 19:
        archives = archives.filter(session_id=int(session_pk))

    def read(after: tuple[datetime, int] | None, size: int) -> list[Archive]:
        chunk = archives
        if after is not None:
            at, last = after
            chunk = chunk.filter(Q(created_at__lt=at) | Q(created_at=at, pk__lt=last))
        return list(chunk.order_by("-created_at", "-pk")[:size])

    rows = (
        (
            archive.pk,
            archive.session.external_id,
            archive.session.profile.name,
            archive.created_at,
            archive.log_messages,
            archive.surface_version,
            archive.format,
            archive.chars,
        )
        for archive in keyset_chunks(read, lambda a: (a.created_at, a.pk))
    )
    return streamed(fmt, "archives", ARCHIVE_EXPORT_COLUMNS, rows)


# --- the catalogue and agent keys (admins) -------------------------------------------------------

CATALOGUE_EXPORT_COLUMNS: Final = (
    Column("model"),
    Column("provider"),
    Column("family"),
    Column("window_tokens", "int"),
    Column("max_window_tokens", "int"),
    Column("long_context_threshold", "int"),
    # US dollars per million tokens, exact as stored
    *(Column(f"{name}_usd_per_mtok", "decimal") for name in PRICE_FIELDS),
    Column("updated_at", "time"),
)


@require_GET
@require_role(Role.ADMIN)
def catalogue_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    """The catalogue's rows in the page's order, prices exact as stored."""
    _format(fmt)
    rows = (
        (
            row.model,
            row.provider,
            row.family,
            row.window_tokens,
            row.max_window_tokens,
            row.long_context_threshold,
            *(getattr(row, name) for name in PRICE_FIELDS),
            row.updated_at,
        )
        for row in CatalogueModel.objects.order_by("provider", "model").iterator(EXPORT_CHUNK)
    )
    return streamed(fmt, "catalogue", CATALOGUE_EXPORT_COLUMNS, rows)


KEY_EXPORT_COLUMNS: Final = (
    Column("id", "int"),
    Column("key"),
    Column("name"),
    Column("profile"),
    Column("scopes", "list"),
    Column("created_at", "time"),
    Column("last_used_at", "time"),
    Column("revoked_at", "time"),
)


@require_GET
@require_role(Role.ADMIN)
def keys_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    """The agent keys as the keys page lists them: each named by its public prefix. The secret
    is never stored and its hash never leaves the database (the query does not read it)."""
    _format(fmt)
    keys = (
        AgentKey.objects.select_related("profile")
        .only(
            "pk",
            "prefix",
            "name",
            "scopes",
            "created_at",
            "last_used_at",
            "revoked_at",
            "profile__name",
        )
        .order_by("-created_at", "-pk")
    )
    rows = (
        (
            key.pk,
            f"clc_{key.prefix}_…",
            key.name,
            key.profile.name,
            key.scopes,
            key.created_at,
            key.last_used_at,
            key.revoked_at,
        )
        for key in keys.iterator(EXPORT_CHUNK)
    )
    return streamed(fmt, "agent-keys", KEY_EXPORT_COLUMNS, rows)
