"""The product's URLconf plus the baseline endpoint B_noop (bench only, never in the product)."""

from __future__ import annotations

from typing import cast

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.csrf import csrf_exempt

from console.urls import urlpatterns as product_urlpatterns

NOOP_PATH = "/bench/noop"


@csrf_exempt
def noop(request: HttpRequest) -> HttpResponse:
    """Answers through the full middleware stack and parses nothing (not even the body)."""
    return HttpResponse(b'{"ok":true}', content_type="application/json")


urlpatterns: list[URLPattern | URLResolver] = [
    path(NOOP_PATH.lstrip("/"), noop),
    *cast(list[URLPattern | URLResolver], product_urlpatterns),
]
