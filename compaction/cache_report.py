"""Cache economics of sessions, read from the database (D1, D2): misses with causes, the pricing a
compaction is judged with, and its measured outcome after (its plan: `compaction.plans`).

Reads only (the one write is `compaction.services` storing a run's planned figures). The logic
is pure (`telemetry.cache_misses`, `context_core.economics`); this module gathers its inputs:
calls, our applied runs, the agent's and provider's context events, and prefix fingerprints of
the surface versions calls used (an agent that reports `surface_version` needs to send nothing).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any, Literal

from django.db.models import FilteredRelation, Q
from django.utils import timezone

from compaction.models import CompactionRun, Surface
from compaction.transcripts import format_of, surface_at
from context_core import (
    CachePricing,
    CacheRates,
    net_saving,
    surface_fingerprints,
)
from telemetry.cache_diagnostics import Agreement, from_stored
from telemetry.cache_misses import (
    CAUSES,
    CallObs,
    Cause,
    ContextChange,
    Miss,
    Segment,
    SurfaceChange,
    SystemChurn,
    classify,
    is_miss,
    premiums_by_cause,
    system_churn,
)
from telemetry.catalogue import load_catalogue
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall
from telemetry.policy_rules import PolicyValues
from telemetry.pricing import ModelPrice, find_price
from telemetry.rollups import bucket_of

# Surface versions whose fingerprints one report derives at most (each is a log derivation).
MAX_DERIVED_VERSIONS = 40
# Calls one fleet report reads at most (the most recent sessions first).
MAX_FLEET_CALLS = 200_000
# Sessions of a profile the remaining-calls estimate looks at (the most recent ones).
REMAINING_SAMPLE = 1_000
# Remaining calls assumed for a session that has reported no call yet (CachePricing's default).
DEFAULT_HORIZON = CachePricing().horizon_calls

_CALL_FIELDS = (
    "id",
    "turn",
    "call",
    "at",
    "model",
    "provider",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "reported_cache",
    "surface_version",
    "prefix",
    "context_tokens",
    "provider_miss_type",
    "provider_missed_tokens",
    "provider_diagnostics",
)


class _Prices:
    """Catalogue rows by model id, the catalogue read once."""

    def __init__(self) -> None:
        self._rows: list[ModelPrice] | None = None
        self._found: dict[str, ModelPrice | None] = {}

    def __call__(self, model: str) -> ModelPrice | None:
        if model not in self._found:
            if self._rows is None:
                self._rows = load_catalogue()
            self._found[model] = find_price(model, self._rows)
        return self._found[model]

    def table(self, models: Iterable[str]) -> dict[str, ModelPrice | None]:
        return {model: self(model) for model in set(models)}


def _segments(value: Any) -> tuple[Segment, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(
        Segment(str(s["name"]), str(s["hash"]), int(s["tokens"]), s.get("text")) for s in value
    )


def _observation(row: Mapping[str, Any], price: ModelPrice | None) -> CallObs:
    w5, w1 = row["cache_write_5m"], row["cache_write_1h"]
    automatic = (
        (price.provider == "openai" if price is not None else row["provider"].startswith("openai"))
        and w5 == 0
        and w1 == 0
    )
    prefix = row["prefix"]
    # positional, in field order: a report builds one per call (100,000 in make bench's P12)
    return CallObs(
        row["turn"],
        row["call"],
        row["at"],
        row["model"],
        row["uncached_input"],
        row["cache_read"],
        w5,
        w1,
        row["reported_cache"],
        automatic,
        row["surface_version"],
        _segments(prefix) if prefix is not None else None,
        row["context_tokens"],
        from_stored(
            row["provider_miss_type"], row["provider_missed_tokens"], row["provider_diagnostics"]
        ),
    )


def surface_changes(session_ids: Sequence[int]) -> dict[int, list[SurfaceChange]]:
    """Our applied runs per session, as the classifier sees them."""
    found: dict[int, list[SurfaceChange]] = defaultdict(list)
    rows = CompactionRun.objects.filter(
        session_id__in=session_ids, status=CompactionRun.Status.APPLIED
    ).values_list(
        "session_id",
        "pk",
        "finished_at",
        "started_at",
        "mode",
        "action",
        "surface_version_before",
        "surface_version_after",
    )
    for sid, pk, finished, started, mode, action, before, after in rows:
        found[sid].append(SurfaceChange(pk, finished or started, mode, action, before, after))
    return found


def context_changes(session_ids: Sequence[int]) -> dict[int, list[ContextChange]]:
    """The agents' and providers' compactions and context edits per session."""
    found: dict[int, list[ContextChange]] = defaultdict(list)
    rows = (
        ContextEvent.objects.filter(session_id__in=session_ids)
        .exclude(kind=ContextEvent.Kind.OVERFLOW)
        # an event's call is of its session: the join names the sessions, not a call id alone
        .annotate(own_call=FilteredRelation("call", condition=Q(call__session_id__in=session_ids)))
        .values(
            "session_id",
            "pk",
            "at",
            "origin",
            "kind",
            "source",
            "trigger",
            "own_call__turn",
            "own_call__call",
            "tokens_before",
            "tokens_after",
        )
    )
    for row in rows:
        turn = row["own_call__turn"]
        call = None if turn is None else (turn, row["own_call__call"])
        found[row["session_id"]].append(
            ContextChange(
                event_id=row["pk"],
                at=row["at"],
                origin=row["origin"],
                kind=row["kind"],
                source=row["source"],
                trigger=row["trigger"],
                call=call,
                tokens_before=row["tokens_before"],
                tokens_after=row["tokens_after"],
            )
        )
    return found


@dataclass(frozen=True)
class MissReport:
    """One session's misses, premiums by cause and system-segment churn (D2)."""

    misses: list[Miss]
    by_cause: dict[Cause, Decimal]
    churn: SystemChurn
    calls: int

    @property
    def premium_usd(self) -> Decimal:
        return sum(self.by_cause.values(), Decimal(0))

    @property
    def agreement(self) -> Agreement:
        return agreement(self.misses)


