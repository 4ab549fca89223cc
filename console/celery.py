"""The Celery application. Configuration comes from Django settings (`CELERY_*`)."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _nicer(**_: Any) -> None:
    """Each pool process yields the CPU to the web processes (`WORKER_NICE`): a compaction's
    planning and archive work waits, ingest's requests do not."""
    from django.conf import settings

    step = int(settings.WORKER_NICE)
    if step:
        os.nice(step)
