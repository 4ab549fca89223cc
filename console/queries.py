"""Read functions of the console. Views call these; nothing here writes.

Query counts are constant: a page of sessions costs the same whatever the number of sessions,
and a session's series costs one query whatever its number of turns.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OrderBy,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, NullIf
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from compaction.archives import SearchHit, archive_document, search_archives_counted
from compaction.estimate_checks import with_next_call
from compaction.models import Archive, CompactionRun, Surface
from compaction.transcripts import derive, format_of, stored_surface_messages, surface_at
from console.charts import Marker
from context_core import (
    OMISSION_MARKER,
    STUB_HEADER,
    SUMMARY_HEADER,
    Block,
    Format,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    TranscriptError,
    parse_anthropic,
    parse_message,
    parse_openai,
)
from context_core.estimates import estimate_error
from telemetry.cache_tiers import CachedCall, TierComparison, compare_ttl_tiers
from telemetry.catalogue import load_catalogue
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall, Policy, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import layered_policy, row_overrides
from telemetry.pressure import PressureBand, round_signal
from telemetry.pricing import ModelPrice, find_price
from telemetry.session_state import session_band

SESSIONS_PER_PAGE: Final = 25
TURNS_PER_PAGE: Final = 25
ACTIVE_WINDOW: Final = timedelta(hours=1)
TRAFFIC_WINDOW: Final = timedelta(days=7)

BANDS: Final[tuple[PressureBand, ...]] = ("ok", "prune", "compact", "over", "unknown")

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


# --- policies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policies:
    """Every profile's effective policy from one read of the policy rows.

    Computes what `telemetry.policy_store.effective_policy` computes, for all profiles at once.
    `version` changes whenever any policy row changes (for conditional GETs).
    """

    global_policy: PolicyValues
    by_profile: dict[int, PolicyValues]
    overridden: dict[int, frozenset[str]]
    version: str

    def of(self, profile_id: int) -> PolicyValues:
        return self.by_profile.get(profile_id, self.global_policy)


def load_policies(profile_ids: Iterable[int] | None = None) -> Policies:
    """One query: the global row and the override rows of `profile_ids` (all when None)."""
    rows = Policy.objects.all()
    if profile_ids is not None:
        rows = rows.filter(Q(is_global=True) | Q(profile_id__in=list(profile_ids)))
    global_row: Policy | None = None
    overrides: list[Policy] = []
    stamps: list[str] = []
    for row in rows.order_by("pk"):
        stamps.append(f"{row.pk}:{row.updated_at.isoformat()}")
        if row.is_global:
            global_row = row
        else:
            overrides.append(row)
    base = layered_policy(global_row)
    by_profile: dict[int, PolicyValues] = {}
    overridden: dict[int, frozenset[str]] = {}
    for row in overrides:
        assert row.profile_id is not None
        values = row_overrides(row)
        by_profile[row.profile_id] = layered_policy(global_row, row)
        overridden[row.profile_id] = frozenset(k for k, v in values.items() if v is not None)
    return Policies(base, by_profile, overridden, ",".join(stamps))


# --- the sessions list -------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFilters:
    q: str = ""
    profile: str = ""
    model: str = ""
    band: str = ""
    active: bool = False
    sort: str = DEFAULT_SORT
    page: int = 1

    @property
    def is_filtered(self) -> bool:
        """Any filter narrows the list (the sort and page do not)."""
        return bool(self.q or self.profile or self.model or self.band or self.active)


@dataclass(frozen=True)
class SessionRow:
    session: AgentSession
    policy: PolicyValues
    band: PressureBand
    # "hard" once a turn reached round_hard_cap, "soft" once one reached round_soft_limit.
    round_flag: str | None
    hit_ratio: float | None


@dataclass
class SessionsPage:
    rows: list[SessionRow]
    page: Page[AgentSession]
    profiles: list[str]
    models: list[str]
    filters: SessionFilters
    version: str = ""  # what the rows show and how many there are (`sessions_version`)


def round_flag(max_rounds: int, policy: PolicyValues) -> str | None:
    signal = round_signal(max_rounds, policy.round_soft_limit, policy.round_hard_cap)
    return {"stop": "hard", "nudge": "soft"}.get(signal)


def band_ranges(prune: Any, summarize: Any) -> dict[str, Q]:
    """Each band as a range of pressure under one profile's thresholds (values or expressions).

    The same rule as `telemetry.pressure.pressure_band` (0 < prune ≤ summarize ≤ 1): the ranges
    are disjoint and cover every pressure, so a band can be counted or filtered on an index of
    `(profile, pressure)` without evaluating a CASE per session.
    """
    return {
        "ok": Q(pressure__lt=prune),
        "prune": Q(pressure__gte=prune, pressure__lt=summarize),
        "compact": Q(pressure__gte=summarize, pressure__lte=1.0),
        "over": Q(pressure__gt=1.0),
        "unknown": Q(pressure__isnull=True),
    }


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


BAND_OF_RANK: Final[dict[int, PressureBand]] = {
    -1: "unknown",
    0: "ok",
    1: "prune",
    2: "compact",
    3: "over",
}


def band_rank(profiles: list[AgentProfile], policies: Policies) -> Case:
    """A session's pressure band in SQL, ranked (-1 unknown, 0 ok … 3 over; `BAND_OF_RANK`).

    Each profile has its own thresholds, so a 28 % that is past a profile's summarize threshold
    ranks above a 37 % that is still ok under another's (sorting by pressure sorts by this
    first, then by the figure).
    """
    whens = [When(pressure__isnull=True, then=Value(-1)), When(pressure__gt=1.0, then=Value(3))]
    for profile in profiles:
        policy = policies.of(profile.pk)
        whens += [
            When(profile_id=profile.pk, pressure__gte=policy.summarize_threshold, then=Value(2)),
            When(profile_id=profile.pk, pressure__gte=policy.prune_threshold, then=Value(1)),
            When(profile_id=profile.pk, then=Value(0)),
        ]
    # a profile created after `profiles` was read has no override yet: the global thresholds
    base = policies.global_policy
    whens += [
        When(pressure__gte=base.summarize_threshold, then=Value(2)),
        When(pressure__gte=base.prune_threshold, then=Value(1)),
    ]
    return Case(*whens, default=Value(0), output_field=IntegerField())


def matching_sessions(
    filters: SessionFilters, profiles: list[AgentProfile], policies: Policies
) -> QuerySet[AgentSession]:
    """The sessions the filters select, unordered and unannotated (what the list counts)."""
    sessions = AgentSession.objects.all()
    if filters.q:
        sessions = sessions.filter(external_id__icontains=filters.q)
    if filters.profile:
        sessions = sessions.filter(profile__name=filters.profile)
    if filters.model:
        sessions = sessions.filter(model=filters.model)
    if filters.band in BANDS:
        sessions = sessions.filter(_band_filter(filters.band, profiles, policies))
    if filters.active:
        sessions = sessions.filter(last_seen_at__gte=timezone.now() - ACTIVE_WINDOW)
    return sessions


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


def _ordering(sort: str) -> list[OrderBy | str]:
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    expression = SORTS.get(key, SORTS["last_seen"])
    if key not in SORTS:
        descending = True
    ordered = expression.desc(nulls_last=True) if descending else expression.asc(nulls_last=True)
    if key == "pressure":
        # the band (per profile thresholds) first, then the figure within the band
        band = F("band_rank").desc() if descending else F("band_rank").asc()
        return [band, ordered, "-pk"]
    return [ordered, "-pk"]


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
    """A page of the sessions list with each row's band and round flag. Four queries, none of
    which reads every session (the count stops at `SESSIONS_COUNT_CAP`)."""
    profiles = list(AgentProfile.objects.order_by("name"))
    policies = load_policies()
    paginator = CappedPaginator(
        filtered_sessions(filters, profiles, policies),
        SESSIONS_PER_PAGE,
        cap=SESSIONS_COUNT_CAP,
        matching=matching_sessions(filters, profiles, policies),
    )
    page = paginator.counted_page(filters.page)
    rows = []
    for session in page.object_list:
        policy = policies.of(session.profile_id)
        rows.append(
            SessionRow(
                session=session,
                policy=policy,
                band=session_band(session, policy),
                round_flag=round_flag(session.max_turn_rounds, policy),
                hit_ratio=session.cache_hit_ratio,
            )
        )
    version = _digest(
        repr([_row_state(row.session) for row in rows]),
        f"{paginator.probe}",
        policies.version,
    )
    return SessionsPage(rows, page, [p.name for p in profiles], session_models(), filters, version)


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
        session.cost_usd,
        session.relief_requested_at,
    )


# A loose index scan: each step asks the (model) index for the next model after the last one,
# so listing the few distinct models costs a handful of index probes, not a scan of every
# session. Raw SQL because the ORM cannot write a recursive CTE; it runs on PostgreSQL and SQLite.
_MODELS_SQL = """
WITH RECURSIVE models(model) AS (
    SELECT MIN(model) FROM telemetry_agentsession WHERE model > ''
    UNION ALL
    SELECT (SELECT MIN(s.model) FROM telemetry_agentsession s WHERE s.model > models.model)
    FROM models WHERE models.model IS NOT NULL
)
SELECT model FROM models WHERE model IS NOT NULL
"""


def session_models() -> list[str]:
    """Every model some session reports, sorted. One query, index probes only."""
    with connection.cursor() as cursor:
        cursor.execute(_MODELS_SQL)
        return [row[0] for row in cursor.fetchall()]


def sessions_version(listing: SessionsPage, query_string: str) -> str:
    """A key that changes when anything the list shows may have changed: its rows, how many
    there are (up to the cap), the policies, and the query. No query of its own."""
    return _digest(listing.version, query_string)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


# --- one session -------------------------------------------------------------------------------


def session_detail(pk: int) -> tuple[AgentSession, PolicyValues, str] | None:
    """The session, its profile's effective policy and a version key of what the live fragment
    shows (figures + policy). Two queries; None when there is no such session."""
    # The runs and context events are part of the version: a refused run or an agent's
    # compaction changes what the page shows without changing the session row.
    runs = CompactionRun.objects.filter(session_id=OuterRef("pk")).order_by()
    events = ContextEvent.objects.filter(session_id=OuterRef("pk")).order_by()
    session = (
        AgentSession.objects.select_related("profile")
        .annotate(
            runs_stamp=Subquery(
                runs.values("session_id")
                .annotate(n=Count("id"), last=Max("finished_at"))
                .values("n")[:1]
            ),
            runs_last=Subquery(runs.order_by("-pk").values("status")[:1]),
            events_stamp=Subquery(
                events.values("session_id").annotate(n=Count("id")).values("n")[:1]
            ),
        )
        .filter(pk=pk)
        .first()
    )
    if session is None:
        return None
    policies = load_policies([session.profile_id])
    policy = policies.of(session.profile_id)
    version = _digest(
        str(session.pk),
        session.last_seen_at.isoformat() if session.last_seen_at else "",
        repr(
            (
                session.pressure,
                session.projected_tokens,
                session.window_tokens,
                session.window_source,
                session.turns_count,
                session.calls_count,
                session.surface_version,
                session.surface_estimate_tokens,
                str(session.cost_usd),
                session.cache_read_tokens,
                session.cache_denominator_tokens,
                session.last_turn_rounds,
                getattr(session, "runs_stamp", None),
                getattr(session, "runs_last", None),
                getattr(session, "events_stamp", None),
            )
        ),
        policies.version,
    )
    return session, policy, version


def session_last_modified(session: AgentSession) -> datetime | None:
    return session.last_seen_at


COST_FIELDS: Final = ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output")


@dataclass
class SessionSeries:
    """Per-turn figures in turn order, ready for `console.charts`."""

    turns: list[int] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    hit: list[float | None] = field(default_factory=list)
    write_5m: list[int] = field(default_factory=list)
    write_1h: list[int] = field(default_factory=list)
    costs: dict[str, list[float | None]] = field(
        default_factory=lambda: {key: [] for key in COST_FIELDS}
    )


def session_series(session: AgentSession) -> SessionSeries:
    """Every turn's figures for the charts. One query, whatever the number of turns.

    Costs arrive as floats cast by the database and the columns are built by transposing the
    rows: making a Decimal per cost and appending per field was ~40% of a 10,000-turn session
    page (make bench, P3).
    """
    series = SessionSeries()
    rows = list(
        Turn.objects.filter(session=session)
        .order_by("turn")
        .annotate(**{f"float_{key}": Cast(f"cost_{key}", FloatField()) for key in COST_FIELDS})
        .values_list(
            "turn",
            "context_tokens",
            "cache_reported_calls",
            "cache_read_reported",
            "cache_denominator",
            "cache_write_5m",
            "cache_write_1h",
            *(f"float_{key}" for key in COST_FIELDS),
        )
    )
    if not rows:
        return series
    turns, context, reported, read, denominator, w5, w1, *costs = (
        list(column) for column in zip(*rows, strict=True)
    )
    series.turns = turns
    series.context = context
    series.hit = [
        None if not n else (r / d if d else 0.0)
        for n, r, d in zip(reported, read, denominator, strict=True)
    ]
    series.write_5m = w5
    series.write_1h = w1
    series.costs = dict(zip(COST_FIELDS, costs, strict=True))
    return series


def turn_bounds(session: AgentSession) -> tuple[int, int] | None:
    """The session's first and last turn numbers (agents count from 0 or from 1). One query."""
    found = Turn.objects.filter(session=session).aggregate(first=Min("turn"), last=Max("turn"))
    if found["first"] is None:
        return None
    return int(found["first"]), int(found["last"])


