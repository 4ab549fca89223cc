"""The value of each metric (`alerts.firing.METRICS`) for its subjects, read from the database.

Session metrics read the given sessions' rows and what happened to them within the window
(one query per metric for all of them, not one per session); profile and key metrics read the
hour rollups, the sessions seen in the last hour, and the keys. Nothing here scans every call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db.models import Count, Max, Sum

from alerts.firing import BAND_RANKS, median_ratio
from alerts.models import HourlyPremium
from compaction.cache_report import session_misses
from compaction.models import CompactionRun, OverflowEvent
from telemetry.models import AgentKey, AgentProfile, AgentSession, ContextEvent, HourlyUsage
from telemetry.policy_store import effective_policy
from telemetry.session_state import session_band
from telemetry.zones import day_bounds


@dataclass(frozen=True)
class Observation:
    """One subject's value of a metric, with what the history page links to."""

    subject: str
    value: Decimal | None
    label: str
    session_id: int | None = None
    profile_id: int | None = None
    detail: dict[str, object] = field(default_factory=dict)


def _session_obs(session: AgentSession, value: Decimal | None, **detail: object) -> Observation:
    return Observation(
        subject=f"session:{session.pk}",
        value=value,
        label=str(session),
        session_id=session.pk,
        profile_id=session.profile_id,
        detail={k: v for k, v in detail.items() if v is not None},
    )


def session_values(
    metric: str, sessions: Sequence[AgentSession], *, window_minutes: int, now: datetime
) -> list[Observation]:
    """`metric` for each of `sessions` (profiles selected with them)."""
    since = now - timedelta(minutes=window_minutes)
    ids = [s.pk for s in sessions]
    if metric == "session_band":
        return [
            _session_obs(
                s,
                Decimal(BAND_RANKS[session_band(s, effective_policy(s.profile))]),
                band=session_band(s, effective_policy(s.profile)),
            )
            for s in sessions
        ]
    if metric == "projected_over_window":
        return [
            _session_obs(
                s,
                None
                if s.projected_tokens is None or not s.window_tokens
                else Decimal(s.projected_tokens) / Decimal(s.window_tokens),
                projected_tokens=s.projected_tokens,
                window_tokens=s.window_tokens,
            )
            for s in sessions
        ]
    if metric == "session_cost":
        return [
            _session_obs(s, None if s.cost_usd is None else Decimal(s.cost_usd)) for s in sessions
        ]
    if metric == "round_hard_cap":
        result = []
        for s in sessions:
            cap = effective_policy(s.profile).round_hard_cap
            over = s.last_turn_rounds - cap + 1 if cap and s.last_turn_rounds >= cap else 0
            result.append(
                _session_obs(s, Decimal(over), turn=s.last_turn, rounds=s.last_turn_rounds)
            )
        return result
    if metric == "relief_overdue":
        return [
            _session_obs(
                s,
                Decimal(0)
                if s.relief_requested_at is None
                else Decimal((now - s.relief_requested_at).total_seconds()) / 60,
            )
            for s in sessions
        ]
    if metric == "compaction_failed":
        failed = (
            CompactionRun.objects.filter(
                session_id__in=ids,
                mode=CompactionRun.Mode.AUTO,
                status=CompactionRun.Status.FAILED,
                started_at__gte=since,
            )
            .values("session_id")
            .annotate(n=Count("id"), last=Max("id"))
        )
        counts = {row["session_id"]: (row["n"], row["last"]) for row in failed}
        return [
            _session_obs(
                s, Decimal(counts.get(s.pk, (0, None))[0]), run=counts.get(s.pk, (0, None))[1]
            )
            for s in sessions
        ]
    if metric == "overflow_reported":
        reported: dict[int, int] = defaultdict(int)
        last_turn: dict[int, int | None] = {}
        for row in (
            ContextEvent.objects.filter(
                session_id__in=ids, kind=ContextEvent.Kind.OVERFLOW, at__gte=since
            )
            .values("session_id")
            .annotate(n=Count("id"), turn=Max("turn"))
        ):
            reported[row["session_id"]] += row["n"]
            last_turn[row["session_id"]] = row["turn"]
        overflow_ids = list(
            OverflowEvent.objects.filter(session_id__in=ids, created_at__gte=since)
            .values("session_id")
            .annotate(n=Count("id"))
        )
        for row in overflow_ids:
            reported[row["session_id"]] += row["n"]
        return [
            _session_obs(s, Decimal(reported[s.pk]), turn=last_turn.get(s.pk)) for s in sessions
        ]
    raise ValueError(f"{metric} is not a session metric")


CACHE_METRICS = (
    "cache_premium_per_hour",
    "cache_premium_vs_median",
    "unexplained_misses_per_hour",
)
HourMisses = dict[int, tuple[Decimal, int, int | None]]


