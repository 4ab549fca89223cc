import pytest

from console.celery import app
from telemetry.models import Heartbeat
from tests.db.conftest import wait_until

pytestmark = pytest.mark.celery_worker


def test_a_real_worker_runs_a_job_sent_by_name_and_writes_the_database(celery_worker):
    assert not Heartbeat.objects.exists()
    app.send_task("telemetry.record_heartbeat")
    wait_until(lambda: Heartbeat.objects.filter(name="worker").exists(), what="the heartbeat row")
    assert ":" in Heartbeat.objects.get(name="worker").detail
