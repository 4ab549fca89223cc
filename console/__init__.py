"""The Django project package: settings, URLs, the Celery app, the NinjaAPI and the operator UI."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
