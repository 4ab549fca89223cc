"""Response schemas of the console's read API (`console.read_api`): the sessions list, a
session's turns and compaction history, and the overview's figures. Money is `Money`."""

from __future__ import annotations

from typing import Literal

from ninja import Schema
from pydantic import Field

from telemetry.money import Money
from telemetry.pressure import PressureBand
from telemetry.schemas import SessionReadOut, TurnOut


class SessionListOut(Schema):
    sort: str
    sessions: list[SessionReadOut]
    next_cursor: str | None = Field(
        description="pass as `cursor` (with the same filters and sort) for the next page; "
        "null on the last page"
    )


class TurnsPageOut(Schema):
    session_id: str
    turns: list[TurnOut]
    next_after_turn: int | None = Field(
        description="the next page's `after_turn`; null on the last page"
    )


class CompactionOut(Schema):
    id: str = Field(description="`run:<n>` for ours, `event:<n>` for the agent's or provider's")
    origin: Literal["ours", "agent", "provider"]
    kind: Literal["compaction", "context_edit", "overflow"]
    mode: Literal["manual", "auto", "overflow"] | None = Field(
        description="how our run was asked for; null for the agent's and the provider's"
    )
    status: str = Field(
        description="our run's outcome (running, applied, noop, refused, superseded, failed); "
        "`recorded` for the agent's and the provider's"
    )
    action: str = Field(description="what our run did (prune, prune+summarize, nothing)")
    trigger: str
    source: str = Field(description="where we learned of it: `console` for ours, else the door")
    at: str = Field(description="when it started (ours) or happened (theirs), ISO 8601 UTC")
    finished_at: str | None
    turn: int | None
    tokens_before: int | None
    tokens_after: int | None
    tokens_freed: int | None
    surface_version_before: int | None
    surface_version_after: int | None
    archived: bool | None = Field(description="ours: whether the transcript was archived first")
    reason: str


class CompactionsOut(Schema):
    session_id: str
    compactions: list[CompactionOut] = Field(description="oldest first")
    next_cursor: str | None = Field(
        description="pass as `cursor` for the next page; null at the end"
    )


class OverviewBucketOut(Schema):
    start: str
    calls: int
    cost_usd: Money
    unpriced_calls: int = Field(description="calls `cost_usd` leaves out: no catalogue price")
    cost_by_bucket_usd: dict[str, Money] = Field(
        description="uncached_input, cache_read, cache_write_5m, cache_write_1h, output"
    )
    saved_usd: Money = Field(description="what the same calls would have cost uncached, minus cost")
    cache_hit_ratio: float | None


class OverviewDayOut(Schema):
    day: str
    compactions_by_origin: dict[str, int]
    freed_tokens: int
    archive_failures: int


class TopSessionOut(Schema):
    session_id: str
    pressure: float | None
    pressure_band: PressureBand
    cost_usd: Money | None
    last_seen_at: str | None


class OverviewTotalsOut(Schema):
    since: str = Field(description="the previous period's start; it ends at `since`")
    calls: int
    cost_usd: Money
    unpriced_calls: int
    saved_usd: Money
    cache_hit_ratio: float | None
    sessions: int = Field(description="the sessions active in it (a call in it)")


class OverviewOut(Schema):
    range: Literal["1h", "24h", "7d", "14d", "30d", "custom"]
    bucket: Literal["hour", "day"]
    since: str
    until: str = Field(description="the period's end (exclusive)")
    time_zone: str = Field(description="the IANA zone buckets are aligned in")
    previous: OverviewTotalsOut | None = Field(
        default=None, description="the previous period of the same length, with compare=previous"
    )
    profile: str
    calls: int
    cost_usd: Money
    unpriced_calls: int = Field(description="calls `cost_usd` leaves out: no catalogue price")
    saved_usd: Money
    cache_hit_ratio: float | None
    buckets: list[OverviewBucketOut]
    sessions_by_band: dict[str, int] = Field(description="the profile's sessions by pressure now")
    compactions_by_origin: dict[str, int] = Field(
        description="manual, auto, overflow (ours), agent and provider, over the range"
    )
    freed_tokens: int
    archive_failures: int
    compaction_days: list[OverviewDayOut]
    top_cost: list[TopSessionOut]
    top_pressure: list[TopSessionOut]