def agreement(misses: Iterable[Miss]) -> Agreement:
    """How often our inferred cause agreed with the provider's, over the misses the provider
    gave a verdict on (`telemetry.cache_diagnostics.agrees`)."""
    compared = agreed = 0
    for miss in misses:
        verdict = miss.agrees
        if verdict is not None:
            compared += 1
            agreed += verdict
    return Agreement(compared, agreed)


def _with_surface_prefixes(session: AgentSession, calls: list[CallObs]) -> list[CallObs]:
    """Give the calls around each candidate miss the fingerprints of the surface they used,
    where the agent reported a `surface_version` but no prefix of its own."""
    ordered = sorted(calls, key=lambda c: (c.turn, c.call))
    wanted: list[int] = []
    for previous, current in zip(ordered, ordered[1:], strict=False):
        if not (previous.reported_cache and current.reported_cache):
            continue
        expected = min(previous.cacheable, current.context_tokens)
        if not is_miss(expected, current.cache_read):
            continue
        for call in (previous, current):
            if call.prefix is None and call.surface_version is not None:
                wanted.append(call.surface_version)
    versions = list(dict.fromkeys(wanted))[:MAX_DERIVED_VERSIONS]
    if not versions:
        return calls
    state = Surface.objects.filter(session=session).first()
    fmt = format_of(state.format) if state is not None else "anthropic"
    prints: dict[int, tuple[Segment, ...]] = {}
    for version in versions:
        surface = surface_at(session, version)
        if surface is None:
            continue
        prints[version] = tuple(
            Segment(p.name, p.hash, p.tokens, p.text)
            for p in surface_fingerprints(surface, format=fmt, with_text=True)
        )
    return [
        replace(c, prefix=prints[c.surface_version])
        if c.prefix is None and c.surface_version in prints
        else c
        for c in calls
    ]


