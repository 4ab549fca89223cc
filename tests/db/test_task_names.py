"""Registered Celery task names are a contract with jobs already on the broker: renaming a
task's Python function must not rename the message it consumes."""

from __future__ import annotations

from celery import current_app
from django.conf import settings

import alerts.tasks
import compaction.tasks
import telemetry.tasks
from alerts.delivery import DELIVER_TASK
from alerts.nudge import EVALUATE_TASK
from telemetry.policy_change import RECOMPUTE_TASK
from telemetry.relief_dispatch import RELIEF_TASK


def test_registered_task_names_stay_what_queued_jobs_carry():
    tasks = {
        "compaction.relieve_session": compaction.tasks.relieve_session_task,
        "compaction.sweep": compaction.tasks.sweep,
        "compaction.purge_archives": compaction.tasks.purge_archives,
        "compaction.apply_log_retention": compaction.tasks.apply_log_retention,
        "telemetry.record_heartbeat": telemetry.tasks.record_heartbeat,
        "telemetry.recompute_pressure": telemetry.tasks.recompute_pressure,
        "telemetry.apply_retention": telemetry.tasks.apply_retention,
        "alerts.evaluate_sessions": alerts.tasks.evaluate_sessions_task,
        "alerts.evaluate": alerts.tasks.evaluate_task,
        "alerts.deliver": alerts.tasks.deliver_task,
    }
    for name, task in tasks.items():
        assert task.name == name
        assert current_app.tasks[name].run.__qualname__ == task.run.__qualname__


def test_what_telemetry_sends_and_beat_schedules_is_a_registered_task():
    names = {RELIEF_TASK, RECOMPUTE_TASK, DELIVER_TASK, EVALUATE_TASK} | {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert names <= set(current_app.tasks)
