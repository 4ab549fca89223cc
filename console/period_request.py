"""The period a request asks for (`console.periods`), the zone the operator's browser gave, and
the 400 page naming the field of a bad value: the thin Django side of the period model."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Final

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from console.periods import DEFAULT_ZONE, PRESETS, Period, is_zone, parse_period
from telemetry.errors import FieldError

# The operator's zone: set by console.js from the browser (Intl) when absent, and by any page
# given `?tz=` (the picker's choice is remembered). A year; read by the server only.
ZONE_COOKIE: Final = "console_tz"
ZONE_COOKIE_AGE: Final = 365 * 24 * 3600


def remembered_zone(request: HttpRequest) -> str:
    """The zone remembered for this browser, UTC when none or not a zone."""
    name = request.COOKIES.get(ZONE_COOKIE, "")
    return name if is_zone(name) else DEFAULT_ZONE


def request_zone(request: HttpRequest) -> str:
    """The zone this request's times are shown in: `?tz=` when it is a zone, else the
    remembered one (`remembered_zone`), else UTC; the period's zone too (`request_period`)."""
    name = (request.GET.get("tz") or "").strip()
    return name if is_zone(name) else remembered_zone(request)


def request_period(request: HttpRequest, *, strict: bool = True) -> Period:
    """The period of `?range=`/`?from=&to=`/`?tz=`/`?compare=`, ending now; `FieldError` for a
    bad value (`strict`), else the default."""
    return parse_period(
        request.GET, now=timezone.now(), zone=remembered_zone(request), strict=strict
    )


def remember_zone(request: HttpRequest, response: HttpResponse, period: Period) -> HttpResponse:
    """A zone chosen in the URL is remembered for the next page without one."""
    if request.GET.get("tz") and request.COOKIES.get(ZONE_COOKIE) != period.zone:
        response.set_cookie(
            ZONE_COOKIE,
            period.zone,
            max_age=ZONE_COOKIE_AGE,
            samesite="Lax",
            secure=request.is_secure(),
        )
    return response


def refused_period(request: HttpRequest, exc: FieldError) -> HttpResponse:
    """The 400 page for a bad period value: the field, what is wrong, and the way back."""
    return render(
        request,
        "console/bad_period.html",
        {"field": exc.field, "message": exc.message, "presets": list(PRESETS)},
        status=400,
    )


View = Callable[..., HttpResponse]


def with_period(view: View) -> View:
    """A page with figures: `view(request, *args, period=…)`; a bad period value answers the
    400 page naming its field; a zone given in the URL is remembered."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            period = request_period(request)
        except FieldError as exc:
            return refused_period(request, exc)
        return remember_zone(request, view(request, *args, period=period, **kwargs), period)

    return wrapped
