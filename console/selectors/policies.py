"""Reads of policies and profiles: every profile's effective policy in one query, the pressure
bands as ranges and ranks in SQL, and the profiles with the TTL counterfactual of their traffic
(the policy page)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from django.db.models import Case, Count, IntegerField, Q, QuerySet
from django.utils import timezone

from telemetry.band_sql import RANK_OF_BAND, band_case
from telemetry.cache_tiers import CachedCall, TierComparison, compare_ttl_tiers
from telemetry.catalogue import load_catalogue
from telemetry.compiled import CompiledRead, run_reads
from telemetry.models import AgentProfile, LLMCall, Policy
from telemetry.policy_rules import POLICY_FIELDS, PolicyValues
from telemetry.policy_store import layered_policy, row_overrides
from telemetry.pricing import ModelPrice, find_price
from telemetry.session_scope import sessions_seen_since

TRAFFIC_WINDOW: Final = timedelta(days=7)


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
    """One query: the global row and the override rows of `profile_ids` (all when None; that
    statement, the overview's and every list's, is compiled once: `CompiledRead`). Every
    profile's policy is merged again only when the rows read differ from the last ones: the
    same rows give the same policies (an immutable `Policies` the callers only read)."""
    if profile_ids is None:
        (result,) = run_reads(
            [
                _ALL_POLICIES.read(
                    "all", (), lambda: _policy_rows(None).values_list(*_POLICY_COLUMNS)
                )
            ]
        )
        # the rows as loaded, written out (a row's list of tools is no dict key): equal texts
        # are equal rows
        rows_read = repr(result.loaded)
        held = _last_read.get(rows_read)
        if held is not None:
            return held
        alias = result.read.alias
        policies = _policies_of(
            [Policy.from_db(alias, _POLICY_COLUMNS, row) for row in result.tuples()]
        )
        _last_read.clear()  # the last rows only: any other read is of rows now replaced
        _last_read[rows_read] = policies
        return policies
    return _policies_of(_policy_rows(list(profile_ids)))


# every profile's policy from the last read of all the rows, with those rows (`load_policies`)
_last_read: dict[str, Policies] = {}


def _policies_of(rows: Iterable[Policy]) -> Policies:
    """Every profile's effective policy from the global row and the override rows `rows`."""
    global_row: Policy | None = None
    overrides: list[Policy] = []
    stamps: list[str] = []
    for row in rows:
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


def _policy_rows(profile_ids: list[int] | None) -> QuerySet[Policy]:
    """The global row and the override rows of `profile_ids` (all when None), by pk."""
    rows = Policy.objects.order_by("pk")
    if profile_ids is not None:
        rows = rows.filter(Q(is_global=True) | Q(profile_id__in=profile_ids))
    return rows


_POLICY_COLUMNS: Final = tuple(f.attname for f in Policy._meta.concrete_fields)
_ALL_POLICIES: Final = CompiledRead(Policy)


def band_rank(profiles: list[AgentProfile], policies: Policies) -> Case:
    """A session's pressure band in SQL, ranked (-1 unknown, 0 ok … 3 over; `BAND_OF_RANK`).

    Each profile has its own thresholds, so a 28 % that is past a profile's summarize threshold
    ranks above a 37 % that is still ok under another's (sorting by pressure sorts by this
    first, then by the figure). A profile created after `profiles` was read has no override
    yet: the global thresholds.
    """
    return band_case(
        {profile.pk: policies.of(profile.pk) for profile in profiles},
        fallback=policies.global_policy,
        label=RANK_OF_BAND.__getitem__,
        output_field=IntegerField(),
    )


@dataclass(frozen=True)
class ProfileOverview:
    profile: AgentProfile
    policy: PolicyValues
    overridden: frozenset[str]
    tiers: TierComparison
    sessions: int


def stored_overrides(profile: AgentProfile) -> dict[str, object]:
    """The profile's own policy row as stored (None: inherited); {} without a row. One query."""
    row = Policy.objects.filter(profile=profile).first()
    return {} if row is None else {name: getattr(row, name) for name in POLICY_FIELDS}


def recent_cached_calls(since: datetime) -> dict[int, dict[int, list[CachedCall]]]:
    """By profile, by session: the calls made at or after `since` whose model has a price (an
    unpriced model cannot be costed), in the session's order. Read session by session
    (`telemetry.session_scope`): two queries, one more per `SESSION_CHUNK` sessions seen since
    then."""
    catalogue = load_catalogue()
    prices: dict[str, ModelPrice | None] = {}
    per_profile: dict[int, dict[int, list[CachedCall]]] = defaultdict(lambda: defaultdict(list))
    for sessions in sessions_seen_since(since):
        calls = (
            LLMCall.objects.filter(session_id__in=list(sessions), at__gte=since)
            .order_by("session_id", "turn", "call")
            .values_list(
                "session_id", "at", "cache_read", "cache_write_5m", "cache_write_1h", "model"
            )
        )
        for session_id, at, read, w5, w1, model in calls.iterator(chunk_size=5000):
            if model not in prices:
                prices[model] = find_price(model, catalogue)
            price = prices[model]
            if price is None:
                continue
            per_profile[sessions[session_id]][session_id].append(
                CachedCall(at=at, cached_prefix_tokens=read + w5 + w1, input_price=price.input)
            )
    return per_profile


def profiles_overview(now: datetime | None = None) -> list[ProfileOverview]:
    """Every profile with its effective policy and the TTL counterfactual of its calls of the
    last `TRAFFIC_WINDOW` (`recent_cached_calls`)."""
    profiles = list(AgentProfile.objects.annotate(n_sessions=Count("sessions")).order_by("name"))
    policies = load_policies()
    per_profile = recent_cached_calls((now or timezone.now()) - TRAFFIC_WINDOW)
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