def session_misses(session: AgentSession, *, prices: _Prices | None = None) -> MissReport:
    """Every miss of the session with cause, evidence and premium (position order)."""
    prices = prices or _Prices()
    rows = list(LLMCall.objects.filter(session=session).values(*_CALL_FIELDS))
    calls = [_observation(row, prices(row["model"])) for row in rows]
    calls = _with_surface_prefixes(session, calls)
    misses = classify(
        calls,
        prices=prices.table(c.model for c in calls),
        surface_changes=surface_changes([session.pk]).get(session.pk, ()),
        context_changes=context_changes([session.pk]).get(session.pk, ()),
    )
    return MissReport(misses, premiums_by_cause(misses), system_churn(calls), len(calls))


# --- fleet and profiles -----------------------------------------------------------------------


@dataclass
class FleetCache:
    """Premiums by cause (total and per day), top offending sessions and D2 flags, per profile
    and for the fleet, over the sessions seen since `since`."""

    since: datetime
    sessions: int
    by_cause: dict[Cause, Decimal] = field(
        default_factory=lambda: dict.fromkeys(CAUSES, Decimal(0))
    )
    by_day: dict[str, dict[Cause, Decimal]] = field(default_factory=dict)
    # premiums per bucket start (UTC), when `fleet_cache` was given a bucket
    by_bucket: dict[datetime, dict[Cause, Decimal]] = field(default_factory=dict)
    misses_by_cause: dict[Cause, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    top_sessions: list[tuple[AgentSession, Decimal, Cause | None]] = field(default_factory=list)
    profiles: dict[str, ProfileCache] = field(default_factory=dict)
    truncated: bool = False

    @property
    def premium_usd(self) -> Decimal:
        return sum(self.by_cause.values(), Decimal(0))


@dataclass
class ProfileCache:
    name: str
    by_cause: dict[Cause, Decimal] = field(
        default_factory=lambda: dict.fromkeys(CAUSES, Decimal(0))
    )
    churn: SystemChurn = field(default_factory=lambda: SystemChurn(0, 0))
    # (gap seconds, premium) of each expiry miss: what the TTL advisor reads
    expiry: list[tuple[int, Decimal | None]] = field(default_factory=list)
    # our inferred causes beside the provider's verdicts (`telemetry.cache_diagnostics`)
    agreement: Agreement = field(default_factory=Agreement)

    @property
    def premium_usd(self) -> Decimal:
        return sum(self.by_cause.values(), Decimal(0))


def fleet_cache(
    *,
    days: int = 14,
    limit: int = 500,
    top: int = 10,
    since: datetime | None = None,
    until: datetime | None = None,
    profile: AgentProfile | None = None,
    bucket: timedelta | Callable[[datetime], datetime] | None = None,
) -> FleetCache:
    """Classify the `limit` most recently seen sessions of the last `days` days, as many as fit
    in `MAX_FLEET_CALLS` calls.

    Given `since` (the overview's range), only the sessions seen since then and only their
    misses since then count (and given `until`, only those before it); given `profile`, only
    its sessions; given `bucket` (an hour or a day in UTC, or a function from a time to its
    bucket's start, such as a period's local buckets), the premiums are also summed per bucket
    (`by_bucket`). Misses are dated by their call's time (the agent's clock).

    Read on demand (one query for the calls, one each for runs and events), so it is bounded;
    `truncated` says when more sessions were active.
    """
    window_start = since
    since = since or timezone.now() - timedelta(days=days)
    bucket_start = partial(bucket_of, step=bucket) if isinstance(bucket, timedelta) else bucket
    chosen = AgentSession.objects.select_related("profile").filter(last_seen_at__gte=since)
    if profile is not None:
        chosen = chosen.filter(profile=profile)
    sessions = list(chosen.order_by("-last_seen_at", "-pk")[: limit + 1])
    truncated = len(sessions) > limit
    sessions = sessions[:limit]
    # Bounded by calls too: a few huge sessions must not make one page read millions of rows.
    kept: list[AgentSession] = []
    read = 0
    for session in sessions:
        if kept and read + session.calls_count > MAX_FLEET_CALLS:
            truncated = True
            break
        kept.append(session)
        read += session.calls_count
    sessions = kept
    report = FleetCache(since=since, sessions=len(sessions), truncated=truncated)
    by_pk = {s.pk: s for s in sessions}
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in LLMCall.objects.filter(session_id__in=by_pk).values("session_id", *_CALL_FIELDS):
        grouped[row["session_id"]].append(row)
    runs = surface_changes(list(by_pk))
    events = context_changes(list(by_pk))
    prices = _Prices()
    ranked: list[tuple[AgentSession, Decimal, Cause | None]] = []
    for pk, session in by_pk.items():
        calls = [_observation(row, prices(row["model"])) for row in grouped.get(pk, [])]
        misses = classify(
            calls,
            prices=prices.table(c.model for c in calls),
            surface_changes=runs.get(pk, ()),
            context_changes=events.get(pk, ()),
        )
        if window_start is not None:
            misses = [m for m in misses if m.at >= window_start]
        if until is not None:
            misses = [m for m in misses if m.at < until]
        line = report.profiles.setdefault(session.profile.name, ProfileCache(session.profile.name))
        line.churn = line.churn + system_churn(calls)
        line.agreement = line.agreement + agreement(misses)
        totals = premiums_by_cause(misses)
        for miss in misses:
            day = miss.at.date().isoformat()
            per_day = report.by_day.setdefault(day, dict.fromkeys(CAUSES, Decimal(0)))
            per_day[miss.cause] += miss.premium_usd or Decimal(0)
            if bucket_start is not None:
                start = bucket_start(miss.at)
                per_bucket = report.by_bucket.setdefault(start, dict.fromkeys(CAUSES, Decimal(0)))
                per_bucket[miss.cause] += miss.premium_usd or Decimal(0)
            report.misses_by_cause[miss.cause] += 1
            if miss.cause == "expiry":
                gap = miss.detail.get("gap_seconds")
                if isinstance(gap, int):
                    line.expiry.append((gap, miss.premium_usd))
        for cause, value in totals.items():
            report.by_cause[cause] += value
            line.by_cause[cause] += value
        total = sum(totals.values(), Decimal(0))
        if total > 0:
            worst = max(CAUSES, key=lambda c: totals[c])
            ranked.append((session, total, worst))
    ranked.sort(key=lambda item: (-item[1], item[0].pk))
    report.top_sessions = ranked[:top]
    report.by_day = dict(sorted(report.by_day.items()))
    report.by_bucket = dict(sorted(report.by_bucket.items()))
    return report


# --- compaction economics ---------------------------------------------------------------------


@dataclass(frozen=True)
class Pricing:
    """The cache pricing a session's compaction is judged with, and where its figures came from."""

    pricing: CachePricing
    priced: bool
    tier: Literal["5m", "1h", "none"]
    model: str


def cache_rates(
    price: ModelPrice | None, ttl: str, tokens: int
) -> tuple[CacheRates, Literal["5m", "1h", "none"], bool]:
    """The rates a re-write at `ttl` pays for `price`'s model; relative Anthropic rates when the
    model is unpriced (the break-even is a ratio, so it stays right; dollars do not)."""
    if price is None:
        return CacheRates.relative(write="2" if ttl == "1h" else "1.25"), "none", False
    rates = price.rates_for(tokens)
    write = rates.cache_write_1h if ttl == "1h" else rates.cache_write_5m
    tier: Literal["5m", "1h", "none"] = "none" if write is None else ("1h" if ttl == "1h" else "5m")
    return (
        CacheRates(
            input=rates.input, read=rates.cache_read, write=rates.input if write is None else write
        ),
        tier,
        True,
    )


def typical_remaining_calls(session: AgentSession) -> int:
    """How many more calls this session is likely to make: the median of (calls − this session's
    calls) over the profile's recent sessions that went further; with fewer than three such
    sessions, as many as it has made so far (a session is likely halfway through), or
    `DEFAULT_HORIZON` before its first reported call. At least 1."""
    done = session.calls_count
    longer = list(
        AgentSession.objects.filter(profile_id=session.profile_id, calls_count__gt=done)
        .exclude(pk=session.pk)
        .order_by("-last_seen_at", "-pk")
        .values_list("calls_count", flat=True)[:REMAINING_SAMPLE]
    )
    if len(longer) >= 3:
        return max(int(statistics.median(longer)) - done, 1)
    return max(done, 1) if done else DEFAULT_HORIZON


def session_pricing(session: AgentSession, policy: PolicyValues, tokens: int) -> Pricing:
    """The worth-it rule's figures for `session`: its model's rates at its profile's TTL tier and
    its typical remaining calls."""
    price = find_price(session.model, load_catalogue()) if session.model else None
    rates, tier, priced = cache_rates(price, policy.cache_ttl, tokens)
    return Pricing(
        CachePricing(rates=rates, horizon_calls=typical_remaining_calls(session)),
        priced,
        tier,
        session.model,
    )


@dataclass(frozen=True)
class Outcome:
    """One applied compaction: predicted vs measured re-write, and the running net saving."""

    run: CompactionRun
    predicted_rewrite_tokens: int | None
    measured_rewrite_tokens: int | None
    measured_at: tuple[int, int] | None
    later_calls: int
    net_saving_usd: Decimal | None


def compaction_outcomes(session: AgentSession) -> list[Outcome]:
    """Each applied run of the session, oldest first, measured against the calls that followed:
    the first call on the new surface (by `surface_version`, else by time) re-wrote what it wrote
    (its uncached input on OpenAI), and every later call until the next run saved the freed
    tokens' read price."""
    runs = list(
        CompactionRun.objects.filter(session=session, status=CompactionRun.Status.APPLIED).order_by(
            "finished_at", "pk"
        )
    )
    if not runs:
        return []
    calls = list(
        LLMCall.objects.filter(session=session)
        .order_by("turn", "call")
        .values(
            "turn",
            "call",
            "at",
            "model",
            "uncached_input",
            "cache_write_5m",
            "cache_write_1h",
            "context_tokens",
            "surface_version",
            "received_at",
        )
    )
    prices = _Prices()
    outcomes = []
    for index, run in enumerate(runs):
        done_at = run.finished_at or run.started_at
        following = runs[index + 1] if index + 1 < len(runs) else None
        after = [c for c in calls if _after_run(c, run, done_at)]
        if following is not None:
            following_at = following.finished_at or following.started_at
            after = [c for c in after if not _after_run(c, following, following_at)]
        if not after:
            outcomes.append(Outcome(run, run.rewrite_tokens, None, None, 0, None))
            continue
        first = after[0]
        price = prices(first["model"])
        writes = first["cache_write_5m"] + first["cache_write_1h"]
        measured = (
            writes if writes or (price and price.provider != "openai") else first["uncached_input"]
        )
        net = None
        if price is not None:
            ttl = "1h" if first["cache_write_1h"] > first["cache_write_5m"] else "5m"
            rates, _, _ = cache_rates(price, ttl, first["context_tokens"])
            freed = max((run.tokens_before or 0) - (run.tokens_after or 0), 0)
            net = net_saving(
                freed_tokens=freed, rewrite_tokens=measured, rates=rates, later_calls=len(after) - 1
            )
        outcomes.append(
            Outcome(
                run,
                run.rewrite_tokens,
                measured,
                (first["turn"], first["call"]),
                len(after) - 1,
                net,
            )
        )
    return outcomes


def _after_run(call: Mapping[str, Any], run: CompactionRun, done_at: datetime) -> bool:
    """Whether `call` came after `run`: by the surface it used, else by when the server
    received it (the run's own clock; the call's `at` is the agent's)."""
    version = call["surface_version"]
    if version is not None and run.surface_version_after is not None:
        return bool(version >= run.surface_version_after)
    return bool(call["received_at"] > done_at)
