"""Reads of the sessions list: filters, sorts (the pressure band per profile's thresholds),
a page counted no further than a cap, the models sessions report, each shown session's relief
state, and the list's version key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from django.core.paginator import Page, Paginator
from django.db import connections, router
from django.db.models import Exists, F, FloatField, IntegerField, OrderBy, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, NullIf
from django.utils import timezone
from django.utils.functional import cached_property

from compaction.relief_state import SessionRelief, session_reliefs
from console.list_filters import bound_lookups
from console.periods import PRESETS
from console.selectors.policies import Policies, band_rank, load_policies
from console.selectors.relief import filter_by_relief
from telemetry.band_sql import BANDS, band_ranges
from telemetry.models import AgentProfile, AgentSession, LLMCall, SessionTag
from telemetry.policy_rules import PolicyValues
from telemetry.session_tags import known_tags, tags_of

SESSIONS_PER_PAGE: Final = 25
ACTIVE_WINDOW: Final = timedelta(hours=1)

# Sort keys of the sessions list → the expression ordered by. Nulls sort last either way.
SORTS: Final[dict[str, Any]] = {
    "session": F("external_id"),
    "profile": F("profile__name"),
    "model": F("model"),
    "pressure": F("pressure"),
    "last_hit": F("last_turn_cache_hit_ratio"),
    "hit": F("overall_hit"),
    "cost": F("cost_usd"),
    "turns": F("turns_count"),
    "rounds": F("last_turn_rounds"),
    "last_seen": F("last_seen_at"),
}
DEFAULT_SORT: Final = "-last_seen"


@dataclass(frozen=True)
class SessionFilters:
    q: str = ""
    profile: str = ""
    model: str = ""
    band: str = ""
    active: bool = False
    relief: str = ""  # a key of `console.selectors.relief.RELIEF_FILTERS`
    # seen within the last `seen` (a key of `console.periods.PRESETS`): the overview's bands
    seen: str = ""
    # active in [active_from, active_to) (`active_between`): a period's drill-down
    active_from: datetime | None = None
    active_to: datetime | None = None
    sort: str = DEFAULT_SORT
    page: int = 1
    # the metadata filters (`META_FILTERS`), each any of several values (?user=a&user=b)
    user: tuple[str, ...] = ()
    repository: tuple[str, ...] = ()
    branch: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    # the operators' tags (any of them) and the range filters (`console.list_filters`)
    tags: tuple[str, ...] = ()
    bounds: tuple[tuple[str, Decimal], ...] = ()

    @property
    def is_filtered(self) -> bool:
        """Any filter narrows the list (the sort and page do not)."""
        return bool(
            self.q
            or self.profile
            or self.model
            or self.band
            or self.active
            or self.seen
            or self.active_from
            or self.relief
            or self.tags
            or self.bounds
            or any(getattr(self, name) for name in META_FILTERS)
        )


# The sessions list's metadata filters: query parameter → the session's indexed column.
META_FILTERS: Final[dict[str, str]] = {
    "user": "meta_user",
    "repository": "repository",
    "branch": "git_branch",
    "agent": "agent_name",
}
META_FILTER_LABELS: Final[dict[str, str]] = {
    "user": "User",
    "repository": "Repository",
    "branch": "Branch",
    "agent": "Agent",
}


@dataclass
class SessionsPage:
    """A page of the sessions list as read: the sessions with every policy they are judged by
    (`console.presenters.sessions` makes the rows)."""

    sessions: list[AgentSession]
    policies: Policies
    page: Page[AgentSession]
    profiles: list[str]
    models: list[str]
    filters: SessionFilters
    version: str = ""  # what the rows show and how many there are (`sessions_version`)
    # each shown session's automatic relief (`compaction.relief_state`), by id
    reliefs: dict[int, SessionRelief] = field(default_factory=dict)
    # each metadata filter's values some session has (`META_FILTERS`)
    choices: dict[str, list[str]] = field(default_factory=dict)
    # each shown session's tags, by id (sessions without one are absent), and the tags to
    # choose from in the tag filter
    tags: dict[int, tuple[str, ...]] = field(default_factory=dict)
    tag_choices: list[str] = field(default_factory=list)


def _band_filter(band: str, profiles: list[AgentProfile], policies: Policies) -> Q:
    """The SQL condition for a pressure band; each profile has its own thresholds."""
    if band in ("unknown", "over"):
        return band_ranges(None, None)[band]  # the same for every profile
    condition = Q(pk__in=[])
    for profile in profiles:
        policy = policies.of(profile.pk)
        ranges = band_ranges(policy.prune_threshold, policy.summarize_threshold)
        condition |= Q(profile_id=profile.pk) & ranges[band]
    return condition


def matching_sessions(
    filters: SessionFilters, profiles: list[AgentProfile], policies: Policies
) -> QuerySet[AgentSession]:
    """The sessions the filters select, unordered and unannotated (what the list counts)."""
    sessions = AgentSession.objects.all()
    if filters.q:
        sessions = sessions.filter(
            Q(external_id__icontains=filters.q) | Q(title__icontains=filters.q)
        )
    if filters.profile:
        sessions = sessions.filter(profile__name=filters.profile)
    if filters.model:
        sessions = sessions.filter(model=filters.model)
    if filters.band in BANDS:
        sessions = sessions.filter(_band_filter(filters.band, profiles, policies))
    if filters.active:
        sessions = sessions.filter(last_seen_at__gte=timezone.now() - ACTIVE_WINDOW)
    if filters.relief:
        sessions = filter_by_relief(sessions, filters.relief, _each_profile(profiles, policies))
    if filters.seen in PRESETS:
        sessions = sessions.filter(last_seen_at__gte=timezone.now() - PRESETS[filters.seen])
    if filters.active_from is not None:
        sessions = sessions.filter(active_between(filters.active_from, filters.active_to))
    for name, column in META_FILTERS.items():
        values = getattr(filters, name)
        if values:
            sessions = sessions.filter(**{f"{column}__in": values})
    if filters.tags:
        tagged = SessionTag.objects.filter(session_id=OuterRef("pk"), tag__in=filters.tags)
        sessions = sessions.filter(Exists(tagged))
    if filters.bounds:
        sessions = sessions.filter(**dict(bound_lookups(filters.bounds)))
    return sessions


def active_between(start: datetime, end: datetime | None = None) -> Q:
    """The sessions active in [start, end): seen since `start` and, given `end`, with a call in
    the period (by the agent's clock, as the rollups date calls). Without `end` (a period that
    runs to now) the last-seen test alone, on the `last_seen_at` indexes."""
    condition = Q(last_seen_at__gte=start)
    if end is not None:
        calls = LLMCall.objects.filter(session=OuterRef("pk"), at__gte=start, at__lt=end)
        condition &= Q(Exists(calls))
    return condition


def _each_profile(profiles: list[AgentProfile], policies: Policies) -> dict[int, PolicyValues]:
    """Every profile's effective policy, as `compaction.relief_state` takes them."""
    return {profile.pk: policies.of(profile.pk) for profile in profiles}