def turns_page(session: AgentSession, number: str | None) -> Page[Turn]:
    """A page of the turns table, latest first. Two queries."""
    turns = Turn.objects.filter(session=session).order_by("-turn")
    return Paginator(turns, TURNS_PER_PAGE, allow_empty_first_page=True).get_page(number)


def compaction_markers(session: AgentSession) -> list[Marker]:
    """The session's applied compactions, to mark on the pressure chart. One query.

    A run is drawn at the turn it took effect at: the first turn after the latest turn that had
    ended when the run finished (the turn count at that time; 0 before any turn), so the chart
    keeps the two turns either side of the drop it caused.
    """
    ended = Turn.objects.filter(
        session_id=OuterRef("session_id"), last_at__lte=OuterRef("finished_at")
    ).order_by("-turn")
    rows = (
        CompactionRun.objects.filter(session=session, status=CompactionRun.Status.APPLIED)
        .annotate(before=Subquery(ended.values("turn")[:1]))
        .order_by("finished_at", "pk")
        .values_list("before", "mode", "action")
    )
    # short labels: they are drawn slanted above the plot
    return [
        Marker(
            0 if before is None else before + 1,
            f"{'summarize' if 'summarize' in action else action or 'compact'} ({mode})",
        )
        for before, mode, action in rows
    ]


