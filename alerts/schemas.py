"""Request and response schemas of the alerts API."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field

from alerts.firing import CHANNELS, METRICS

if TYPE_CHECKING:
    MetricName = str
    ChannelName = str
else:
    # the schema lists the names (built from the one table, alerts.firing)
    MetricName = Literal[tuple(METRICS)]
    ChannelName = Literal[CHANNELS]


class RuleIn(Schema):
    # strict: `"enabled": 0` or `"threshold": "1"` is refused 422, as the schema says
    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    metric: MetricName = Field(description="one of the metrics of docs/alerts.md")
    threshold: float = Field(ge=0, lt=1e12, description="fires when the value is at or above it")
    window_minutes: int = Field(60, ge=0, le=10_080)
    cooldown_minutes: int = Field(30, ge=0, le=10_080)
    channel: ChannelName = "none"
    target: str = Field("", max_length=500, description="a URL (webhook, slack) or an address")
    enabled: bool = True
    time_zone: str = Field(
        "UTC",
        max_length=64,
        description="the IANA zone whose day daily_spend counts from midnight (Europe/Berlin)",
    )


class RuleOut(Schema):
    id: int
    name: str
    profile: str | None
    metric: str
    threshold: float
    window_minutes: int
    cooldown_minutes: int
    channel: str
    target: str
    enabled: bool
    time_zone: str
    secret: str = Field(description="signs webhook bodies: X-Console-Signature: sha256=<hex>")


class AlertOut(Schema):
    id: int
    rule_id: int
    rule: str
    metric: str
    subject: str
    subject_label: str
    session_id: int | None
    value: float
    firing: bool
    fired_at: datetime
    resolved_at: datetime | None
    detail: dict[str, Any]