def filtered_sessions(
    filters: SessionFilters, profiles: list[AgentProfile], policies: Policies
) -> QuerySet[AgentSession]:
    """`matching_sessions` in the list's order, with what its rows and sorts need."""
    sessions = (
        matching_sessions(filters, profiles, policies)
        .select_related("profile")
        .annotate(
            overall_hit=Cast("cache_read_tokens", FloatField())
            / NullIf(Cast("cache_denominator_tokens", FloatField()), 0.0)
        )
    )
    if filters.sort.lstrip("-") == "pressure":
        sessions = sessions.annotate(band_rank=band_rank(profiles, policies))
    return sessions.order_by(*_ordering(filters.sort))


@dataclass(frozen=True)
class OrderKey:
    """One key of the list's order: a field or annotation, its direction, and whether it can
    be null (nulls sort last either way). The newest session (`-pk`) breaks every tie."""

    name: str
    descending: bool
    nullable: bool = True


def order_keys(sort: str) -> list[OrderKey]:
    """The list's order for `sort`, before the `-pk` tie-break: what the page is ordered by
    and what a keyset cursor holds (one definition for both). An unknown sort is `-last_seen`."""
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key not in SORTS:
        key, descending = "last_seen", True
    ordered = OrderKey(SORTS[key].name, descending)
    if key == "pressure":
        # the band (per profile thresholds) first, then the figure within the band
        return [OrderKey("band_rank", descending, nullable=False), ordered]
    return [ordered]