# --- compaction runs, surfaces and archives -----------------------------------------------------

RUNS_SHOWN: Final = 20
ARCHIVES_SHOWN: Final = 20
ARCHIVES_PER_PAGE: Final = 25
SEARCH_HITS: Final = 50
# A block longer than this is cut in the page (the downloads and the API keep every byte).
SHOWN_BLOCK_CHARS: Final = 20_000

_STUB_START: Final = STUB_HEADER.split("{", 1)[0]
_SUMMARY_START: Final = SUMMARY_HEADER.split("{", 1)[0]
# D3: a result bounded at write time carries the one omission marker
_OMITTED: Final = re.compile(re.escape(OMISSION_MARKER).replace(re.escape("{omitted}"), r"\d+"))


@dataclass(frozen=True)
class RunsTable:
    runs: list[CompactionRun]
    total: int
    # Agent- and provider-side compactions, edits and overflows (not our runs), newest first.
    events: list[ContextEvent] = field(default_factory=list)
    events_total: int = 0


def compaction_runs(session: AgentSession) -> RunsTable:
    """The session's latest compaction runs and its agent-/provider-side context events, newest
    first, and how many of each there are. Four queries."""
    runs = CompactionRun.objects.filter(session=session).order_by("-started_at", "-pk")
    events = ContextEvent.objects.filter(session=session).order_by("-at", "-pk")
    shown = list(with_next_call(runs)[:RUNS_SHOWN])
    for run in shown:
        # D6: the estimate beside what the next call really measured.
        run.estimate_error = (  # type: ignore[attr-defined]
            estimate_error(run.estimate_tokens, run.next_context_tokens)  # type: ignore[attr-defined]
            if run.estimate_tokens is not None and run.next_context_tokens is not None  # type: ignore[attr-defined]
            else None
        )
    return RunsTable(shown, runs.count(), list(events[:RUNS_SHOWN]), events.count())


