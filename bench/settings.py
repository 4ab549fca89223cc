"""Django settings of the benchmark's servers: the product's settings, one URLconf swapped.

`bench.urls` adds the B_noop endpoint to the product's routes; the product never serves it.
Everything else (DEBUG off, middleware, database, Celery) comes from `console.settings` and the
environment the harness sets.
"""

from console.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
