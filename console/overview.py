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

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from django.db import connection
from django.db.models import (
    Case,
    Count,
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
from django.db.models.functions import Coalesce, TruncDay, TruncHour
from django.utils import timezone

from compaction.models import CompactionRun
from console.selectors.policies import Policies, load_policies
from telemetry.band_sql import BAND_OF_RANK, BANDS, band_ranges
from telemetry.models import AgentProfile, AgentSession, ContextEvent, HourlyUsage
from telemetry.policy_rules import PolicyValues
from telemetry.pressure import PressureBand, hit_ratio
from telemetry.rollups import bucket_of
from telemetry.session_state import session_band
from telemetry.usage import BUCKETS

# range key → (length, bucket): an hour bucket up to a day, a day bucket beyond
RANGES: Final[dict[str, tuple[timedelta, str]]] = {
    "1h": (timedelta(hours=1), "hour"),
    "24h": (timedelta(hours=24), "hour"),
    "7d": (timedelta(days=7), "day"),
    "30d": (timedelta(days=30), "day"),
}
DEFAULT_RANGE: Final = "24h"
BUCKET_STEPS: Final[dict[str, timedelta]] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
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


def bucket_starts(since: datetime, now: datetime, bucket: str) -> list[datetime]:
    """Every bucket start from the one holding `since` to the one holding `now`, in order.

    Pure: the chart's axis, so an hour or day with no calls is drawn as zero, not skipped.
    """
    step = BUCKET_STEPS[bucket]
    first = bucket_of(since, step)
    starts = []
    at = first
    while at <= now:
        starts.append(at)
        at += step
    return starts


@dataclass
class Bucket:
    start: datetime
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


@dataclass
class Overview:
    range_key: str
    bucket: str
    since: datetime
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

    @property
    def cost(self) -> Decimal:
        return sum((sum(b.costs.values(), Decimal(0)) for b in self.buckets), Decimal(0))

    @property
    def saved(self) -> Decimal:
        return sum((b.saved for b in self.buckets), Decimal(0))

    @property
    def calls(self) -> int:
        return sum(b.calls for b in self.buckets)

    @property
    def unpriced(self) -> int:
        """Calls the spend leaves out: their model has no catalogue price."""
        return sum(b.unpriced for b in self.buckets)

    @property
    def hit(self) -> float | None:
        return hit_ratio(
            sum(b.read for b in self.buckets),
            sum(b.denominator for b in self.buckets),
            sum(b.reported for b in self.buckets),
        )


def _usage(since: datetime, profile: AgentProfile | None) -> QuerySet[HourlyUsage]:
    rows = HourlyUsage.objects.filter(hour__gte=since.replace(minute=0, second=0, microsecond=0))
    return rows if profile is None else rows.filter(profile=profile)


_TOTALS: Final[dict[str, Any]] = {
    "n": Sum("calls"),
    "read": Sum("cache_read_reported"),
    "denominator": Sum("cache_denominator"),
    "reported": Sum("cache_reported_calls"),
    "cost": Sum("cost_usd"),
    "no_cache": Sum("no_cache_cost_usd"),
    "unpriced": Sum("unpriced_calls"),
}
_SUMS: Final[dict[str, Any]] = {**_TOTALS, **{f"c_{key}": Sum(f"cost_{key}") for key in COST_KEYS}}


_TOP_FIELDS: Final = ("pk", "profile_id", "external_id", "pressure", "cost_usd", "last_seen_at")


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


def _profiles(policies: Policies, since: datetime) -> list[AgentProfile]:
    """Every profile by name, with its sessions active since `since` counted per pressure band
    now (`n_<band>`) and the keys of its own top such sessions by pressure (`top_0` …). One
    query.

    Each band is a range of pressure under the profile's thresholds (`band_ranges`), so each
    count is a range count on the `(profile, pressure)` index: the database reads index entries,
    not the sessions' rows, and evaluates no CASE per session. The top sessions are the first
    entries of the same index read backwards (`TOP_SESSIONS` probes of a few entries each).

    The statement depends on nothing but the thresholds and `since`, and building it through
    the ORM (ten subqueries) costs more CPU than running it, so it is compiled once per set of
    thresholds with a stand-in for `since`, which each call puts in its parameters.
    """
    thresholds = _thresholds(policies)
    compiled = _PROFILES_SQL.get(thresholds)
    if compiled is None:
        compiled = _profiles_query(policies, _SINCE_STANDIN).query.sql_with_params()
        _PROFILES_SQL.clear()  # one set of thresholds holds at a time
        _PROFILES_SQL[thresholds] = compiled
    sql, params = compiled
    # the parameters as the backend takes them (SQLite: text), the stand-in's among them
    standin = connection.ops.adapt_datetimefield_value(_SINCE_STANDIN)
    value = connection.ops.adapt_datetimefield_value(since)
    return list(AgentProfile.objects.raw(sql, tuple(value if p == standin else p for p in params)))


# a time no session is seen at, held in the compiled statement's parameters for `since`
_SINCE_STANDIN: Final = datetime(1, 1, 1, 0, 0, 0, 4242, tzinfo=UTC)


def _profiles_query(policies: Policies, since: datetime) -> QuerySet[AgentProfile]:
    ranges = band_ranges(OuterRef("prune_at"), OuterRef("summarize_at"))
    own = AgentSession.objects.filter(profile=OuterRef("pk"), last_seen_at__gte=since).order_by()
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
    )