def session_archives(session: AgentSession) -> list[Archive]:
    """The session's latest archives, newest first. One query."""
    return list(
        Archive.objects.filter(session=session).order_by("-created_at", "-pk")[:ARCHIVES_SHOWN]
    )


@dataclass(frozen=True)
class ShownBlock:
    """One block of a message as the transcript viewer draws it."""

    kind: Literal["text", "call", "result", "thinking", "other"]
    text: str
    chars: int
    cut: int = 0  # characters left out of `text` (SHOWN_BLOCK_CHARS)
    name: str = ""  # the tool's name (calls and results)
    call_id: str = ""
    pruned: bool = False
    bounded: bool = False
    is_error: bool = False


@dataclass(frozen=True)
class ShownMessage:
    seq: int
    role: str
    blocks: list[ShownBlock]
    chars: int
    summarizes: tuple[int, int] | None = None

    @property
    def is_summary(self) -> bool:
        return self.summarizes is not None


@dataclass(frozen=True)
class ShownSurface:
    """A surface for the viewer: `turn` None is the surface now; `missing` says why there is
    nothing to show."""

    messages: list[ShownMessage] = field(default_factory=list)
    version: int | None = None
    turn: int | None = None
    tokens: int = 0
    chars: int = 0
    missing: str = ""

    @property
    def stubs(self) -> int:
        return sum(1 for m in self.messages for b in m.blocks if b.pruned)

    @property
    def summaries(self) -> int:
        return sum(1 for m in self.messages if m.is_summary)


