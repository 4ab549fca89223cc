"""Delivering alert notifications: a real local HTTP receiver verifies the HMAC signature and
sees retries of failing attempts, each recorded; Slack and email channels; a replayed or
concurrent job sends nothing twice; and, with a real Celery worker, ingest nudges the
evaluation and the worker retries a receiver that times out and fails until it answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core import mail
from django.utils import timezone

from alerts import delivery
from alerts.evaluation import evaluate_sessions
from alerts.firing import DELIVERY_HEADER, SIGNATURE_HEADER, verify
from alerts.models import Alert, AlertRule, DeliveryAttempt, Notification
from alerts.services import RuleValues, create_rule
from telemetry.models import AgentProfile, AgentSession
from tests.db.conftest import start_worker, stop_worker, wait_until
from tests.db.receiver import Receiver

SONNET = "claude-sonnet-4-5-20250929"
RECORD = {
    "session_id": "s-1",
    "turn": 0,
    "model": SONNET,
    "usage": {
        "input_tokens": 1200,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": 45000,
        "output_tokens": 800,
    },
}


@pytest.fixture
def local_receivers(settings):
    settings.ALERTS_ALLOW_PRIVATE_URLS = True
    settings.ALERTS_REQUIRE_HTTPS = False


@pytest.fixture
def receiver(local_receivers) -> Iterator[Receiver]:
    started = Receiver(script=[]).start()
    yield started
    started.stop()


def fired_notification(agent, channel: str, target: str) -> Notification:
    rule = create_rule(
        RuleValues(
            name="costly",
            metric="session_cost",
            threshold=Decimal(0),
            profile=AgentProfile.objects.get(name=agent.profile),
            channel=channel,
            target=target,
        )
    )
    agent.post("/api/v1/telemetry", RECORD)
    evaluate_sessions(AgentSession.objects.values_list("pk", flat=True))
    return Notification.objects.get(alert__rule=rule, event="firing")


@pytest.mark.django_db
def test_a_webhook_is_signed_retried_and_every_attempt_recorded(agent, receiver, settings):
    receiver.script = ["fail", "fail", "ok"]
    notification = fired_notification(agent, "webhook", receiver.url)
    delays = [delivery.deliver(notification.pk) for _ in range(3)]
    assert delays[0] == settings.ALERTS_RETRY_BACKOFF_SECONDS
    assert delays[1] == 2 * settings.ALERTS_RETRY_BACKOFF_SECONDS
    assert delays[2] is None
    notification.refresh_from_db()
    assert notification.status == "sent" and notification.attempts == 3
    attempts = list(DeliveryAttempt.objects.filter(notification=notification))
    assert [(a.number, a.ok, a.status_code) for a in attempts] == [
        (1, False, 500),
        (2, False, 500),
        (3, True, 200),
    ]
    secret = AlertRule.objects.get().secret
    bodies = {r.body for r in receiver.requests}
    assert len(bodies) == 1, "every attempt sends the same bytes"
    for request in receiver.requests:
        assert verify(secret, request.body, request.headers[SIGNATURE_HEADER])
        assert request.headers[DELIVERY_HEADER] == str(notification.pk)
    body = json.loads(receiver.requests[0].body)
    assert body["event"] == "firing" and body["rule"]["metric"] == "session_cost"
    assert body["links"]["session"].startswith("/sessions/")
    # sent: a replayed job sends nothing
    assert delivery.deliver(notification.pk) is None
    assert len(receiver.requests) == 3


@pytest.mark.django_db
def test_attempts_stop_at_the_limit_and_the_notification_is_failed(agent, receiver, settings):
    settings.ALERTS_DELIVERY_MAX_ATTEMPTS = 2
    receiver.script = ["fail"] * 5
    notification = fired_notification(agent, "webhook", receiver.url)
    assert delivery.deliver(notification.pk) is not None
    assert delivery.deliver(notification.pk) is None
    notification.refresh_from_db()
    assert notification.status == "failed" and notification.attempts == 2
    assert delivery.deliver(notification.pk) is None
    assert len(receiver.requests) == 2


@pytest.mark.django_db
def test_a_claimed_notification_is_not_sent_by_another_worker_until_the_claim_is_stale(
    agent, receiver
):
    notification = fired_notification(agent, "webhook", receiver.url)
    Notification.objects.filter(pk=notification.pk).update(claimed_at=timezone.now())
    assert delivery.deliver(notification.pk) is None
    assert receiver.requests == []
    Notification.objects.filter(pk=notification.pk).update(
        claimed_at=timezone.now() - delivery.STALE_CLAIM - timedelta(seconds=1)
    )
    delivery.deliver(notification.pk)
    assert len(receiver.requests) == 1


@pytest.mark.django_db
def test_a_receiver_that_resolves_to_a_private_address_at_send_time_is_not_called(
    agent, receiver, settings
):
    notification = fired_notification(agent, "webhook", receiver.url)
    settings.ALERTS_ALLOW_PRIVATE_URLS = False
    assert delivery.deliver(notification.pk) is not None
    attempt = DeliveryAttempt.objects.get()
    assert not attempt.ok and "non-public address" in attempt.error
    assert receiver.requests == []


@pytest.mark.django_db
def test_slack_gets_its_incoming_webhook_text(agent, receiver):
    notification = fired_notification(agent, "slack", receiver.url)
    delivery.deliver(notification.pk)
    sent = json.loads(receiver.requests[0].body)
    assert set(sent) == {"text"} and sent["text"].startswith("[FIRING] costly")


@pytest.mark.django_db
def test_email_goes_through_djangos_email_backend(agent):
    notification = fired_notification(agent, "email", "ops@example.com")
    delivery.deliver(notification.pk)
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["ops@example.com"]
    assert mail.outbox[0].subject.startswith("[FIRING] costly")
    assert Notification.objects.get().status == "sent"


@pytest.mark.django_db
def test_the_outbox_flush_republishes_only_what_waited_past_the_longest_backoff(agent, settings):
    notification = fired_notification(agent, "email", "ops@example.com")
    assert delivery.flush_outbox() == 0
    Notification.objects.filter(pk=notification.pk).update(
        created_at=timezone.now()
        - timedelta(seconds=settings.ALERTS_RETRY_BACKOFF_MAX_SECONDS + 61)
    )
    assert delivery.flush_outbox() == 1


@pytest.mark.celery_worker
def test_a_real_worker_evaluates_after_ingest_and_retries_a_slow_then_failing_receiver(
    transactional_db, make_agent, tmp_path: Path, settings
):
    settings.ALERTS_ALLOW_PRIVATE_URLS = True
    settings.ALERTS_REQUIRE_HTTPS = False
    receiver = Receiver(script=["slow", "fail", "ok"], slow_seconds=4).start()
    worker = start_worker(
        tmp_path / "worker.log",
        extra_env={
            "ALERTS_ALLOW_PRIVATE_URLS": "true",
            "ALERTS_REQUIRE_HTTPS": "false",
            "ALERTS_RETRY_BACKOFF_SECONDS": "1",
            "ALERTS_DELIVERY_TIMEOUT_SECONDS": "1",
        },
    )
    try:
        agent = make_agent("default")
        from alerts.nudge import forget_rules

        forget_rules()
        rule = create_rule(
            RuleValues(
                name="costly",
                metric="session_cost",
                threshold=Decimal(0),
                profile=AgentProfile.objects.get(name="default"),
                channel="webhook",
                target=receiver.url,
            )
        )
        started = time.monotonic()
        answer = agent.post("/api/v1/telemetry", RECORD)
        took = time.monotonic() - started
        assert answer.status_code == 201
        # the receiver's slowness is the worker's problem, never ingest's
        assert took < 3
        wait_until(
            lambda: Notification.objects.filter(status="sent").exists(),
            timeout=60,
            what=f"the notification to be sent\n{worker.log()}",
        )
        attempts = list(DeliveryAttempt.objects.order_by("number"))
        assert [(a.ok, a.status_code) for a in attempts] == [
            (False, None),
            (False, 500),
            (True, 200),
        ]
        assert "timed out" in attempts[0].error
        assert Alert.objects.filter(rule=rule).count() == 1
        for request in receiver.requests:
            assert verify(rule.secret, request.body, request.headers[SIGNATURE_HEADER])
        # a second report of the same session: still one firing, nothing more sent
        agent.post("/api/v1/telemetry", {**RECORD, "turn": 1})
        time.sleep(3)
        assert Alert.objects.count() == 1 and Notification.objects.count() == 1
        assert len(receiver.requests) == 3
    finally:
        stop_worker(worker)
        receiver.stop()


@pytest.mark.celery_worker
def test_a_worker_restart_between_attempts_neither_loses_nor_repeats_a_notification(
    transactional_db, make_agent, tmp_path: Path, settings
):
    settings.ALERTS_ALLOW_PRIVATE_URLS = True
    settings.ALERTS_REQUIRE_HTTPS = False
    receiver = Receiver(script=["fail", "ok"]).start()
    env = {
        "ALERTS_ALLOW_PRIVATE_URLS": "true",
        "ALERTS_REQUIRE_HTTPS": "false",
        "ALERTS_RETRY_BACKOFF_SECONDS": "6",
    }
    worker = start_worker(tmp_path / "worker-1.log", extra_env=env)
    try:
        agent = make_agent("default")
        # the firing's job is published when its transaction commits
        fired_notification(agent, "webhook", receiver.url)
        wait_until(
            lambda: DeliveryAttempt.objects.filter(ok=False).exists(),
            what=f"the first, failing attempt\n{worker.log()}",
        )
        # the retry waits in the worker for its countdown: stop the worker meanwhile
        assert not Notification.objects.filter(status="sent").exists()
        stop_worker(worker)
        worker = start_worker(tmp_path / "worker-2.log", extra_env=env)
        wait_until(
            lambda: Notification.objects.filter(status="sent").exists(),
            timeout=60,
            what=f"the retry after the restart\n{worker.log()}",
        )
        time.sleep(2)
        assert [(a.number, a.ok) for a in DeliveryAttempt.objects.order_by("number")] == [
            (1, False),
            (2, True),
        ]
        assert len(receiver.requests) == 2
    finally:
        stop_worker(worker)
        receiver.stop()
