"""What a web worker would otherwise do on its first request, done as it loads the application
(`console.wsgi`), before it accepts one.

Django imports the URL configuration lazily: the first request a worker serves imported every
route's module (the read API's pydantic schemas most of all), built the reverse lookup and
compiled the page's templates, ~0.6 s of CPU in front of that request's user (the overview,
in process). Done here, it is done once per worker at start-up, and what it creates lives
as long as the process, so `console.collector` moves it out of the collector's walks with the
rest. No database is touched: a statement compiled on first use (`telemetry.compiled`) still
is, on the request that first needs it.
"""

from __future__ import annotations

from typing import Final

from django.template.loader import get_template
from django.urls import get_resolver

# the pages whose templates a worker compiles at start-up (the cached loader keeps them)
TEMPLATES: Final = ("console/overview.html", "console/sessions.html", "console/session.html")


def warm_worker() -> None:
    """Import every route's module, build the reverse lookup, compile `TEMPLATES`."""
    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018 (the property imports the URL modules)
    resolver.reverse_dict  # noqa: B018 (the property builds the reverse lookup)
    for name in TEMPLATES:
        get_template(name)