def _cut(text: str, limit: int | None = SHOWN_BLOCK_CHARS) -> tuple[str, int]:
    if limit is None or len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def _pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments  # OpenAI passes arguments through as the model wrote them


def _shown_block(
    block: Block, tools: dict[str, str], limit: int | None = SHOWN_BLOCK_CHARS
) -> ShownBlock:
    if isinstance(block, TextBlock):
        text, cut = _cut(block.text, limit)
        return ShownBlock("text", text, block.chars, cut)
    if isinstance(block, ToolCall):
        tools[block.id] = block.name
        text, cut = _cut(_pretty_arguments(block.arguments), limit)
        return ShownBlock("call", text, block.chars, cut, name=block.name, call_id=block.id)
    if isinstance(block, ToolResult):
        whole = block.text
        text, cut = _cut(whole, limit)
        return ShownBlock(
            "result",
            text,
            block.chars,
            cut,
            name=tools.get(block.call_id, ""),
            call_id=block.call_id,
            # a surface read back from JSON (an archive) has lost the flag; the header tells
            pruned=block.pruned or whole.startswith(_STUB_START),
            bounded=not block.pruned and _OMITTED.search(whole) is not None,
            is_error=bool(block.is_error),
        )
    if isinstance(block, ThinkingBlock):
        return ShownBlock("thinking", "", block.chars, name=block.kind)
    text, cut = _cut(block.native, limit)
    return ShownBlock("other", text, block.chars, cut, name=block.type)


def shown_messages(
    messages: Iterable[Message], *, limit: int | None = SHOWN_BLOCK_CHARS
) -> list[ShownMessage]:
    """Messages as the viewer draws them: roles, text, calls and results (named after their
    call), pruned stubs and summaries marked. Never changes a message."""
    tools: dict[str, str] = {}
    shown = []
    for message in messages:
        blocks = [_shown_block(block, tools, limit) for block in message.blocks]
        summarizes = message.summarizes
        if summarizes is None and message.text.startswith(_SUMMARY_START):
            summarizes = _summary_span(message.text) or (message.seq, message.seq)
        shown.append(ShownMessage(message.seq, message.role, blocks, message.chars, summarizes))
    return shown


# At most 18 digits a seq: a longer number is no seq, and `int` refuses thousands of digits.
_SUMMARY_SPAN: Final = re.compile(r"\(seq (\d{1,18})-(\d{1,18})\)")


