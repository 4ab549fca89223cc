"""The one write path of alert rules (the console form and the API both call these)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.db import transaction

from alerts.firing import RuleError, check_rule
from alerts.models import AlertRule
from alerts.targets import check_target
from telemetry.errors import FieldError
from telemetry.models import AgentProfile
from telemetry.zones import parse_zone


@dataclass(frozen=True)
class RuleValues:
    name: str
    metric: str
    threshold: Decimal | float | int | str
    profile: AgentProfile | None
    window_minutes: int = 60
    cooldown_minutes: int = 30
    channel: str = "none"
    target: str = ""
    enabled: bool = True
    time_zone: str = "UTC"


def _checked(values: RuleValues) -> dict[str, object]:
    name = values.name.strip()
    if not name:
        raise RuleError("name", "must not be empty")
    if len(name) > 200:
        raise RuleError("name", "must be at most 200 characters")
    try:
        threshold = Decimal(str(values.threshold))
    except (InvalidOperation, ValueError) as exc:
        raise RuleError("threshold", "must be a number") from exc
    check_rule(
        metric=values.metric,
        threshold=threshold,
        window_minutes=values.window_minutes,
        cooldown_minutes=values.cooldown_minutes,
        channel=values.channel,
    )
    if threshold >= Decimal("1e12"):
        raise RuleError("threshold", "must be below 10^12")
    time_zone = values.time_zone.strip()
    try:
        parse_zone(time_zone, field="time_zone")
    except FieldError as exc:
        raise RuleError(exc.field, exc.message) from exc
    return {
        "name": name,
        "metric": values.metric,
        "threshold": threshold,
        "profile": values.profile,
        "window_minutes": values.window_minutes,
        "cooldown_minutes": values.cooldown_minutes,
        "channel": values.channel,
        "target": check_target(values.channel, values.target),
        "enabled": values.enabled,
        "time_zone": time_zone,
    }


def create_rule(values: RuleValues) -> AlertRule:
    """A new rule, or RuleError naming the field that cannot be kept (nothing stored then)."""
    return AlertRule.objects.create(**_checked(values))


def update_rule(rule_id: int, values: RuleValues) -> AlertRule:
    fields = _checked(values)
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().get(pk=rule_id)
        for name, value in fields.items():
            setattr(rule, name, value)
        rule.save()
    return rule


def delete_rule(rule_id: int) -> None:
    AlertRule.objects.filter(pk=rule_id).delete()