def profile_values(
    metric: str,
    profiles: Sequence[AgentProfile],
    *,
    now: datetime,
    misses: HourMisses | None = None,
    zone: ZoneInfo | None = None,
) -> list[Observation]:
    """`metric` for each of `profiles`; `misses`: `hour_misses` of them when already read;
    `zone`: the rule's, whose local day `daily_spend` counts (UTC by default)."""
    ids = [p.pk for p in profiles]

    def obs(p: AgentProfile, value: Decimal | None, **detail: object) -> Observation:
        return Observation(f"profile:{p.pk}", value, p.name, profile_id=p.pk, detail=dict(detail))

    if metric == "daily_spend":
        # the rollups are UTC hours: an hour counts in the day that holds its start (as a day
        # bucket of the console's charts does)
        tz = zone or ZoneInfo("UTC")
        start, end = day_bounds(now, tz)
        day = {"day": now.astimezone(tz).date().isoformat(), "time_zone": str(tz)}
        spend = dict(
            HourlyUsage.objects.filter(profile_id__in=ids, hour__gte=start, hour__lt=end)
            .values("profile_id")
            .annotate(total=Sum("cost_usd"))
            .values_list("profile_id", "total")
        )
        return [obs(p, Decimal(spend.get(p.pk) or 0), **day) for p in profiles]
    if metric == "profile_silent_hours":
        seen = dict(
            AgentSession.objects.filter(profile_id__in=ids)
            .values("profile_id")
            .annotate(last=Max("last_seen_at"))
            .values_list("profile_id", "last")
        )
        return [
            obs(p, _hours_since(seen.get(p.pk), now), last_seen_at=_iso(seen.get(p.pk)))
            for p in profiles
        ]
    if metric in (
        "cache_premium_per_hour",
        "cache_premium_vs_median",
        "unexplained_misses_per_hour",
    ):
        hour = hour_misses(profiles, now=now)
        if metric == "cache_premium_per_hour":
            return [obs(p, hour[p.pk][0], turn_session=hour[p.pk][2]) for p in profiles]
        if metric == "unexplained_misses_per_hour":
            return [obs(p, Decimal(hour[p.pk][1]), turn_session=hour[p.pk][2]) for p in profiles]
        history: dict[int, list[Decimal]] = defaultdict(list)
        current_hour = now.replace(minute=0, second=0, microsecond=0)
        for profile_id, premium in HourlyPremium.objects.filter(
            profile_id__in=ids, hour__gte=now - timedelta(days=7), hour__lt=current_hour
        ).values_list("profile_id", "premium_usd"):
            history[profile_id].append(premium)
        return [obs(p, median_ratio(hour[p.pk][0], history[p.pk])) for p in profiles]
    raise ValueError(f"{metric} is not a profile metric")


def hour_misses(profiles: Iterable[AgentProfile], *, now: datetime) -> HourMisses:
    """Per profile: the premium and the unexplained count of cache misses in the last hour, and
    the session with the latest such miss. Reads only the sessions seen in that hour."""
    since = now - timedelta(hours=1)
    result: HourMisses = {}
    for profile in profiles:
        premium, unexplained, latest = Decimal(0), 0, None
        for session in AgentSession.objects.filter(profile=profile, last_seen_at__gte=since):
            for miss in session_misses(session).misses:
                if miss.at < since:
                    continue
                premium += miss.premium_usd or 0
                if miss.cause == "unexplained":
                    unexplained += 1
                latest = session.pk
        result[profile.pk] = (premium, unexplained, latest)
    return result


def record_hour_premiums(misses: HourMisses, *, now: datetime) -> None:
    """Keep this hour's premium per profile so far (the history the median reads)."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    for profile_id, (premium, _, _) in misses.items():
        HourlyPremium.objects.update_or_create(
            profile_id=profile_id, hour=hour, defaults={"premium_usd": premium}
        )


def key_values(profiles: Sequence[AgentProfile], *, now: datetime) -> list[Observation]:
    """`key_silent_hours` for each active key of `profiles` that has been used."""
    keys = AgentKey.objects.filter(
        profile__in=profiles, revoked_at__isnull=True, last_used_at__isnull=False
    ).select_related("profile")
    return [
        Observation(
            f"key:{key.pk}",
            _hours_since(key.last_used_at, now),
            f"{key.profile.name} clc_{key.prefix}_…",
            profile_id=key.profile_id,
            detail={"last_used_at": _iso(key.last_used_at)},
        )
        for key in keys
    ]


def _hours_since(at: datetime | None, now: datetime) -> Decimal | None:
    if at is None:
        return None
    return Decimal(max(0.0, (now - at).total_seconds())) / 3600


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()
