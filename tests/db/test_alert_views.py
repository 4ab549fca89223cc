"""The Alerts page: viewers read, only admins create and delete rules; a rule that cannot be
kept answers 422 with the field's error; the overview and /metrics count firing alerts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from alerts.models import Alert, AlertRule
from alerts.services import RuleValues, create_rule

pytestmark = pytest.mark.django_db


def form(**overrides: str) -> dict[str, str]:
    data = {
        "name": "costly",
        "profile": "",
        "metric": "session_cost",
        "threshold": "1",
        "window_minutes": "60",
        "cooldown_minutes": "30",
        "channel": "none",
        "target": "",
    }
    data.update(overrides)
    return data


def test_an_admin_creates_a_rule_and_deletes_it(client_as):
    admin = client_as("admin")
    created = admin.post(reverse("alerts"), form())
    assert created.status_code == 302
    rule = AlertRule.objects.get()
    assert rule.profile is None and rule.threshold == Decimal(1)
    page = admin.get(reverse("alerts")).content.decode()
    assert "costly" in page and "fleet-wide" in page
    deleted = admin.post(reverse("alert_rule_delete", args=[rule.pk]))
    assert deleted.status_code == 302 and not AlertRule.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"threshold": "-1"}, "greater than or equal to 0"),
        ({"metric": "cpu"}, "Select a valid choice"),
        ({"channel": "webhook", "target": "https://10.1.2.3/x"}, "non-public address"),
        ({"channel": "email", "target": "nobody"}, "not an email address"),
        ({"metric": "daily_spend", "time_zone": "Europe/Nowhere"}, "not an IANA time zone"),
    ],
)
def test_a_rule_that_cannot_be_kept_answers_422_naming_the_field(client_as, overrides, message):
    answer = client_as("admin").post(reverse("alerts"), form(**overrides))
    assert answer.status_code == 422
    assert message in answer.content.decode()
    assert not AlertRule.objects.exists()


def test_a_rule_keeps_the_time_zone_typed_or_utc_and_the_page_says_where_its_day_starts(
    client_as,
):
    admin = client_as("admin")
    admin.post(
        reverse("alerts"), form(name="berlin", metric="daily_spend", time_zone="Europe/Berlin")
    )
    admin.post(reverse("alerts"), form(name="plain", metric="daily_spend", time_zone=""))
    admin.post(reverse("alerts"), form(name="sessions"))
    assert dict(AlertRule.objects.values_list("name", "time_zone")) == {
        "berlin": "Europe/Berlin",
        "plain": "UTC",
        "sessions": "UTC",
    }
    page = admin.get(reverse("alerts")).content.decode()
    assert '<td class="rule-zone">00:00 Europe/Berlin</td>' in page
    assert '<td class="rule-zone">00:00 UTC</td>' in page
    assert "session_cost does not count by day" in page
    refused = admin.post(reverse("alerts"), form(name="x", time_zone="Berlin"))
    assert refused.status_code == 422
    assert 'id="id_time_zone-error"' in refused.content.decode()


def test_viewers_and_operators_read_but_may_not_edit(client_as):
    rule = create_rule(RuleValues(name="r", metric="session_cost", threshold=1, profile=None))
    for role in ("viewer", "operator"):
        client = client_as(role)
        page = client.get(reverse("alerts"))
        assert page.status_code == 200 and 'id="rule-form"' not in page.content.decode()
        assert client.post(reverse("alerts"), form()).status_code == 403
        assert client.post(reverse("alert_rule_delete", args=[rule.pk])).status_code == 403
        assert client.get(reverse("alert_rule_edit", args=[rule.pk])).status_code == 403
        edit = form(name="taken over", threshold="9")
        assert client.post(reverse("alert_rule_edit", args=[rule.pk]), edit).status_code == 403
    assert AlertRule.objects.count() == 1
    assert AlertRule.objects.get().name == "r"


def test_an_admin_edits_a_rule_in_place_keeping_its_history(client_as):
    """The form opens filled with the rule; a save changes it (threshold, profile, switched off)
    and keeps its alerts; a change that cannot be kept is a 422 naming the field, unsaved."""
    from telemetry.profiles import get_or_create_profile

    rule = create_rule(RuleValues(name="costly", metric="session_cost", threshold=1, profile=None))
    fired = Alert.objects.create(
        rule=rule, subject="session:1", value=Decimal(2), fired_at=timezone.now()
    )
    get_or_create_profile(name="fleet")
    admin = client_as("admin")
    url = reverse("alert_rule_edit", args=[rule.pk])
    page = admin.get(url).content.decode()
    assert 'value="costly"' in page and 'name="enabled"' in page and "checked" in page
    assert (
        reverse("alert_rule_edit", args=[rule.pk]) in admin.get(reverse("alerts")).content.decode()
    )
    refused = admin.post(url, form(threshold="-2", enabled="on"))
    assert refused.status_code == 422 and "greater than or equal to 0" in refused.content.decode()
    assert AlertRule.objects.get().threshold == Decimal(1)
    saved = admin.post(url, form(name="costlier", threshold="2.5", profile="fleet"))
    assert saved.status_code == 302
    rule.refresh_from_db()
    assert (rule.name, rule.threshold, rule.profile and rule.profile.name, rule.enabled) == (
        "costlier",
        Decimal("2.5"),
        "fleet",
        False,  # the box left unticked switches it off
    )
    assert Alert.objects.filter(pk=fired.pk).exists()
    assert "(off)" in admin.get(reverse("alerts")).content.decode()
    assert admin.get(reverse("alert_rule_edit", args=[999_999])).status_code == 404


def test_the_overview_and_metrics_count_firing_alerts(client_as):
    rule = create_rule(RuleValues(name="r", metric="session_cost", threshold=1, profile=None))
    for n in range(3):
        Alert.objects.create(
            rule=rule,
            subject=f"session:{n}",
            value=2,
            fired_at=timezone.now(),
            resolved_at=timezone.now() if n == 2 else None,
        )
    overview = client_as("viewer").get(reverse("overview")).content.decode()
    assert "2 alerts firing" in overview
    metrics = Client().get("/metrics").content.decode()
    assert 'alerts_firing{metric="session_cost"} 2.0' in metrics
    assert 'alerts_firing{metric="session_band"} 0.0' in metrics


def test_the_history_shows_each_notifications_status_and_attempts(client_as):
    from alerts.models import Notification

    rule = create_rule(RuleValues(name="r", metric="session_cost", threshold=1, profile=None))
    alert = Alert.objects.create(rule=rule, subject="session:1", value=2, fired_at=timezone.now())
    Notification.objects.create(
        alert=alert, event="firing", channel="webhook", status="sent", attempts=3
    )
    page = client_as("viewer").get(reverse("alerts")).content.decode()
    assert "firing: sent, 3 attempts" in page