def _summary_span(text: str) -> tuple[int, int] | None:
    found = _SUMMARY_SPAN.search(text.split("\n", 1)[0])
    return (int(found.group(1)), int(found.group(2))) if found else None


def current_surface(session: AgentSession) -> ShownSurface:
    """The surface as the model sees it now: the stored one (D1: the materialised
    `derive_surface(log, operations)`), read back without touching the log; derived only for a
    row stored before its seqs were."""
    if session.surface_version == 0:
        return ShownSurface(missing="no transcript has been appended to this session yet")
    state = Surface.objects.filter(session=session).first()
    messages = stored_surface_messages(state) if state is not None else None
    if state is not None and messages is not None:
        return ShownSurface(
            shown_messages(messages),
            version=state.version,
            tokens=state.tokens_estimate,
            chars=state.chars,
        )
    _, _, surface = derive(session)
    return ShownSurface(
        shown_messages(surface.messages),
        version=session.surface_version,
        tokens=surface.tokens,
        chars=surface.chars,
    )


def surface_on_turn(session: AgentSession, turn: int) -> ShownSurface:
    """The surface the model saw on `turn`: the version its last call's request used, rebuilt
    exactly (`surface_at`)."""
    version = (
        Turn.objects.filter(session=session, turn=turn)
        .values_list("surface_version", flat=True)
        .first()
    )
    if version is None:
        exists = Turn.objects.filter(session=session, turn=turn).exists()
        why = "its calls did not name a surface version" if exists else "there is no such turn"
        return ShownSurface(turn=turn, missing=f"Turn {turn}: {why}.")
    surface = surface_at(session, version)
    if surface is None:
        return ShownSurface(
            turn=turn, version=version, missing=f"Surface version {version} is not recorded."
        )
    return ShownSurface(
        shown_messages(surface.messages),
        version=version,
        turn=turn,
        tokens=surface.tokens,
        chars=surface.chars,
    )


def safe_snippet(snippet: str) -> SafeString:
    """A search snippet as HTML: everything escaped except balanced <mark>…</mark> pairs.

    The database highlighter wraps hits in <mark> but escapes nothing else, and the archived
    text is whatever an agent sent (a `<script>` included)."""
    out: list[str] = []
    open_marks = 0
    for part in _MARK_TAG.split(snippet):
        if part == "<mark>":
            out.append(part)
            open_marks += 1
        elif part == "</mark>":
            if open_marks:
                out.append(part)
                open_marks -= 1
        else:
            # compaction.archives already escapes; unescape(escape(x)) == x, so escaping once
            # more shows the text exactly, and stays safe if a snippet ever arrives unescaped.
            out.append(escape(html.unescape(part)))
    out.append("</mark>" * open_marks)
    return mark_safe("".join(out))  # noqa: S308 (every other character was escaped above)


_MARK_TAG: Final = re.compile(r"(</?mark>)")


@dataclass(frozen=True)
class ShownHit:
    hit: SearchHit
    snippet: SafeString
    profile: str
    session_pk: int | None
    created_at: datetime | None


@dataclass(frozen=True)
class HitsPage:
    hits: list[ShownHit]
    number: int
    has_more: bool
    total: int = 0

    @property
    def first(self) -> int:
        return (self.number - 1) * SEARCH_HITS + 1

    @property
    def last(self) -> int:
        return self.first + len(self.hits) - 1


def archive_hits(query: str, session: AgentSession | None = None, page: int = 1) -> HitsPage:
    """A page of full-text hits across every profile's archives (or one session's), best match
    first, snippets made safe, with the total count. Three queries."""
    page = max(page, 1)
    counted = search_archives_counted(
        query, session=session, limit=SEARCH_HITS + 1, offset=(page - 1) * SEARCH_HITS
    )
    found = counted.hits
    hits = found[:SEARCH_HITS]
    owners = dict(
        Archive.objects.filter(pk__in={h.archive_id for h in hits}).values_list("pk", "session_id")
    )
    sessions = {
        s.pk: s
        for s in AgentSession.objects.filter(pk__in=set(owners.values())).select_related("profile")
    }
    shown = []
    for hit in hits:
        owner = sessions.get(owners.get(hit.archive_id, -1))
        shown.append(
            ShownHit(
                hit,
                safe_snippet(hit.snippet),
                owner.profile.name if owner else "",
                owner.pk if owner else None,
                _parsed_time(hit.created_at),
            )
        )
    return HitsPage(shown, page, len(found) > SEARCH_HITS, counted.total)