def _ordering(sort: str) -> list[OrderBy | str]:
    ordering: list[OrderBy | str] = []
    for key in order_keys(sort):
        expression = F(key.name)
        if not key.nullable:
            ordering.append(expression.desc() if key.descending else expression.asc())
        elif key.descending:
            ordering.append(expression.desc(nulls_last=True))
        else:
            ordering.append(expression.asc(nulls_last=True))
    return [*ordering, "-pk"]


def key_values(session: AgentSession, sort: str) -> tuple[Any, ...]:
    """The values of `session`'s order keys for `sort`, then its pk: where a page after it
    starts (`sessions_after`)."""
    values: list[Any] = []
    for key in order_keys(sort):
        value: Any = session
        for part in key.name.split("__"):
            value = getattr(value, part)
        values.append(value)
    return (*values, session.pk)


def after_keys(sort: str, values: tuple[Any, ...]) -> Q:
    """The sessions that come after the row whose `key_values` are `values`, in `sort`'s order.

    Lexicographic over the order keys with nulls last (after a null only nulls follow; after a
    value, the values beyond it and every null), then `-pk`. Keyset paging: rows inserted
    before that row never shift a later page.
    """
    *keys_values, pk = values
    condition = Q(pk__lt=pk)
    keys = order_keys(sort)
    for key, value in reversed(list(zip(keys, keys_values, strict=True))):
        if value is None:
            condition = Q(**{f"{key.name}__isnull": True}) & condition
            continue
        beyond = Q(**{f"{key.name}__{'lt' if key.descending else 'gt'}": value})
        if key.nullable:
            beyond |= Q(**{f"{key.name}__isnull": True})
        condition = beyond | (Q(**{key.name: value}) & condition)
    return condition


SESSIONS_COUNT_CAP: Final = 2_000


class CappedPaginator(Paginator):  # type: ignore[type-arg]
    """A paginator that counts no further than `cap` rows.

    Counting a list is a scan of every row it holds; at 100,000 sessions that one statement
    cost more than the rest of the page, on every load and every poll. Past the cap the list
    says "2,000+" and pages up to the cap; filters, search and sorting reach the rest.
    `matching` is the same rows without order, join or annotations: how many there are (up to
    the cap) does not depend on the order, so PostgreSQL stops a plain scan after `cap` + 1 rows
    instead of walking the sort index and the table beside it.
    """

    def __init__(
        self,
        object_list: QuerySet[AgentSession],
        per_page: int,
        *,
        cap: int,
        matching: QuerySet[AgentSession] | None = None,
    ) -> None:
        super().__init__(object_list, per_page, allow_empty_first_page=True)
        self.sessions = object_list
        self.matching = object_list if matching is None else matching
        self.cap = cap
        self._probe: int | None = None

    @property
    def probe(self) -> int:
        """The rows counted: at most `cap` + 1 (one more tells that the cap was passed)."""
        if self._probe is None:
            self._probe = self.matching.order_by()[: self.cap + 1].count()
        return self._probe

    def counted_page(self, number: int) -> Page[AgentSession]:
        """`get_page(number)` in one statement where it can: the page's rows carry the capped
        count as an uncorrelated subquery (run once), so counting costs no round trip of its own
        (every statement of a page is a wait for PostgreSQL; P5). A number past the cap, or an
        empty page after the first, falls back to counting first, as `get_page` does."""
        first = (number - 1) * self.per_page
        if number < 1 or first >= self.cap:
            return self.get_page(number)
        sql, params = self.matching.order_by().values("pk")[: self.cap + 1].query.sql_with_params()
        counted = self.sessions.annotate(
            capped_count=RawSQL(f"SELECT COUNT(*) FROM ({sql}) capped", params, IntegerField())
        )
        rows = list(counted[first : first + self.per_page])
        if not rows and number > 1:
            return self.get_page(number)
        self._probe = rows[0].capped_count if rows else 0
        # as `page` does: the last page ends at the (capped) count
        return Page(rows[: self.count - first], self.validate_number(number), self)

    @cached_property
    def count(self) -> int:
        return min(self.probe, self.cap)

    @property
    def capped(self) -> bool:
        return self.probe > self.cap


