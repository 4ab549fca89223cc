"""WSGI entry point (gunicorn console.wsgi)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from console.collector import tune_collector
from console.warmup import warm_worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
application = get_wsgi_application()
# the routes' modules and the main pages' templates, loaded before the first request
warm_worker()
# everything loaded by now lives as long as the process: out of the collector's walks
tune_collector(settings.WEB_GC_THRESHOLD)
