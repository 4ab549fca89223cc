"""The fleet overview's reads: spend, cache and compactions over a range, pressure now.

Spend and cache come from the hour rollups kept at ingest (`telemetry.rollups`), never from the
calls: the page costs the same number of queries at 10,000 and at 1,000,000 calls, and its work
grows with the hours in the range, not with the traffic. Compactions are read from their own
(small) tables; pressure from the sessions' stored figures.

Sessions by band and the top sessions by pressure count the sessions active in the range (last
seen within it, by the agent's clock like every call), read per profile from the index on
`(profile, pressure, id)` that carries `last_seen_at` (on PostgreSQL a covering column, so the
range test reads index entries, not rows), never by ranking every session: within one profile the band only rises
with the pressure (the profile's thresholds are fixed), so each band is a range of the index, and
a profile's first sessions by (band, pressure, newest) are simply its highest pressures. The
fleet's top five are among the profiles' own top fives (a session outranked by five others of
its profile is outranked by them in the fleet too), merged in Python. The top sessions by cost
walk the index on `(cost, id)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final
from zoneinfo import ZoneInfo

from django.db.models import (
    Case,
    Count,
    DecimalField,
    F,
    FloatField,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, TruncDay
from django.utils import timezone

from compaction.models import CompactionRun
from console.periods import (
    DEFAULT_PRESET,
    PRESETS,
    Period,
    bucket_for,
    local_midnight,
    preset_period,
)
from console.selectors.policies import Policies, load_policies
from console.selectors.session_list import active_between
from telemetry.band_sql import BAND_OF_RANK, BANDS, band_ranges
from telemetry.compiled import BucketNumber, CompiledRead, Read, Result, run_reads
from telemetry.models import AgentProfile, AgentSession, ContextEvent, HourlyUsage
from telemetry.policy_rules import PolicyValues
from telemetry.pressure import PressureBand, hit_ratio
from telemetry.session_state import session_band
from telemetry.usage import BUCKETS

# preset key → (length, bucket), from the one period model (`console.periods`)
RANGES: Final[dict[str, tuple[timedelta, str]]] = {
    key: (length, bucket_for(length)) for key, length in PRESETS.items()
}
DEFAULT_RANGE: Final = DEFAULT_PRESET
TOP_SESSIONS: Final = 5
COST_KEYS: Final = BUCKETS
# compactions by origin: ours (CompactionRun modes) and the agent's and provider's (ContextEvent)
ORIGINS: Final = (
    ("manual", "manual"),
    ("auto", "automatic"),
    ("overflow", "overflow"),
    ("agent", "agent"),
    ("provider", "provider"),
)
_ORIGIN_KEYS: Final = tuple(key for key, _ in ORIGINS)


@dataclass
class Bucket:
    start: datetime
    end: datetime
    # exact, as the rollups store them (the API writes them digit for digit; charts take floats)
    costs: dict[str, Decimal] = field(default_factory=lambda: dict.fromkeys(COST_KEYS, Decimal(0)))
    saved: Decimal = Decimal(0)
    calls: int = 0
    read: int = 0
    denominator: int = 0
    reported: int = 0  # calls that reported cache fields
    unpriced: int = 0  # calls left out of `costs`: no catalogue price for their model

    @property
    def hit(self) -> float | None:
        return hit_ratio(self.read, self.denominator, self.reported)

    @property
    def cost(self) -> Decimal:
        return sum(self.costs.values(), Decimal(0))


@dataclass(frozen=True)
class ProfileLine:
    name: str
    calls: int
    cost: Decimal
    saved: Decimal
    hit: float | None
    bands: dict[str, int]
    unpriced: int = 0  # calls left out of `cost`


@dataclass(frozen=True)
class OriginDay:
    day: datetime
    counts: dict[str, int]
    freed: int
    archive_failures: int


@dataclass(frozen=True)
class Totals:
    """The headline figures of a period (the previous period's, beside the current ones)."""

    calls: int
    cost: Decimal
    saved: Decimal
    hit: float | None
    unpriced: int
    sessions: int


@dataclass
class Overview:
    period: Period
    profile: str
    profiles: list[str]
    buckets: list[Bucket]
    lines: list[ProfileLine]
    bands: dict[str, int]
    days: list[OriginDay]
    origin_totals: dict[str, int]
    freed: int
    archive_failures: int
    top_cost: list[AgentSession]
    top_pressure: list[tuple[AgentSession, PressureBand]]
    # the previous period's buckets and active sessions, when the period asks for the
    # comparison (its n-th bucket beside this period's n-th)
    previous_buckets: list[Bucket] | None = None
    previous_sessions: int = 0
    # every profile's effective policy, as read for the bands (for the relief panel, which
    # would otherwise read them again: `compaction.relief_state.profile_policies`)
    policies: dict[int, PolicyValues] = field(default_factory=dict)
    # what the caller's `beside` asked for, read in the same round trip as the profiles
    beside: list[Result] = field(default_factory=list)

    @property
    def previous(self) -> Totals | None:
        """The previous period's headline figures, None without the comparison."""
        if self.previous_buckets is None:
            return None
        return totals(self.previous_buckets, self.previous_sessions)

    @property
    def range_key(self) -> str:
        return self.period.key

    @property
    def bucket(self) -> str:
        return self.period.bucket

    @property
    def since(self) -> datetime:
        return self.period.start

    @property
    def sessions(self) -> int:
        """The sessions active in the period (the bands' counts)."""
        return sum(self.bands.values())

    @property
    def totals(self) -> Totals:
        return totals(self.buckets, self.sessions)

    @property
    def cost(self) -> Decimal:
        return self.totals.cost

    @property
    def saved(self) -> Decimal:
        return self.totals.saved

    @property
    def calls(self) -> int:
        return self.totals.calls

    @property
    def unpriced(self) -> int:
        """Calls the spend leaves out: their model has no catalogue price."""
        return self.totals.unpriced

    @property
    def hit(self) -> float | None:
        return self.totals.hit


def totals(buckets: list[Bucket], sessions: int) -> Totals:
    """The headline figures of a period's buckets (one definition for a period and the one
    before it)."""
    return Totals(
        calls=sum(b.calls for b in buckets),
        cost=sum((b.cost for b in buckets), Decimal(0)),
        saved=sum((b.saved for b in buckets), Decimal(0)),
        hit=hit_ratio(
            sum(b.read for b in buckets),
            sum(b.denominator for b in buckets),
            sum(b.reported for b in buckets),
        ),
        unpriced=sum(b.unpriced for b in buckets),
        sessions=sessions,
    )


def _open_ended(period: Period, now: datetime) -> bool:
    """A period that runs up to now (a preset, or a range ending later): its active sessions
    are those seen since its start."""
    return bool(period.preset) or period.end >= now


_TOTALS: Final[dict[str, Any]] = {
    "n": Sum("calls"),
    "read": Sum("cache_read_reported"),
    "denominator": Sum("cache_denominator"),
    "reported": Sum("cache_reported_calls"),
    "cost": Sum("cost_usd"),
    "no_cache": Sum("no_cache_cost_usd"),
    "unpriced": Sum("unpriced_calls"),
}
# each cost bucket and its column in the spend statement's rows
_COST_COLUMNS: Final = tuple((key, f"c_{key}") for key in COST_KEYS)
_SUMS: Final[dict[str, Any]] = {
    **_TOTALS,
    **{column: Sum(f"cost_{key}") for key, column in _COST_COLUMNS},
}


def _per_profile(policies: Policies, name: str) -> Any:
    """A threshold of each profile's effective policy, as an expression on the profile's row."""
    default = getattr(policies.global_policy, name)
    whens = [
        When(pk=pk, then=Value(getattr(policy, name)))
        for pk, policy in policies.by_profile.items()
        if getattr(policy, name) != default
    ]
    if not whens:
        return Value(default, output_field=FloatField())
    return Case(*whens, default=Value(default), output_field=FloatField())


def _profiles(
    policies: Policies, since: datetime, until: datetime | None = None
) -> list[AgentProfile]:
    """Every profile by name, with its sessions active since `since` (and, given `until`, with a
    call before it: `active_between`) counted per pressure band
    now (`n_<band>`) and the keys of its own top such sessions by pressure (`top_0` …). One
    query.

    Each band is a range of pressure under the profile's thresholds (`band_ranges`), so each
    count is a range count on the `(profile, pressure)` index: the database reads index entries,
    not the sessions' rows, and evaluates no CASE per session. The top sessions are the first
    entries of the same index read backwards (`TOP_SESSIONS` probes of a few entries each).

    The statement depends on nothing but the thresholds and the times, and building it through
    the ORM (ten subqueries) costs more CPU than running it, so it is compiled once per set of
    thresholds (`CompiledRead`).
    """
    (result,) = run_reads([_profiles_read(policies, since, until)])
    return _profiles_from(result)


def _profiles_read(policies: Policies, since: datetime, until: datetime | None) -> Read:
    times: tuple[datetime, ...] = (since,) if until is None else (since, until)
    return _PROFILES.read(
        (_thresholds(policies), len(times)),
        times,
        lambda *values: _profiles_query(policies, *values),
    )


def _profiles_from(result: Result) -> list[AgentProfile]:
    alias = result.read.alias
    profiles = []
    for row in result.tuples():
        profile = AgentProfile.from_db(alias, _PROFILE_COLUMNS, row[: len(_PROFILE_COLUMNS)])
        for name, value in zip(_PROFILE_ANNOTATIONS, row[len(_PROFILE_COLUMNS) :], strict=True):
            setattr(profile, name, value)
        profiles.append(profile)
    return profiles


def _profiles_query(
    policies: Policies, since: datetime, until: datetime | None = None
) -> QuerySet[AgentProfile, tuple[Any, ...]]:
    ranges = band_ranges(OuterRef("prune_at"), OuterRef("summarize_at"))
    own = AgentSession.objects.filter(active_between(since, until), profile=OuterRef("pk"))
    own = own.order_by()
    counts = {
        f"n_{band}": Coalesce(
            Subquery(
                own.filter(ranges[band]).values("profile").annotate(n=Count("*")).values("n"),
                output_field=IntegerField(),
            ),
            0,
        )
        for band in BANDS
    }
    ranked = own.filter(pressure__isnull=False).order_by(F("pressure").desc(), "-pk")
    tops = {f"top_{k}": Subquery(ranked.values("pk")[k : k + 1]) for k in range(TOP_SESSIONS)}
    return (
        AgentProfile.objects.annotate(
            prune_at=_per_profile(policies, "prune_threshold"),
            summarize_at=_per_profile(policies, "summarize_threshold"),
        )
        .annotate(**counts, **tops)
        .order_by("name")
        .values_list(*_PROFILE_COLUMNS, *_PROFILE_ANNOTATIONS)
    )


# every field of a profile, in the model's order (`Model.from_db`), then what `_profiles` counts
_PROFILE_COLUMNS: Final = tuple(f.attname for f in AgentProfile._meta.concrete_fields)
_PROFILE_ANNOTATIONS: Final = (
    *(f"n_{band}" for band in BANDS),
    *(f"top_{k}" for k in range(TOP_SESSIONS)),
)
_PROFILES: Final = CompiledRead(AgentProfile)


def _thresholds(policies: Policies) -> tuple[Any, ...]:
    """Everything `_profiles`' statement depends on but the times: every profile's
    thresholds."""

    def pair(policy: PolicyValues) -> tuple[float, float]:
        return (policy.prune_threshold, policy.summarize_threshold)

    return (
        pair(policies.global_policy),
        tuple(sorted((pk, pair(policy)) for pk, policy in policies.by_profile.items())),
    )


def _by_band_then_pressure(
    sessions: Iterable[AgentSession], policies: Policies
) -> list[tuple[AgentSession, PressureBand]]:
    """`sessions` with their bands, the highest band first, then the highest pressure (then the
    newest): how the sessions list sorts by pressure (`console.selectors.policies.band_rank`)."""
    banded = [
        (s, session_band(s, policies.of(s.profile_id))) for s in sessions if s.pressure is not None
    ]
    rank = {band: n for n, band in BAND_OF_RANK.items()}
    banded.sort(key=lambda pair: (rank[pair[1]], pair[0].pressure, pair[0].pk), reverse=True)
    return banded


def _top_sessions(
    since: datetime, until: datetime | None, profile: AgentProfile | None, candidates: list[int]
) -> list[AgentSession]:
    """The sessions `candidates` (by pk) and the top sessions by cost active in the period (of
    `profile`, or all), with `_TOP_COLUMNS` only. One query, compiled once per shape (the number
    of candidates, the profile, an open end or not: `CompiledRead`).

    Given as candidates each profile's top sessions by pressure (`_profiles`), the result holds
    the top `TOP_SESSIONS` by pressure and by cost alike: every row is a session active in the
    period, among them the first by each order, so the first by each order of the rows are
    they (the `(cost, id)` order as the database sorts it, NULL costs left out)."""
    (result,) = run_reads([_top_sessions_read(since, until, profile, candidates)])
    return _top_sessions_from(result)


def _top_sessions_read(
    since: datetime, until: datetime | None, profile: AgentProfile | None, candidates: list[int]
) -> Read:
    pk = None if profile is None else profile.pk
    times: tuple[datetime, ...] = (since,) if until is None else (since, until)
    return _TOPS.read(
        (pk, len(times), len(candidates)),
        (*times, *candidates),
        lambda *values: _top_sessions_query(pk, *values[: len(times)], ids=values[len(times) :]),
    )


def _top_sessions_from(result: Result) -> list[AgentSession]:
    alias = result.read.alias
    sessions = (AgentSession.from_db(alias, _TOP_COLUMNS, row) for row in result.tuples())
    by_pk = {s.pk: s for s in sessions}
    return list(by_pk.values())


def _top_sessions_query(
    profile_pk: int | None, since: datetime, until: datetime | None = None, *, ids: Any
) -> QuerySet[AgentSession, dict[str, Any]]:
    active = AgentSession.objects.filter(active_between(since, until))
    if profile_pk is not None:
        active = active.filter(profile_id=profile_pk)
    by_cost = active.filter(cost_usd__isnull=False).order_by(F("cost_usd").desc(), "-pk")
    top_cost = AgentSession.objects.filter(pk__in=by_cost.values("pk")[:TOP_SESSIONS])
    rows: QuerySet[AgentSession, dict[str, Any]] = top_cost.values(*_TOP_COLUMNS)
    if ids:
        chosen = AgentSession.objects.filter(pk__in=list(ids)).values(*_TOP_COLUMNS)
        rows = chosen.union(rows, all=True)
    return rows


# what the top sessions show and rank by, in the model's field order (`Model.from_db` takes
# the values of the fields it is given in that order)
_TOP_COLUMNS: Final = tuple(
    f.attname
    for f in AgentSession._meta.concrete_fields
    if f.attname in {"id", "profile_id", "external_id", "pressure", "cost_usd", "last_seen_at"}
)
_TOPS: Final = CompiledRead(AgentSession)


def load_overview(
    period: Period | str = DEFAULT_PRESET,
    profile_name: str = "",
    now: datetime | None = None,
    *,
    beside: Callable[[dict[int, PolicyValues]], Sequence[Read]] | None = None,
) -> Overview:
    """Everything the overview shows over `period` (a `Period`, or a preset key: an unknown one
    is the default). Five statements (the policies, the profiles, the spend, the compactions,
    the top sessions), whatever the number of calls, sessions or profiles, in three round trips
    (`run_reads`): the policies; then the profiles with the spend and the compactions of the
    fleet; then the top sessions (with a profile chosen: the profiles, then the rest, which
    read its key). Two more for the previous period when the period asks for the comparison.
    `beside`: reads of the caller's, given every profile's effective policy, sent with the top
    sessions (their results in `Overview.beside`)."""
    now = now or timezone.now()
    if isinstance(period, str):
        period = preset_period(period if period in PRESETS else DEFAULT_PRESET, now=now)
    until = None if _open_ended(period, now) else period.end
    since = period.start
    policies = load_policies()
    starts = tuple(period.bucket_starts())
    first = [_profiles_read(policies, since, until)]
    if not profile_name:  # the fleet's spend and compactions need no profile's key
        first += [_spend_read(period, starts, None), _compactions_read(period, None)]
    results = run_reads(first)
    profiles = _profiles_from(results[0])
    effective = {p.pk: policies.of(p.pk) for p in profiles}
    chosen = next((p for p in profiles if p.name == profile_name), None)
    # each profile's own top sessions by pressure hold the fleet's (module docstring)
    scope = profiles if chosen is None else [chosen]
    candidates = {getattr(p, f"top_{k}") for p in scope for k in range(TOP_SESSIONS)}
    last = [_top_sessions_read(since, until, chosen, sorted(candidates - {None}))]
    if profile_name:
        last += [_spend_read(period, starts, chosen), _compactions_read(period, chosen)]
    last += beside(effective) if beside is not None else []
    topped, *rest = run_reads(last)
    if profile_name:
        spent, compacted, *found_beside = rest
    else:
        spent, compacted = results[1:]
        found_beside = rest

    buckets, spend = _spend_from(period, starts, spent)

    lines = []
    bands: dict[str, int] = dict.fromkeys(BANDS, 0)
    for profile in profiles:
        figures = spend.get(profile.pk, {})
        cost = Decimal(figures.get("cost") or 0)
        counts: dict[str, int] = {band: getattr(profile, f"n_{band}") for band in BANDS}
        lines.append(
            ProfileLine(
                name=profile.name,
                calls=figures.get("n") or 0,
                cost=cost,
                saved=Decimal(figures.get("no_cache") or 0) - cost,
                hit=hit_ratio(
                    figures.get("read") or 0,
                    figures.get("denominator") or 0,
                    figures.get("reported") or 0,
                ),
                bands=counts,
                unpriced=figures.get("unpriced") or 0,
            )
        )
        if chosen is None or profile == chosen:
            for band, n in counts.items():
                bands[band] += n

    days, totals, freed, failures = _compactions_from(period, compacted)
    sessions = _top_sessions_from(topped)
    top_cost = sorted(
        (s for s in sessions if s.cost_usd is not None),
        key=lambda s: (s.cost_usd, s.pk),
        reverse=True,
    )[:TOP_SESSIONS]
    top_pressure = _by_band_then_pressure(sessions, policies)[:TOP_SESSIONS]
    by_pk = {p.pk: p for p in profiles}
    for s in top_cost:
        s.profile = by_pk.get(s.profile_id) or s.profile
    for s, _band in top_pressure:
        s.profile = by_pk.get(s.profile_id) or s.profile
    return Overview(
        period=period,
        profile=chosen.name if chosen else "",
        profiles=[p.name for p in profiles],
        buckets=buckets,
        lines=lines,
        bands=bands,
        days=days,
        origin_totals=totals,
        freed=freed,
        archive_failures=failures,
        top_cost=top_cost,
        top_pressure=top_pressure,
        previous_buckets=_buckets(period.previous(), chosen) if period.compare else None,
        previous_sessions=_sessions_in(period.previous(), chosen) if period.compare else 0,
        policies=effective,
        beside=found_beside,
    )


def _buckets(period: Period, profile: AgentProfile | None) -> list[Bucket]:
    """Spend and cache per bucket of `period` (of `profile`'s calls, or all), from the rollups.
    One query."""
    return _spend(period, profile)[0]


def _spend(
    period: Period, profile: AgentProfile | None
) -> tuple[list[Bucket], dict[int, dict[str, Any]]]:
    """Spend and cache per bucket of `period` (of `profile`'s calls, or all), and each
    profile's sums over the period, from the rollups. One query.

    Each rollup hour counts in the bucket holding its start (`console.periods`): the buckets
    are drawn in Python (`Period.bucket_starts`) and the database sums each bucket's hours
    (`BucketNumber`: how many bucket starts are at or before the hour), so the page fetches a
    row a bucket and a row a profile, not a row an hour. An hour before the first bucket (the
    hour holding the period's start, in a zone whose offset is not whole hours) counts in its
    profile's sums but in no bucket. The statement is compiled once (`CompiledRead`).
    """
    starts = tuple(period.bucket_starts())
    (result,) = run_reads([_spend_read(period, starts, profile)])
    return _spend_from(period, starts, result)


def _spend_read(period: Period, starts: tuple[datetime, ...], profile: AgentProfile | None) -> Read:
    first_hour = period.start.replace(minute=0, second=0, microsecond=0)
    pk = None if profile is None else profile.pk
    return _SPEND.read(
        pk, (first_hour, period.end, starts), lambda *values: _spend_query(pk, *values)
    )


def _spend_from(
    period: Period, starts: tuple[datetime, ...], result: Result
) -> tuple[list[Bucket], dict[int, dict[str, Any]]]:
    ends = (*starts[1:], period.next_start(starts[-1])) if starts else ()
    per_bucket = [Bucket(start, end) for start, end in zip(starts, ends, strict=True)]
    spend: dict[int, dict[str, Any]] = {}
    for row in result.dicts():
        if row["b"] is None:
            spend[row["p"]] = row
            continue
        if not 0 < row["b"] <= len(per_bucket):
            continue
        entry = per_bucket[row["b"] - 1]
        entry.calls += row["n"] or 0
        entry.read += row["read"] or 0
        entry.denominator += row["denominator"] or 0
        entry.reported += row["reported"] or 0
        entry.unpriced += row["unpriced"] or 0
        for key, column in _COST_COLUMNS:
            entry.costs[key] += row[column] or 0
        entry.saved += (row["no_cache"] or 0) - (row["cost"] or 0)
    return per_bucket, spend


def _spend_query(
    profile_pk: int | None, first_hour: datetime, end: Any, starts: Any
) -> QuerySet[HourlyUsage, dict[str, Any]]:
    """The rollup hours from `first_hour` before `end`: summed per bucket of `starts` (of the
    profile `profile_pk`, or all) with `p` null, and per profile with `b` null."""
    rows = HourlyUsage.objects.filter(hour__gte=first_hour, hour__lt=end)
    by_bucket = rows if profile_pk is None else rows.filter(profile_id=profile_pk)
    none = Value(None, output_field=IntegerField())
    per_bucket = (
        by_bucket.annotate(p=none, b=BucketNumber("hour", starts))
        .values("p", "b")
        .annotate(**_SUMS)
        .order_by()
    )
    # a profile's line has no cost by bucket: those columns are null, not summed
    no_costs = {column: Value(None, output_field=DecimalField()) for _, column in _COST_COLUMNS}
    per_profile = (
        rows.annotate(p=F("profile_id"), b=none)
        .values("p", "b")
        .annotate(**_TOTALS)
        .annotate(**no_costs)
        .order_by()
    )
    return per_bucket.union(per_profile, all=True)


_SPEND: Final = CompiledRead(HourlyUsage)


def _sessions_in(period: Period, profile: AgentProfile | None) -> int:
    """How many sessions were active in `period` (`active_between`). One query."""
    sessions = AgentSession.objects.filter(active_between(period.start, period.end))
    if profile is not None:
        sessions = sessions.filter(profile=profile)
    return sessions.count()


def _compactions(
    period: Period, profile: AgentProfile | None
) -> tuple[list[OriginDay], dict[str, int], int, int]:
    """Compactions per local day of the period's zone by origin, with the tokens they freed and
    the archive failures.

    Ours are the applied runs (manual / automatic / overflow); an automatic run that compacted
    without its archive counts as an archive failure. The agent's and the provider's are their
    recorded context events of kind compaction. One query (compiled once a zone: `CompiledRead`).
    """
    (result,) = run_reads([_compactions_read(period, profile)])
    return _compactions_from(period, result)


def _compactions_read(period: Period, profile: AgentProfile | None) -> Read:
    pk = None if profile is None else profile.pk
    return _COMPACTIONS.read(
        (period.zone, pk),
        (period.start, period.end),
        lambda start, end: _compactions_query(period.zone, pk, start, end),
    )


def _compactions_from(
    period: Period, result: Result
) -> tuple[list[OriginDay], dict[str, int], int, int]:
    tz = period.tz
    rows = result.dicts()
    days_of = Period(period.start, period.end, period.zone, compare=False)
    per_day: dict[datetime, dict[str, Any]] = {
        start: {"counts": dict.fromkeys(_ORIGIN_KEYS, 0), "freed": 0, "failures": 0}
        for start in _local_days(days_of)
    }

    def add(d: datetime, origin: str, n: int, freed: int, failures: int) -> None:
        # the database's local midnight, as the UTC instant the axis holds
        entry = per_day.get(local_midnight(d.astimezone(tz).date(), tz))
        if entry is None or origin not in entry["counts"]:
            return
        entry["counts"][origin] += n
        entry["freed"] += max(int(freed or 0), 0)
        entry["failures"] += failures

    for row in rows:
        add(row["d"], row["mode"], row["n"], row["freed"], row["failures"])
    days = [
        OriginDay(d, entry["counts"], entry["freed"], entry["failures"])
        for d, entry in per_day.items()
    ]
    totals = {key: sum(day.counts[key] for day in days) for key, _ in ORIGINS}
    return days, totals, sum(d.freed for d in days), sum(d.archive_failures for d in days)


def _compactions_query(
    zone: str, profile_pk: int | None, start: datetime, end: datetime
) -> QuerySet[CompactionRun, dict[str, Any]]:
    """Per local day of `zone` and origin, in [start, end): our applied runs (by mode) and the
    recorded compaction events (by origin), with their counts, the tokens they freed and (runs
    only) the archive failures."""
    tz = ZoneInfo(zone)
    runs = CompactionRun.objects.filter(
        finished_at__gte=start, finished_at__lt=end, status=CompactionRun.Status.APPLIED
    )
    events = ContextEvent.objects.filter(
        at__gte=start, at__lt=end, kind=ContextEvent.Kind.COMPACTION
    )
    if profile_pk is not None:
        runs = runs.filter(session__profile_id=profile_pk)
        events = events.filter(session__profile_id=profile_pk)
    run_rows = (
        runs.annotate(d=TruncDay("finished_at", tzinfo=tz))
        .values("d", "mode")
        .annotate(
            n=Count("id"),
            freed=Coalesce(Sum(F("tokens_before") - F("tokens_after")), 0),
            failures=Count("id", filter=~Q(archive_error="")),
        )
        .order_by()
    )
    event_rows = (
        events.annotate(d=TruncDay("at", tzinfo=tz))
        .values("d", "origin")
        .annotate(
            n=Count("id"),
            freed=Coalesce(
                Sum(
                    F("tokens_before") - F("tokens_after"),
                    filter=Q(tokens_before__isnull=False, tokens_after__isnull=False),
                ),
                0,
            ),
            failures=Value(0),
        )
        .order_by()
    )
    # by position: (d, mode, n, freed, failures) and (d, origin, …), named after the first
    return run_rows.union(event_rows, all=True)


_COMPACTIONS: Final = CompiledRead(CompactionRun)


def _local_days(period: Period) -> list[datetime]:
    """The UTC instants of the local midnights starting each day of `period` (the compactions
    chart is per day whatever the period's bucket)."""
    first = period.start.astimezone(period.tz).date()
    last = (period.end - timedelta(microseconds=1)).astimezone(period.tz).date()
    return [
        local_midnight(first + timedelta(days=n), period.tz) for n in range((last - first).days + 1)
    ]
