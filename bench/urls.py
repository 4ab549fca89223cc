"""The product's URLconf plus the baseline endpoints (bench only, never in the product).

B_noop answers through the full middleware stack and parses nothing. B_django is what a console
page costs in Django itself: the same middleware, session and authentication, and a template
that extends the console's base layout and draws as many table rows as the page it is compared
with — from a Python list, so no query but the session's and the user's runs.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.csrf import csrf_exempt

from console.urls import urlpatterns as product_urlpatterns

NOOP_PATH = "/bench/noop"
DJANGO_PATH = "/bench/django"
DJANGO_ROWS = 25  # console.selectors.session_list.SESSIONS_PER_PAGE: one page of the sessions list

_TEMPLATE = engines["django"].from_string(
    """{% extends "_base.html" %}
{% block title %}B_django{% endblock %}
{% block content %}
<div class="page-head"><h1>Baseline</h1></div>
<div class="table-wrap"><table class="data">
<thead><tr>{% for name in columns %}<th scope="col">{{ name }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in rows %}<tr>
<td><a href="/sessions/{{ row.pk }}/">{{ row.external_id }}</a></td><td>{{ row.profile }}</td>
<td>{{ row.model }}</td><td class="num">{{ row.turns|floatformat:0 }}</td>
<td class="num">{{ row.context|floatformat:0 }}</td><td class="num">{{ row.pressure|floatformat:1 }}%</td>
<td class="num">{{ row.hit|floatformat:1 }}%</td><td class="num">${{ row.cost|floatformat:4 }}</td>
<td><time datetime="{{ row.seen|date:'c' }}">{{ row.seen|date:"Y-m-d H:i" }}</time></td>
</tr>{% endfor %}</tbody></table></div>
{% endblock %}"""
)


@csrf_exempt
def noop(request: HttpRequest) -> HttpResponse:
    """Answers through the full middleware stack and parses nothing (not even the body)."""
    return HttpResponse(b'{"ok":true}', content_type="application/json")


@login_required
def django_page(request: HttpRequest) -> HttpResponse:
    """B_django: a console-like page of DJANGO_ROWS rows built from a Python list."""
    from datetime import UTC, datetime
    from decimal import Decimal

    seen = datetime(2025, 6, 1, tzinfo=UTC)
    rows = [
        {
            "pk": i,
            "external_id": f"session-{i:06d}",
            "profile": "bench",
            "model": "claude-sonnet-4-5-20250929",
            "turns": 20 + i,
            "context": 38_000 + i * 150,
            "pressure": 22.5 + i / 10,
            "hit": 85.4,
            "cost": Decimal("0.4968") + i,
            "seen": seen,
        }
        for i in range(DJANGO_ROWS)
    ]
    columns = ("Session", "Profile", "Model", "Turns", "Context", "Pressure", "Hit", "Cost", "Seen")
    return HttpResponse(_TEMPLATE.render({"rows": rows, "columns": columns}, request))


urlpatterns: list[URLPattern | URLResolver] = [
    path(NOOP_PATH.lstrip("/"), noop),
    path(DJANGO_PATH.lstrip("/"), django_page),
    *cast(list[URLPattern | URLResolver], product_urlpatterns),
]