_PROFILES_SQL: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}


def _thresholds(policies: Policies) -> tuple[Any, ...]:
    """Everything `_profiles`' statement depends on: the database and every profile's
    thresholds."""

    def pair(policy: PolicyValues) -> tuple[float, float]:
        return (policy.prune_threshold, policy.summarize_threshold)

    return (
        connection.vendor,
        connection.settings_dict["NAME"],
        pair(policies.global_policy),
        tuple(sorted((pk, pair(policy)) for pk, policy in policies.by_profile.items())),
    )


def _by_band_then_pressure(
    sessions: QuerySet[AgentSession], policies: Policies
) -> list[tuple[AgentSession, PressureBand]]:
    """`sessions` with their bands, the highest band first, then the highest pressure (then the
    newest): how the sessions list sorts by pressure (`console.selectors.policies.band_rank`)."""
    banded = [
        (s, session_band(s, policies.of(s.profile_id))) for s in sessions if s.pressure is not None
    ]
    rank = {band: n for n, band in BAND_OF_RANK.items()}
    banded.sort(key=lambda pair: (rank[pair[1]], pair[0].pressure, pair[0].pk), reverse=True)
    return banded


def load_overview(range_key: str, profile_name: str = "", now: datetime | None = None) -> Overview:
    """Everything the overview shows. Eight queries, whatever the number of calls, sessions or
    profiles."""
    now = now or timezone.now()
    if range_key not in RANGES:
        range_key = DEFAULT_RANGE
    length, bucket = RANGES[range_key]
    since = now - length
    policies = load_policies()
    profiles = _profiles(policies, since)
    chosen = next((p for p in profiles if p.name == profile_name), None)

    # spend and cache per bucket, from the rollups
    trunc = TruncHour("hour", tzinfo=UTC) if bucket == "hour" else TruncDay("hour", tzinfo=UTC)
    per_bucket = {start: Bucket(start) for start in bucket_starts(since, now, bucket)}
    rows = _usage(since, chosen).annotate(b=trunc).values("b").annotate(**_SUMS).order_by("b")
    for row in rows:
        start = row["b"]
        entry = per_bucket.get(start)
        if entry is None:
            continue
        entry.calls = row["n"] or 0
        entry.read = row["read"] or 0
        entry.denominator = row["denominator"] or 0
        entry.reported = row["reported"] or 0
        entry.unpriced = row["unpriced"] or 0
        entry.costs = {key: Decimal(row[f"c_{key}"] or 0) for key in COST_KEYS}
        entry.saved = Decimal(row["no_cache"] or 0) - Decimal(row["cost"] or 0)

    # per profile: spend over the range and sessions by band now
    spend = {
        row["profile_id"]: row
        for row in _usage(since, None).values("profile_id").annotate(**_TOTALS).order_by()
    }
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

    days, totals, freed, failures = _compactions(since, now, chosen)

    sessions = AgentSession.objects.only(*_TOP_FIELDS)
    if chosen is not None:
        sessions = sessions.filter(profile=chosen)
    top_cost = list(
        sessions.filter(last_seen_at__gte=since, cost_usd__isnull=False).order_by(
            F("cost_usd").desc(), "-pk"
        )[:TOP_SESSIONS]
    )
    # each profile's own top sessions by pressure hold the fleet's (module docstring)
    scope = profiles if chosen is None else [chosen]
    candidates = [getattr(p, f"top_{k}") for p in scope for k in range(TOP_SESSIONS)]
    top_pressure = _by_band_then_pressure(
        AgentSession.objects.only(*_TOP_FIELDS).filter(pk__in=candidates), policies
    )[:TOP_SESSIONS]
    by_pk = {p.pk: p for p in profiles}
    for s in top_cost:
        s.profile = by_pk.get(s.profile_id) or s.profile
    for s, _band in top_pressure:
        s.profile = by_pk.get(s.profile_id) or s.profile
    return Overview(
        range_key=range_key,
        bucket=bucket,
        since=since,
        profile=chosen.name if chosen else "",
        profiles=[p.name for p in profiles],
        buckets=list(per_bucket.values()),
        lines=lines,
        bands=bands,
        days=days,
        origin_totals=totals,
        freed=freed,
        archive_failures=failures,
        top_cost=top_cost,
        top_pressure=top_pressure,
    )


