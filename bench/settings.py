"""Django settings of the benchmark's servers: the product's settings, one URLconf swapped.

`bench.urls` adds the B_noop endpoint to the product's routes; the product never serves it.
`BENCH_FULL_PLOTLY_DIR` serves the full plotly.js bundle instead of the vendored one (B_full).
Everything else (DEBUG off, middleware, database, Celery) comes from `console.settings` and the
environment the harness sets.
"""

import os
from pathlib import Path

from console.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"

# The pages bench's baseline server (bench.pages, B_full; bench.full_plotly): the same pages with plotly's full
# bundle under the vendored bundle's static name, collected into a static root of its own.
if os.environ.get("BENCH_FULL_PLOTLY_DIR"):
    STATICFILES_FINDERS = [
        *(f for f in STATICFILES_FINDERS if f != "console.staticfinders.PlotlyFinder"),  # noqa: F405
        "bench.full_plotly.FullBundleFinder",
    ]
    STATIC_ROOT = Path(os.environ["BENCH_FULL_PLOTLY_DIR"]) / "static"  # noqa: F405