def _parsed_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def archives_page(number: str | None, session: AgentSession | None = None) -> Page[Archive]:
    """Every archive (or one session's), newest first. Two queries."""
    archives = Archive.objects.select_related("session__profile").order_by("-created_at", "-pk")
    if session is not None:
        archives = archives.filter(session=session)
    return Paginator(archives, ARCHIVES_PER_PAGE, allow_empty_first_page=True).get_page(number)


@dataclass(frozen=True)
class ShownArchive:
    archive: Archive
    document: dict[str, Any]
    log: list[ShownMessage]
    surface: list[ShownMessage]
    problem: str = ""


def _parse_archived(fmt: Format, document: dict[str, Any]) -> tuple[list[Message], list[Message]]:
    log = [
        parse_message(
            {k: v for k, v in entry.items() if k != "seq"},
            format=fmt,
            seq=int(entry.get("seq", index)),
            index=index,
        )
        for index, entry in enumerate(document["log"])
    ]
    surface_doc = document["surface"]
    if fmt == "anthropic":
        surface = parse_anthropic(surface_doc["messages"], system=surface_doc.get("system"))
    else:
        surface = parse_openai(surface_doc["messages"])
    return log, surface


def archive_view(archive: Archive, *, whole_seq: int | None = None) -> ShownArchive:
    """An archive for the transcript viewer: its log and the surface as it was. With
    `whole_seq`, only that log message, uncut (a block longer than SHOWN_BLOCK_CHARS is cut
    on the archive page and read whole here)."""
    document = archive_document(archive)
    try:
        log, surface = _parse_archived(format_of(archive.format), document)
    except (TranscriptError, KeyError, TypeError, ValueError) as exc:
        # an archive is shown even when it no longer parses: the downloads keep every byte
        return ShownArchive(archive, document, [], [], problem=str(exc))
    if whole_seq is not None:
        chosen = [m for m in log if m.seq == whole_seq]
        return ShownArchive(archive, document, shown_messages(chosen, limit=None), [])
    return ShownArchive(archive, document, shown_messages(log), shown_messages(surface))


# --- policy page -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileOverview:
    profile: AgentProfile
    policy: PolicyValues
    overridden: frozenset[str]
    tiers: TierComparison
    sessions: int


def profiles_overview(now: datetime | None = None) -> list[ProfileOverview]:
    """Every profile with its effective policy and the TTL counterfactual of its recent traffic.

    The counterfactual covers calls of the last `TRAFFIC_WINDOW` whose model has a price (an
    unpriced model cannot be costed). Four queries, whatever the traffic.
    """
    since = (now or timezone.now()) - TRAFFIC_WINDOW
    profiles = list(AgentProfile.objects.annotate(n_sessions=Count("sessions")).order_by("name"))
    policies = load_policies()
    catalogue = load_catalogue()
    prices: dict[str, ModelPrice | None] = {}
    per_profile: dict[int, dict[int, list[CachedCall]]] = defaultdict(lambda: defaultdict(list))
    calls = (
        LLMCall.objects.filter(at__gte=since)
        .order_by("session_id", "turn", "call")
        .values_list(
            "session__profile_id",
            "session_id",
            "at",
            "cache_read",
            "cache_write_5m",
            "cache_write_1h",
            "model",
        )
    )
    for profile_id, session_id, at, read, w5, w1, model in calls.iterator(chunk_size=5000):
        if model not in prices:
            prices[model] = find_price(model, catalogue)
        price = prices[model]
        if price is None:
            continue
        per_profile[profile_id][session_id].append(
            CachedCall(at=at, cached_prefix_tokens=read + w5 + w1, input_price=price.input)
        )
    return [
        ProfileOverview(
            profile=profile,
            policy=policies.of(profile.pk),
            overridden=policies.overridden.get(profile.pk, frozenset()),
            tiers=compare_ttl_tiers(per_profile[profile.pk].values()),
            sessions=profile.n_sessions,
        )
        for profile in profiles
    ]