def sessions_page(filters: SessionFilters) -> SessionsPage:
    """A page of the sessions list with the policies its rows are judged by. None of its
    queries reads every session (the count stops at `SESSIONS_COUNT_CAP`)."""
    profiles = list(AgentProfile.objects.order_by("name"))
    policies = load_policies()
    paginator = CappedPaginator(
        filtered_sessions(filters, profiles, policies),
        SESSIONS_PER_PAGE,
        cap=SESSIONS_COUNT_CAP,
        matching=matching_sessions(filters, profiles, policies),
    )
    page = paginator.counted_page(filters.page)
    sessions = list(page.object_list)
    reliefs = (
        session_reliefs([s.pk for s in sessions], _each_profile(profiles, policies))
        if sessions
        else {}
    )
    tags = tags_of([s.pk for s in sessions]) if sessions else {}
    version = digest(
        repr([_row_state(session) for session in sessions]),
        repr(sorted(tags.items())),
        repr(sorted((pk, relief.state, relief.overdue) for pk, relief in reliefs.items())),
        f"{paginator.probe}",
        policies.version,
    )
    return SessionsPage(
        sessions,
        policies,
        page,
        [p.name for p in profiles],
        session_models(),
        filters,
        version,
        reliefs,
        {name: distinct_values(column) for name, column in META_FILTERS.items()},
        tags,
        known_tags(),
    )


def _row_state(session: AgentSession) -> tuple[object, ...]:
    """What a row of the list shows, for the list's version."""
    return (
        session.pk,
        session.last_seen_at,
        session.pressure,
        session.surface_version,
        session.calls_count,
        session.turns_count,
        session.model,
        session.title,
        session.cost_usd,
        session.relief_requested_at,
    )


# A loose index scan: each step asks the (model) index for the next model after the last one,
# so listing the few distinct models costs a handful of index probes, not a scan of every
# session. Raw SQL because the ORM cannot write a recursive CTE; it runs on PostgreSQL and SQLite.
_DISTINCT_SQL = """
WITH RECURSIVE found(v) AS (
    SELECT MIN({column}) FROM telemetry_agentsession WHERE {column} > ''
    UNION ALL
    SELECT (SELECT MIN(s.{column}) FROM telemetry_agentsession s WHERE s.{column} > found.v)
    FROM found WHERE found.v IS NOT NULL
)
SELECT v FROM found WHERE v IS NOT NULL LIMIT %s
"""
# The columns listed so (each has an index of its own); the SQL names one of these only.
_DISTINCT_COLUMNS: Final = frozenset({"model", *META_FILTERS.values()})
DISTINCT_LIMIT: Final = 200


def distinct_values(column: str, limit: int = DISTINCT_LIMIT) -> list[str]:
    """The first `limit` distinct non-empty values of an indexed session column, sorted. One
    query, index probes only."""
    if column not in _DISTINCT_COLUMNS:
        raise ValueError(f"{column!r} has no index to list its values from")
    # on the replica where the page may read one (`console.routers`)
    with connections[router.db_for_read(AgentSession)].cursor() as cursor:
        cursor.execute(_DISTINCT_SQL.format(column=column), [limit])
        return [row[0] for row in cursor.fetchall()]


def session_models() -> list[str]:
    """Every model some session reports, sorted. One query, index probes only."""
    return distinct_values("model", limit=10_000)


def sessions_version(listing: SessionsPage, query_string: str) -> str:
    """A key that changes when anything the list shows may have changed: its rows, how many
    there are (up to the cap), the policies, and the query. No query of its own."""
    return digest(listing.version, query_string)


def digest(*parts: str) -> str:
    """A short key of `parts` (the version the pollers send back as If-None-Match)."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def sessions_after(
    filters: SessionFilters, *, profile: AgentProfile, after: tuple[Any, ...] | None, limit: int
) -> tuple[list[AgentSession], Policies]:
    """Up to `limit` + 1 of `profile`'s sessions the filters select, in the list's order, after
    the row whose `key_values` are `after` (from the start when None), with the policies they
    are judged by. The console's own filters and order (`filtered_sessions`), keyset-paged: no
    count and no offset, so a page costs the same deep in the list as at its start."""
    profiles = [profile]
    policies = load_policies([profile.pk])
    sessions = filtered_sessions(filters, profiles, policies).filter(profile=profile)
    if after is not None:
        sessions = sessions.filter(after_keys(filters.sort, after))
    return list(sessions[: limit + 1]), policies
