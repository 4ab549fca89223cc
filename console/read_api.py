"""The API of what the console knows (mounted under /api/v1 by `console.api`): the sessions
list with the console's filters and sort, a session with a bounded series, its turns paged, its
compaction history, and the overview's figures.

Each route is an interface over the console's own reads (`console.selectors`, `console.overview`)
and its charts' downsampling: one definition of a filter, a sort, a figure. A key sees only its
profile's sessions; another profile's session is a 404, as everywhere in the API.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Final, Literal

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Query, Router
from ninja.responses import NinjaJSONEncoder
from pydantic import Field

from compaction.models import CompactionRun
from console.charts import PRESSURE_POINTS, Marker, marker_indices, series_indices
from console.cursors import (
    MAX_CURSOR_CHARS,
    Cursor,
    CursorError,
    cursor_scope,
    decode_cursor,
    encode_cursor,
)
from console.list_filters import MAX_TAG_FILTERS, NUMBER_CHARS, first_error, parse_list_filters
from console.list_filters import PARAMETERS as LIST_FILTER_PARAMETERS
from console.overview import RANGES, load_overview
from console.periods import PERIOD_PARAMETERS, Period, parse_period
from console.schemas import CompactionsOut, OverviewOut, SessionListOut, TurnsPageOut
from console.selectors.compaction import HistoryKey, compaction_history
from console.selectors.session import applied_compactions
from console.selectors.session_list import (
    DEFAULT_SORT,
    SESSIONS_PER_PAGE,
    SORTS,
    SessionFilters,
    key_values,
    order_keys,
    sessions_after,
)
from telemetry.api import session_figures, turns_series
from telemetry.auth import ingest_auth, request_key
from telemetry.band_sql import BANDS
from telemetry.errors import FieldError, refuse_unknown
from telemetry.models import AgentKey, AgentSession, ContextEvent, Turn
from telemetry.money import money_text
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy
from telemetry.pressure import PressureBand
from telemetry.schemas import ErrorOut, SessionDetailOut
from telemetry.session_state import session_band
from telemetry.session_tags import tags_of

router = Router(tags=["console"])

MAX_SESSIONS_PAGE: Final = 100
MAX_TURNS_PAGE: Final = 1000
MAX_HISTORY_PAGE: Final = 1000
SORT_PATTERN: Final = "^-?(" + "|".join(SORTS) + ")$"
NO_NUL: Final = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL: refused as a 422, not a 500

Text = Annotated[str, Field(max_length=200, pattern=NO_NUL)]
RangeKey = Annotated[str, Field(pattern="^(" + "|".join([*RANGES, "custom"]) + ")$")]
# a period's bounds and zone (`console.periods`): checked there, the field named on refusal
PeriodText = Annotated[str, Field(max_length=40, pattern=r"^[0-9T:+\-. Z]*$")]
ZoneText = Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_+\-/]*$")]
FromQuery = Annotated[
    PeriodText | None,
    Query(alias="from", description="start: an ISO date or date-time, in `tz` (alone: until now)"),
]
ToQuery = Annotated[
    PeriodText | None,
    Query(
        alias="to",
        description="end (exclusive): an ISO date-time, or a date, which takes in that whole day",
    ),
]
TzQuery = Annotated[ZoneText | None, Query(description="an IANA time zone; UTC when absent")]
# What `encode_cursor` writes: base64url, so a cursor in a URL is as long as it is written.
CursorText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CURSOR_CHARS,
        pattern="^[A-Za-z0-9_-]+$",
        description="`next_cursor` of the previous page, as given",
    ),
]


def _session(key: AgentKey, session_id: str) -> AgentSession:
    return get_object_or_404(
        AgentSession.objects.select_related("profile"), profile=key.profile, external_id=session_id
    )


def _cursor(text: str | None, *, scope: str, keys: int) -> Cursor | None:
    if text is None:
        return None
    try:
        return decode_cursor(text, scope=scope, keys=keys)
    except CursorError as exc:
        raise FieldError("cursor", str(exc)) from None


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


_LIST_PARAMETERS: Final = frozenset(
    {
        "q",
        "model",
        "band",
        "active",
        "sort",
        "limit",
        "cursor",
        "from",
        "to",
        "tz",
        *LIST_FILTER_PARAMETERS,
    }
)
# What the range filters take (`console.list_filters` checks them; the schema says their shape)
Bound = Annotated[
    str | None,
    Field(
        max_length=NUMBER_CHARS,
        pattern=r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)?\s*$",
        description="a number, 0 or more; both ends inclusive",
    ),
]


def named_session(
    session: AgentSession, policy: PolicyValues, tags: tuple[str, ...]
) -> dict[str, Any]:
    """A session as the read API gives it (`SessionReadOut`): its figures, title, metadata and
    tags."""
    return {
        **session_figures(session, policy),
        "title": session.title,
        "metadata": {k: v for k, v in (session.metadata or {}).items() if isinstance(v, str)},
        "tags": list(tags),
    }


_OVERVIEW_PARAMETERS: Final = frozenset({"profile", *PERIOD_PARAMETERS})


def _period(request: HttpRequest) -> Period:
    """The period of the request's `range`/`from`/`to`/`tz`/`compare` (`console.periods`),
    ending now; `FieldError` (422 naming the field) for a bad one."""
    params = {name: request.GET.get(name, "") for name in PERIOD_PARAMETERS}
    return parse_period(params, now=timezone.now())


@router.get(
    "/sessions",
    auth=ingest_auth,
    response={200: SessionListOut, 422: ErrorOut},
    summary="The key's sessions, filtered and sorted as the console's list, cursor-paged",
)
def list_sessions(
    request: HttpRequest,
    q: Annotated[Text, Field(description="part of the session id, any case")] = "",
    model: Text = "",
    band: PressureBand | None = None,
    active: Annotated[bool, Field(description="seen in the last hour")] = False,
    sort: Annotated[
        str,
        Field(pattern=SORT_PATTERN, description="a column, `-` first for descending"),
    ] = DEFAULT_SORT,
    limit: Annotated[int, Field(ge=1, le=MAX_SESSIONS_PAGE)] = SESSIONS_PER_PAGE,
    cursor: CursorText | None = None,
    tag: Annotated[
        list[Annotated[str, Field(max_length=200, pattern=NO_NUL)]],
        Query(
            max_length=MAX_TAG_FILTERS,
            description="sessions holding any of these tags (repeat: `tag=a&tag=b`)",
        ),
    ] = [],  # noqa: B006 (ninja reads the default; it is never mutated)
    cost_min: Annotated[Bound, Field(description="cost at least this, US dollars")] = None,
    cost_max: Annotated[Bound, Field(description="cost at most this, US dollars")] = None,
    turns_min: Annotated[Bound, Field(description="at least this many turns")] = None,
    turns_max: Annotated[Bound, Field(description="at most this many turns")] = None,
    from_: FromQuery = None,
    to: ToQuery = None,
    tz: TzQuery = None,
) -> dict[str, Any]:
    """The console's sessions list as data: the same filters (`q` in the id, `model`, pressure
    `band` under each profile's thresholds, `active` in the last hour, any of the operators'
    `tag`s, `cost_min`/`cost_max` in US dollars and `turns_min`/`turns_max`, read by the
    console's one parser), the same sorts (by pressure: the band first, then the figure; nulls
    last; the newest session breaks ties), each session's figures, title, metadata and tags as
    `GET /sessions/{id}` gives them without the series.

    Keyset-paged: `next_cursor` resumes after the page's last session, so sessions created
    meanwhile never repeat or skip one; a cursor is valid only for the filters and sort that
    issued it (else 422 on `cursor`).

    `from` and `to` (in `tz`): only the sessions active in that period (a call in it); `from`
    alone: active since then, `to` alone: active until then (`console.periods`)."""
    refuse_unknown(request.GET, _LIST_PARAMETERS)
    key = request_key(request)
    # the tag and range filters: the console list's own parser, its first refusal a 422
    listed, errors = parse_list_filters(request.GET.getlist)
    if (refused := first_error(errors)) is not None:
        raise FieldError(*refused)
    active_from = active_to = None
    if from_ or to:
        period = _period(request)
        active_from, active_to = period.start, period.end
    filters = SessionFilters(
        q=q.strip(),
        model=model,
        band=band or "",
        active=active,
        sort=sort,
        tags=listed.tags,
        bounds=listed.bounds,
        active_from=active_from,
        active_to=active_to,
    )
    scope = cursor_scope(
        "sessions",
        filters.q,
        model,
        filters.band,
        active,
        sort,
        *listed.tags,
        *(f"{param}={value}" for param, value in listed.bounds),
        _iso(active_from) or "",
        # `from` alone ends now: its pages share the scope as the clock moves
        _iso(active_to) if to else "",
    )
    after = _cursor(cursor, scope=scope, keys=len(order_keys(sort)) + 1)
    sessions, policies = sessions_after(
        filters, profile=key.profile, after=None if after is None else after.keys, limit=limit
    )
    page = sessions[:limit]
    more = len(sessions) > limit
    tags = tags_of([s.pk for s in page]) if page else {}
    return {
        "sort": sort,
        "sessions": [named_session(s, policies.of(s.profile_id), tags.get(s.pk, ())) for s in page],
        "next_cursor": (
            encode_cursor(Cursor(scope, key_values(page[-1], sort))) if more and page else None
        ),
    }


@router.get(
    "/sessions/{session_id}",
    auth=ingest_auth,
    response={200: SessionDetailOut, 404: ErrorOut, 401: ErrorOut},
    summary="The session's figures, with its per-turn series bounded to `series_limit` points",
)
def get_session(
    request: HttpRequest,
    session_id: str,
    response: HttpResponse,
    series_limit: Annotated[
        int,
        Field(
            ge=0,
            le=PRESSURE_POINTS,
            description="at most this many turns in `turns_series` (0: the figures alone)",
        ),
    ] = PRESSURE_POINTS,
) -> HttpResponse:
    """Current and peak context, projection, pressure, cost, cache hit, window in force, and the
    per-turn series: every turn when they fit in `series_limit`, else downsampled as the
    console's pressure chart is (`series_complete` says which). Another profile's session is a
    404."""
    key = request_key(request)
    session = _session(key, session_id)
    series, complete = _series(session, series_limit)
    payload = {
        **named_session(
            session, effective_policy(key.profile), tags_of([session.pk]).get(session.pk, ())
        ),
        "series_complete": complete,
        "turns_series": series,
    }
    # Rendered as is: `turns_series` builds exactly `TurnOut`'s fields (tests/db/
    # test_ingest_payload compares the bytes with ninja's validated rendering), and validating
    # a 2,000-point series again was most of its read (make bench P3's API).
    response.content = json.dumps(payload, cls=NinjaJSONEncoder)  # ninja's JSONRenderer
    return response


def _series(session: AgentSession, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """At most `limit` turns of the series, and whether that is every turn. One read when the
    series fits; else three (the context per turn, the compactions, the chosen turns)."""
    if limit == 0:
        return [], not Turn.objects.filter(session=session).exists()
    rows = turns_series(session.pk, limit=limit + 1)
    if len(rows) <= limit:
        return rows, True
    turns, context = (
        list(column)
        for column in zip(
            *Turn.objects.filter(session=session)
            .order_by("turn")
            .values_list("turn", "context_tokens"),
            strict=True,
        )
    )
    markers = [Marker(run.turn, run.mode) for run in applied_compactions(session)]
    indices = series_indices(context, limit, keep=marker_indices(turns, markers))
    chosen = turns_series(session.pk, turns=[turns[i] for i in indices])
    return chosen, len(chosen) == len(turns)


@router.get(
    "/sessions/{session_id}/turns",
    auth=ingest_auth,
    response={200: TurnsPageOut, 404: ErrorOut, 422: ErrorOut},
    summary="Page through the session's turns in order",
)
def get_turns(
    request: HttpRequest,
    session_id: str,
    after_turn: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1,
    limit: Annotated[int, Field(ge=1, le=MAX_TURNS_PAGE)] = 200,
) -> dict[str, Any]:
    """Up to `limit` turns numbered above `after_turn`, in order, each as in the session's
    series. `next_after_turn` is the next page's `after_turn`, null on the last page."""
    session = _session(request_key(request), session_id)
    rows = turns_series(session.pk, after=after_turn, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return {
        "session_id": session.external_id,
        "turns": rows,
        "next_after_turn": rows[-1]["turn"] if more else None,
    }


@router.get(
    "/sessions/{session_id}/compactions",
    auth=ingest_auth,
    response={200: CompactionsOut, 404: ErrorOut, 422: ErrorOut},
    summary="The session's compaction history: our runs and the agent's and provider's events",
)
def get_compactions(
    request: HttpRequest,
    session_id: str,
    limit: Annotated[int, Field(ge=1, le=MAX_HISTORY_PAGE)] = 200,
    cursor: CursorText | None = None,
) -> dict[str, Any]:
    """One ordered list, oldest first, each entry with its origin: our runs (`ours`: manual,
    automatic or overflow, whatever their outcome) and the context events the agent or the
    provider reported (their compactions, context edits and overflows), with tokens before and
    after. `next_cursor` resumes after the page's last entry."""
    session = _session(request_key(request), session_id)
    scope = cursor_scope("compactions", session.pk)
    after = _cursor(cursor, scope=scope, keys=3)
    after_key: HistoryKey | None = None
    if after is not None:
        at, rank, pk = after.keys
        if not (isinstance(at, datetime) and isinstance(rank, int) and isinstance(pk, int)):
            raise FieldError("cursor", "is not a cursor this API wrote")
        after_key = (at, rank, pk)
    entries = compaction_history(session, after=after_key, limit=limit)
    page = entries[:limit]
    more = len(entries) > limit
    return {
        "session_id": session.external_id,
        "compactions": [_history_entry(entry) for _, entry in page],
        "next_cursor": encode_cursor(Cursor(scope, page[-1][0])) if more else None,
    }


def _history_entry(entry: CompactionRun | ContextEvent) -> dict[str, Any]:
    if isinstance(entry, CompactionRun):
        freed = (
            None
            if entry.tokens_before is None or entry.tokens_after is None
            else entry.tokens_before - entry.tokens_after
        )
        return {
            "id": f"run:{entry.pk}",
            "origin": "ours",
            "kind": "compaction",
            "mode": entry.mode,
            "status": entry.status,
            "action": entry.action,
            "trigger": entry.trigger,
            "source": "console",
            "at": entry.started_at.isoformat(),
            "finished_at": _iso(entry.finished_at),
            "turn": None,
            "tokens_before": entry.tokens_before,
            "tokens_after": entry.tokens_after,
            "tokens_freed": freed,
            "surface_version_before": entry.surface_version_before,
            "surface_version_after": entry.surface_version_after,
            "archived": entry.archived,
            "reason": entry.reason,
        }
    return {
        "id": f"event:{entry.pk}",
        "origin": entry.origin,
        "kind": entry.kind,
        "mode": None,
        "status": "recorded",
        "action": "",
        "trigger": entry.trigger,
        "source": entry.source,
        "at": entry.at.isoformat(),
        "finished_at": None,
        "turn": entry.turn,
        "tokens_before": entry.tokens_before,
        "tokens_after": entry.tokens_after,
        "tokens_freed": entry.tokens_freed,
        "surface_version_before": None,
        "surface_version_after": None,
        "archived": None,
        "reason": "",
    }


@router.get(
    "/overview",
    auth=ingest_auth,
    response={200: OverviewOut, 404: ErrorOut, 422: ErrorOut},
    summary="The overview's figures for the key's profile over a range",
)
def get_overview(
    request: HttpRequest,
    range: Annotated[  # noqa: A002 (the query parameter's name, as the console's page has it)
        RangeKey | None,
        Field(
            description="a preset: 1h, 24h (hour buckets), 7d, 14d or 30d (day buckets); "
            "24h when neither it nor from and to are given; custom: from and to"
        ),
    ] = None,
    profile: Annotated[
        Text, Field(description="the key's own profile (the only one it sees); blank: the same")
    ] = "",
    from_: FromQuery = None,
    to: ToQuery = None,
    tz: TzQuery = None,
    compare: Annotated[
        Literal["previous"] | None,
        Query(description="previous: the previous period's totals beside (`previous`)"),
    ] = None,
) -> dict[str, Any]:
    """What the console's overview shows, for the key's profile: spend and cache savings per
    bucket (from the hour rollups), the cache-hit trend, sessions by pressure band now,
    compactions by origin per day with the tokens freed, and the top sessions by cost and by
    pressure. Another profile's name is a 404 on `profile`."""
    refuse_unknown(request.GET, _OVERVIEW_PARAMETERS)
    key = request_key(request)
    own = key.profile
    if profile and profile != own.name:
        raise FieldError("profile", "no such profile for this key", status=404)
    period = _period(request)
    found = load_overview(period, own.name)
    policy = effective_policy(own)
    zone = period.tz
    previous = found.previous
    return {
        "range": found.range_key,
        "bucket": found.bucket,
        "since": found.since.isoformat(),
        "until": period.end.isoformat(),
        "time_zone": period.zone,
        "previous": None
        if previous is None
        else {
            "since": period.previous().start.isoformat(),
            "calls": previous.calls,
            "cost_usd": money_text(previous.cost),
            "unpriced_calls": previous.unpriced,
            "saved_usd": money_text(previous.saved),
            "cache_hit_ratio": previous.hit,
            "sessions": previous.sessions,
        },
        "profile": own.name,
        "calls": found.calls,
        "cost_usd": money_text(found.cost),
        "unpriced_calls": found.unpriced,
        "saved_usd": money_text(found.saved),
        "cache_hit_ratio": found.hit,
        "buckets": [
            {
                "start": b.start.astimezone(zone).isoformat(),
                "calls": b.calls,
                "cost_usd": money_text(sum(b.costs.values(), Decimal(0))),
                "unpriced_calls": b.unpriced,
                "cost_by_bucket_usd": {k: money_text(v) for k, v in b.costs.items()},
                "saved_usd": money_text(b.saved),
                "cache_hit_ratio": b.hit,
            }
            for b in found.buckets
        ],
        "sessions_by_band": {band: found.bands.get(band, 0) for band in BANDS},
        "compactions_by_origin": found.origin_totals,
        "freed_tokens": found.freed,
        "archive_failures": found.archive_failures,
        "compaction_days": [
            {
                "day": d.day.astimezone(zone).isoformat(),
                "compactions_by_origin": d.counts,
                "freed_tokens": d.freed,
                "archive_failures": d.archive_failures,
            }
            for d in found.days
        ],
        "top_cost": [_top(s, session_band(s, policy)) for s in found.top_cost],
        "top_pressure": [_top(s, band) for s, band in found.top_pressure],
    }


def _top(session: AgentSession, band: PressureBand) -> dict[str, Any]:
    return {
        "session_id": session.external_id,
        "pressure": session.pressure,
        "pressure_band": band,
        "cost_usd": money_text(session.cost_usd),
        "last_seen_at": _iso(session.last_seen_at),
    }
