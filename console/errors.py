"""Error pages for people: an empty 405 from a view's method check gets a page that says what
the address takes. (404 and 500 are Django's handlers with `templates/404.html`, `500.html`.)
The API keeps its JSON answers."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string


def friendly_405(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if (
            response.status_code == 405
            and not request.path.startswith("/api/")
            and not getattr(response, "streaming", False)
            and not response.content
        ):
            allowed = response.get("Allow", "")
            response.content = render_to_string(
                "405.html",
                {
                    "allowed": " or ".join(m.strip() for m in allowed.split(",") if m.strip()),
                    "method": request.method,
                    "path": request.path,
                },
                request,
            ).encode()
            response["Content-Type"] = "text/html; charset=utf-8"
        return response

    return middleware