def _compactions(
    since: datetime, now: datetime, profile: AgentProfile | None
) -> tuple[list[OriginDay], dict[str, int], int, int]:
    """Compactions per day by origin, with the tokens they freed and the archive failures.

    Ours are the applied runs (manual / automatic / overflow); an automatic run that compacted
    without its archive counts as an archive failure. The agent's and the provider's are their
    recorded context events of kind compaction. Two queries.
    """
    day = TruncDay("finished_at", tzinfo=UTC)
    runs = CompactionRun.objects.filter(finished_at__gte=since)
    events = ContextEvent.objects.filter(at__gte=since, kind=ContextEvent.Kind.COMPACTION)
    if profile is not None:
        runs = runs.filter(session__profile=profile)
        events = events.filter(session__profile=profile)
    freed_expr = Coalesce(Sum(F("tokens_before") - F("tokens_after")), 0)
    run_rows = (
        runs.filter(status=CompactionRun.Status.APPLIED)
        .annotate(d=day)
        .values("d", "mode")
        .annotate(
            n=Count("id"),
            freed=freed_expr,
            failures=Count("id", filter=~Q(archive_error="")),
        )
        .order_by()
    )
    event_rows = (
        events.annotate(d=TruncDay("at", tzinfo=UTC))
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
        )
        .order_by()
    )
    per_day: dict[datetime, dict[str, Any]] = {
        start: {"counts": dict.fromkeys(k for k, _ in ORIGINS), "freed": 0, "failures": 0}
        for start in bucket_starts(since, now, "day")
    }
    for entry in per_day.values():
        entry["counts"] = dict.fromkeys((k for k, _ in ORIGINS), 0)

    def add(d: datetime, origin: str, n: int, freed: int, failures: int) -> None:
        entry = per_day.get(d)
        if entry is None or origin not in entry["counts"]:
            return
        entry["counts"][origin] += n
        entry["freed"] += max(int(freed or 0), 0)
        entry["failures"] += failures

    for row in run_rows:
        add(row["d"], row["mode"], row["n"], row["freed"], row["failures"])
    for row in event_rows:
        add(row["d"], row["origin"], row["n"], row["freed"], 0)
    days = [
        OriginDay(d, entry["counts"], entry["freed"], entry["failures"])
        for d, entry in per_day.items()
    ]
    totals = {key: sum(day.counts[key] for day in days) for key, _ in ORIGINS}
    return days, totals, sum(d.freed for d in days), sum(d.archive_failures for d in days)
