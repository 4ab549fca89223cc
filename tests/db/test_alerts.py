"""Alert rules through the API, and their evaluation: every condition fires once, resolves once,
and waits out its cooldown; dedup holds when evaluations repeat or race."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from alerts.evaluation import SESSION_METRICS, evaluate_all, evaluate_sessions
from alerts.measures import profile_values
from alerts.models import Alert, AlertRule, HourlyPremium, Notification
from alerts.services import RuleValues, create_rule
from compaction.models import CompactionRun
from telemetry.models import AgentKey, AgentProfile, AgentSession, ContextEvent, HourlyUsage

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"


def usage(uncached=1200, write=3000, read=45000, output=800) -> dict[str, Any]:
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    }


def record(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"session_id": "s-1", "turn": 0, "model": SONNET, "usage": usage()}
    base.update(overrides)
    return base


def rule_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "costly", "metric": "session_cost", "threshold": 0.01}
    body.update(overrides)
    return body


# --- the API ---------------------------------------------------------------------------------


def test_an_operator_key_creates_lists_updates_and_deletes_its_profiles_rules(compactor):
    created = compactor.post("/api/v1/alerts/rules", rule_body())
    assert created.status_code == 201, created.content
    rule = created.json()
    assert rule["profile"] == "default" and rule["metric"] == "session_cost"
    assert rule["threshold"] == 0.01 and len(rule["secret"]) > 20
    listed = compactor.get("/api/v1/alerts/rules").json()
    assert [r["id"] for r in listed] == [rule["id"]]
    changed = compactor.client.put(
        f"/api/v1/alerts/rules/{rule['id']}",
        rule_body(threshold=2, cooldown_minutes=5),
        content_type="application/json",
        headers=compactor.headers(),
    )
    assert changed.status_code == 200 and changed.json()["threshold"] == 2
    gone = compactor.client.delete(
        f"/api/v1/alerts/rules/{rule['id']}", headers=compactor.headers()
    )
    assert gone.status_code == 204
    assert not AlertRule.objects.exists()


def test_an_ingest_only_key_reads_rules_but_may_not_write_them(agent):
    assert agent.get("/api/v1/alerts/rules").status_code == 200
    assert agent.post("/api/v1/alerts/rules", rule_body()).status_code == 403


def test_another_profiles_key_cannot_touch_a_rule(compactor, make_agent):
    rule = compactor.post("/api/v1/alerts/rules", rule_body()).json()
    other = make_agent("outsiders", scopes=("compact",))
    put = other.client.put(
        f"/api/v1/alerts/rules/{rule['id']}",
        rule_body(),
        content_type="application/json",
        headers=other.headers(),
    )
    assert put.status_code == 404
    assert other.get("/api/v1/alerts/rules").json() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (rule_body(metric="cpu_temperature"), "metric"),
        (rule_body(threshold=-1), "threshold"),
        (rule_body(window_minutes=-1), "window_minutes"),
        (rule_body(metric="overflow_reported", window_minutes=0), "window_minutes"),
        (rule_body(channel="webhook", target="http://example.com/hook"), "target"),
        (rule_body(channel="webhook", target="https://127.0.0.1/hook"), "target"),
        (rule_body(channel="slack", target="https://10.0.0.8/hook"), "target"),
        (rule_body(channel="webhook", target="https://[::1]/hook"), "target"),
        (rule_body(channel="webhook", target=""), "target"),
        (rule_body(channel="email", target="not an address"), "target"),
        (rule_body(name=""), "name"),
        (rule_body(metric="daily_spend", time_zone="Mars/Olympus"), "time_zone"),
        (rule_body(metric="daily_spend", time_zone="UTC+2"), "time_zone"),
        (rule_body(metric="daily_spend", time_zone=""), "time_zone"),
    ],
)
def test_a_bad_rule_is_refused_422_naming_the_field_and_nothing_is_stored(compactor, body, field):
    answer = compactor.post("/api/v1/alerts/rules", body)
    assert answer.status_code == 422, answer.content
    assert answer.json()["field"] == field
    assert not AlertRule.objects.exists()


def test_a_rule_keeps_its_time_zone_utc_unless_given(compactor):
    plain = compactor.post("/api/v1/alerts/rules", rule_body(metric="daily_spend")).json()
    assert plain["time_zone"] == "UTC"
    body = rule_body(name="budget", metric="daily_spend", time_zone="Europe/Berlin")
    berlin = compactor.post("/api/v1/alerts/rules", body)
    assert berlin.status_code == 201 and berlin.json()["time_zone"] == "Europe/Berlin"
    assert AlertRule.objects.get(pk=berlin.json()["id"]).time_zone == "Europe/Berlin"
    moved = compactor.client.put(
        f"/api/v1/alerts/rules/{berlin.json()['id']}",
        {**body, "time_zone": "America/New_York"},
        content_type="application/json",
        headers=compactor.headers(),
    )
    assert moved.status_code == 200 and moved.json()["time_zone"] == "America/New_York"


def test_private_receivers_are_admitted_only_when_the_setting_allows_them(compactor, settings):
    settings.ALERTS_ALLOW_PRIVATE_URLS = True
    settings.ALERTS_REQUIRE_HTTPS = False
    answer = compactor.post(
        "/api/v1/alerts/rules", rule_body(channel="webhook", target="http://127.0.0.1:9/hook")
    )
    assert answer.status_code == 201, answer.content


def test_the_alert_history_lists_a_profiles_alerts(agent, compactor):
    compactor.post("/api/v1/alerts/rules", rule_body())
    agent.post("/api/v1/telemetry", record())
    evaluate_sessions(AgentSession.objects.values_list("pk", flat=True))
    history = agent.get("/api/v1/alerts?state=firing").json()
    assert len(history) == 1 and history[0]["firing"] and history[0]["metric"] == "session_cost"
    assert agent.get("/api/v1/alerts?state=resolved").json() == []


# --- evaluation ------------------------------------------------------------------------------


def make_rule(metric: str, threshold: str, *, profile: str | None = "default", **kw: Any):
    return create_rule(
        RuleValues(
            name=f"{metric} rule",
            metric=metric,
            threshold=Decimal(threshold),
            profile=AgentProfile.objects.get(name=profile) if profile else None,
            **kw,
        )
    )


def session_of(agent) -> AgentSession:
    agent.post("/api/v1/telemetry", record())
    return AgentSession.objects.get(external_id="s-1")


def set_session(session: AgentSession, **fields: Any) -> None:
    AgentSession.objects.filter(pk=session.pk).update(last_seen_at=timezone.now(), **fields)


def _band(agent):
    s = session_of(agent)
    return (
        "session_band",
        "2",
        {},
        lambda: set_session(s, pressure=0.9),
        lambda: set_session(s, pressure=0.1),
    )


def _projected(agent):
    s = session_of(agent)
    return (
        "projected_over_window",
        "1",
        {},
        lambda: set_session(s, projected_tokens=210_000, window_tokens=200_000),
        lambda: set_session(s, projected_tokens=1_000, window_tokens=200_000),
    )


def _cost(agent):
    s = session_of(agent)
    return (
        "session_cost",
        "1",
        {},
        lambda: set_session(s, cost_usd=Decimal(5)),
        lambda: set_session(s, cost_usd=Decimal("0.5")),
    )


def _hard_cap(agent):
    s = session_of(agent)
    return (
        "round_hard_cap",
        "1",
        {},
        lambda: set_session(s, last_turn_rounds=100),
        lambda: set_session(s, last_turn_rounds=3),
    )


def _relief_overdue(agent):
    s = session_of(agent)
    return (
        "relief_overdue",
        "10",
        {},
        lambda: set_session(s, relief_requested_at=timezone.now() - timedelta(minutes=20)),
        lambda: set_session(s, relief_requested_at=None),
    )


def _compaction_failed(agent):
    s = session_of(agent)

    def fail():
        CompactionRun.objects.create(session=s, mode="auto", status="failed", error="boom")
        set_session(s)

    def age():
        CompactionRun.objects.update(started_at=timezone.now() - timedelta(hours=3))

    return ("compaction_failed", "1", {"window_minutes": 60}, fail, age)


def _overflow(agent):
    s = session_of(agent)
    keys = iter(range(100))

    def report():
        ContextEvent.objects.create(
            session=s,
            kind="overflow",
            origin="agent",
            source="telemetry",
            source_key=f"o{next(keys)}",
            turn=0,
            at=timezone.now(),
        )
        set_session(s)

    def age():
        ContextEvent.objects.update(at=timezone.now() - timedelta(hours=3))

    return ("overflow_reported", "1", {"window_minutes": 60}, report, age)


def _daily_spend(agent):
    session_of(agent)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    return (
        "daily_spend",
        "50",
        {},
        lambda: HourlyUsage.objects.filter(hour=hour).update(cost_usd=Decimal(75)),
        lambda: HourlyUsage.objects.filter(hour=hour).update(cost_usd=Decimal(1)),
    )


def _profile_silent(agent):
    s = session_of(agent)
    return (
        "profile_silent_hours",
        "2",
        {},
        lambda: AgentSession.objects.filter(pk=s.pk).update(
            last_seen_at=timezone.now() - timedelta(hours=5)
        ),
        lambda: AgentSession.objects.filter(pk=s.pk).update(last_seen_at=timezone.now()),
    )


def _key_silent(agent):
    session_of(agent)
    return (
        "key_silent_hours",
        "2",
        {},
        lambda: AgentKey.objects.update(last_used_at=timezone.now() - timedelta(hours=5)),
        lambda: AgentKey.objects.update(last_used_at=timezone.now()),
    )


def _premium(metric: str, threshold: str):
    def setup(agent):
        turns = iter(range(0, 100, 2))

        def miss():
            # a cache read that drops to nothing on the next call: a priced miss, no known cause
            turn = next(turns)
            agent.post("/api/v1/telemetry", record(turn=turn))
            agent.post(
                "/api/v1/telemetry",
                record(turn=turn + 1, usage=usage(uncached=60_000, write=0, read=0)),
            )

        def age():
            from telemetry.models import LLMCall

            LLMCall.objects.update(at=timezone.now() - timedelta(hours=3))
            AgentSession.objects.update(last_seen_at=timezone.now() - timedelta(hours=3))

        return (metric, threshold, {}, miss, age)

    return setup


def _premium_vs_median(agent):
    metric, _, kw, miss, age = _premium("cache_premium_vs_median", "0")(agent)
    profile = AgentProfile.objects.get(name="default")
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours in range(2, 9):
        HourlyPremium.objects.create(
            profile=profile, hour=now - timedelta(hours=hours), premium_usd=Decimal("0.0001")
        )
    return (metric, "3", kw, miss, age)


CONDITIONS = {
    "session_band": _band,
    "projected_over_window": _projected,
    "session_cost": _cost,
    "round_hard_cap": _hard_cap,
    "relief_overdue": _relief_overdue,
    "compaction_failed": _compaction_failed,
    "overflow_reported": _overflow,
    "daily_spend": _daily_spend,
    "profile_silent_hours": _profile_silent,
    "key_silent_hours": _key_silent,
    "cache_premium_per_hour": _premium("cache_premium_per_hour", "0.01"),
    "unexplained_misses_per_hour": _premium("unexplained_misses_per_hour", "1"),
    "cache_premium_vs_median": _premium_vs_median,
}


def test_every_metric_has_a_condition_test():
    from alerts.firing import METRICS

    assert set(CONDITIONS) == set(METRICS)


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_each_condition_fires_once_resolves_once_and_respects_its_cooldown(agent, name):
    metric, threshold, kw, make_true, make_false = CONDITIONS[name](agent)
    rule = make_rule(metric, threshold, channel="email", target="ops@example.com", **kw)
    evaluate_all()
    assert not Alert.objects.filter(rule=rule).exists(), "fired before the condition held"

    make_true()
    evaluate_all()
    evaluate_all()  # again: still one firing, one notification
    alerts = list(Alert.objects.filter(rule=rule))
    assert len(alerts) == 1 and alerts[0].firing, [a.value for a in alerts]
    assert Notification.objects.filter(alert=alerts[0], event="firing").count() == 1

    make_false()
    evaluate_all()
    evaluate_all()
    alerts[0].refresh_from_db()
    assert not alerts[0].firing
    assert Notification.objects.filter(alert=alerts[0], event="resolved").count() == 1

    # within the cooldown the same condition does not fire again ...
    make_true()
    evaluate_all()
    assert Alert.objects.filter(rule=rule).count() == 1
    # ... once it has passed, it does
    Alert.objects.filter(rule=rule).update(fired_at=timezone.now() - timedelta(minutes=31))
    evaluate_all()
    assert Alert.objects.filter(rule=rule, resolved_at__isnull=True).count() == 1
    assert Alert.objects.filter(rule=rule).count() == 2


def test_a_fleet_wide_rule_watches_every_profile_and_a_profile_rule_only_its_own(agent, make_agent):
    other = make_agent("outsiders")
    agent.post("/api/v1/telemetry", record())
    other.post("/api/v1/telemetry", record())
    fleet = make_rule("session_cost", "0", profile=None)
    mine = make_rule("session_cost", "0", profile="outsiders")
    evaluate_sessions(AgentSession.objects.values_list("pk", flat=True))
    assert Alert.objects.filter(rule=fleet).count() == 2
    assert list(Alert.objects.filter(rule=mine).values_list("profile__name", flat=True)) == [
        "outsiders"
    ]


def test_evaluating_after_ingest_reads_only_the_sessions_given(
    agent, django_assert_max_num_queries
):
    for index in range(30):
        agent.post("/api/v1/telemetry", record(session_id=f"s-{index}"))
    make_rule("session_cost", "0")
    make_rule("session_band", "1")
    one = AgentSession.objects.get(external_id="s-3")
    evaluate_sessions([one.pk])
    assert Alert.objects.filter(session=one).count() == 1
    assert Alert.objects.count() == 1


def test_a_second_open_alert_for_the_same_rule_and_subject_is_refused_by_the_database(agent):
    from django.db import IntegrityError, transaction

    session = session_of(agent)
    rule = make_rule("session_cost", "0")
    evaluate_sessions([session.pk])
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(
            rule=rule, subject=f"session:{session.pk}", value=1, fired_at=timezone.now()
        )


def test_switching_a_rule_off_resolves_its_open_alerts(agent):
    session = session_of(agent)
    rule = make_rule("session_cost", "0")
    evaluate_sessions([session.pk])
    AlertRule.objects.filter(pk=rule.pk).update(enabled=False)
    evaluate_all()
    assert not Alert.objects.filter(resolved_at__isnull=True).exists()


def test_per_session_metrics_are_the_session_scoped_ones():
    from alerts.firing import METRICS

    assert set(SESSION_METRICS) == {n for n, m in METRICS.items() if m.scope == "session"}


def test_beat_sees_a_failed_compaction_and_an_overflow_of_a_session_that_stopped_reporting(
    agent,
):
    session = session_of(agent)
    AgentSession.objects.filter(pk=session.pk).update(
        last_seen_at=timezone.now() - timedelta(days=1)
    )
    failed = make_rule("compaction_failed", "1", window_minutes=30)
    overflow = make_rule("overflow_reported", "1", window_minutes=30)
    evaluate_all()
    assert not Alert.objects.exists()
    run = CompactionRun.objects.create(session=session, mode="auto", status="failed")
    from compaction.models import OverflowEvent

    OverflowEvent.objects.create(session=session, surface_version=1, detail="too long")
    evaluate_all()
    fired = Alert.objects.get(rule=failed)
    assert fired.detail == {"run": run.pk}
    assert Alert.objects.filter(rule=overflow).count() == 1


# --- daily_spend: the day of the rule's time zone ---------------------------------------------


def _spend(profile: AgentProfile, hour: datetime, usd: int) -> None:
    HourlyUsage.objects.create(profile=profile, model=SONNET, hour=hour, cost_usd=Decimal(usd))


def _daily(profile: AgentProfile, now: datetime, zone: str) -> Decimal | None:
    (found,) = profile_values("daily_spend", [profile], now=now, zone=ZoneInfo(zone))
    return found.value


def test_daily_spend_counts_from_midnight_in_the_rules_zone_across_a_25_hour_day(agent):
    """Berlin's clocks go back on 2026-10-25: that day runs 22:00 UTC the 24th to 23:00 UTC
    the 25th. A rollup hour counts in the day holding its start (as the console's day buckets)."""
    profile = AgentProfile.objects.get(name="default")
    _spend(profile, datetime(2026, 10, 24, 21, tzinfo=UTC), 40)  # the 24th, 23:00 in Berlin
    _spend(profile, datetime(2026, 10, 24, 22, tzinfo=UTC), 30)  # the 25th, 00:00 in Berlin
    _spend(profile, datetime(2026, 10, 25, 22, tzinfo=UTC), 25)  # the 25th, 23:00 in Berlin
    # 24.5 hours into Berlin's day: still the 25th there (a 24-hour day would have ended)
    now = datetime(2026, 10, 25, 22, 30, tzinfo=UTC)
    assert _daily(profile, now, "Europe/Berlin") == 55
    assert _daily(profile, now, "UTC") == 25
    # Berlin's 26th begins at 23:00 UTC
    assert _daily(profile, datetime(2026, 10, 25, 23, tzinfo=UTC), "Europe/Berlin") == 0


def test_daily_spend_counts_from_midnight_in_the_rules_zone_across_a_23_hour_day(agent):
    """New York's clocks go forward on 2026-03-08: that day runs 05:00 UTC the 8th to 04:00
    UTC the 9th; the hour before 04:00 UTC is the 8th's, the one from 04:00 the 9th's."""
    profile = AgentProfile.objects.get(name="default")
    _spend(profile, datetime(2026, 3, 9, 3, tzinfo=UTC), 70)  # the 8th, 23:00 in New York
    _spend(profile, datetime(2026, 3, 9, 4, tzinfo=UTC), 5)  # the 9th, 00:00 in New York
    now = datetime(2026, 3, 9, 4, 30, tzinfo=UTC)
    assert _daily(profile, now, "America/New_York") == 5
    assert _daily(profile, datetime(2026, 3, 9, 3, 59, tzinfo=UTC), "America/New_York") == 70


def test_a_daily_spend_rule_fires_and_resolves_on_its_zones_day(agent, time_machine):
    profile = AgentProfile.objects.get(name="default")
    _spend(profile, datetime(2026, 10, 24, 22, tzinfo=UTC), 60)  # the 25th in Berlin
    berlin = make_rule("daily_spend", "50", time_zone="Europe/Berlin")
    utc = create_rule(
        RuleValues(name="utc budget", metric="daily_spend", threshold=50, profile=profile)
    )
    time_machine.move_to(datetime(2026, 10, 25, 22, 30, tzinfo=UTC), tick=False)
    evaluate_all()
    fired = Alert.objects.get()
    assert fired.rule == berlin and fired.value == 60 and fired.firing
    assert fired.detail == {"day": "2026-10-25", "time_zone": "Europe/Berlin"}
    assert not Alert.objects.filter(rule=utc).exists()
    # Berlin's next day: nothing spent yet, the alert resolves
    time_machine.move_to(datetime(2026, 10, 25, 23, 5, tzinfo=UTC), tick=False)
    evaluate_all()
    assert not Alert.objects.get(pk=fired.pk).firing
