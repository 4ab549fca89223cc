"""Sign-in throttling of the console's and the admin's login forms, by django-axes.

axes counts failed sign-ins in its database table (`axes.AccessAttempt`) per client address and
account together, so a stranger's wrong passwords lock only the stranger's own address out of
that account, never the account's owner elsewhere. What this module adds around it:

- `client_address`: the address axes counts by. `REMOTE_ADDR`, or, with
  `DJANGO_BEHIND_PROXY=true` and the request coming from one of `FORWARDED_ALLOW_IPS` (the
  proxies gunicorn believes too), the right-most `X-Forwarded-For` hop that is not one of those
  proxies: the one address the trusted proxy itself saw. A client's own `X-Forwarded-For` is
  never believed without a configured proxy.
- `SignInHandler`: axes' database handler plus a per-address limit across accounts
  (`LOGIN_FAILURES_PER_ADDRESS`), so one client cannot try a few passwords on every account.
- `_Throttled` (the forms): each guess is checked, evaluated and counted while holding a
  per-address lock (`_guess_lock`), so parallel guesses wait for one another's count and at most
  the limit of them ever reach the password check.
- `lockout_response`: a refused sign-in is the login page again, with the message, as 429 with
  `Retry-After`.

The counts live in the database, not the cache: a cache outage changes nothing about sign-in, and
a database outage is answered 503 by `console.middleware.DatabaseUnavailable`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.db import connection, transaction
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _trusted_proxies(configured: tuple[str, ...]) -> tuple[_Network, ...] | None:
    """The proxies `FORWARDED_ALLOW_IPS` names (None: `*`, any peer), as gunicorn reads them."""
    if "*" in configured:
        return None
    return tuple(ipaddress.ip_network(item, strict=False) for item in configured)


def _is_trusted(address: str, proxies: tuple[_Network, ...] | None) -> bool:
    if proxies is None:
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def _valid(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address.strip()))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The address of the client a sign-in comes from (axes' `AXES_CLIENT_IP_CALLABLE`)."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    if not settings.BEHIND_PROXY:
        return _valid(peer)
    proxies = _trusted_proxies(tuple(settings.FORWARDED_ALLOW_IPS))
    if not _is_trusted(peer, proxies):
        return _valid(peer)
    # Each proxy appends the address it saw: read from the right, skip our own proxies; what is
    # left of the first stranger was written by the client and proves nothing.
    hops = str(request.META.get("HTTP_X_FORWARDED_FOR") or "").split(",")
    for hop in reversed(hops[-32:]):
        hop = hop.strip()
        if hop and not _is_trusted(hop, proxies):
            return _valid(hop) or _valid(peer)
    return _valid(peer)


def account_name(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The account a sign-in is for, as counted (axes' `AXES_USERNAME_CALLABLE`): any case."""
    source: Any = credentials if credentials else request.POST
    username = source.get("username")
    return None if username is None else str(username).strip().lower()[:255]


class SignInHandler(AxesDatabaseHandler):  # type: ignore[misc]  # axes ships no type hints
    """axes' database handler, plus `LOGIN_FAILURES_PER_ADDRESS` over all accounts."""

    def is_locked(self, request: Any, credentials: dict[str, Any] | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        address = getattr(request, "axes_ip_address", None)
        if not address:
            return False
        failures = (
            AccessAttempt.objects.filter(
                ip_address=address, attempt_time__gte=get_cool_off_threshold(request)
            ).aggregate(total=Sum("failures_since_start"))["total"]
            or 0
        )
        return bool(failures >= int(settings.LOGIN_FAILURES_PER_ADDRESS))


class SignInBackend(AxesStandaloneBackend):  # type: ignore[misc]  # axes ships no type hints
    """axes' gate in `AUTHENTICATION_BACKENDS`; a call without a request (a shell, a management
    command) has no client to count and passes to the next backend."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username, password, **kwargs)
        return None


# SQLite: `transaction.atomic()` takes the database's write lock up front (IMMEDIATE), which
# serialises sign-ins across processes already; this lock, taken before the transaction and let
# go after its commit, only keeps one process's threads from queueing on SQLite's busy timeout.
_local_lock = threading.Lock()


@contextmanager
def _guess_lock(address: str | None) -> Iterator[None]:
    """Hold the sign-in lock of one client address for a check-evaluate-count step, until the
    count is committed.

    Without it, 24 parallel guesses all read "4 failures so far" before any of them counted
    its own, and all 24 reach the password check.
    """
    if connection.vendor == "postgresql":
        digest = hashlib.sha256(("sign-in:" + (address or "")).encode()).digest()
        key = int.from_bytes(digest[:8], "big", signed=True)
        with transaction.atomic():
            with connection.cursor() as cursor:
                # held until this transaction ends, i.e. after axes' count is committed
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            yield
    else:
        with _local_lock, transaction.atomic():
            yield


def _message() -> str:
    minutes = max(1, int(settings.LOGIN_LOCKOUT_SECONDS) // 60)
    return (
        f"Too many failed sign-ins from your address. Sign-in is locked for up to {minutes} "
        "minutes; try again later or ask an administrator."
    )


class _Throttled:
    """Mixin for Django's authentication forms: one guess at a time per client address, and the
    lockout message instead of "wrong password" once axes refuses."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        request = self.request
        address = client_address(request) if request is not None else None
        refusal: forms.ValidationError | None = None
        with _guess_lock(address):
            # caught inside the lock's transaction, raised outside it: the failure axes just
            # counted must be committed, not rolled back with the exception
            try:
                cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
            except forms.ValidationError as exc:
                refusal = exc
        if refusal is not None:
            if request is not None and getattr(request, "axes_locked_out", False):
                raise forms.ValidationError(_message(), code="throttled")
            raise refusal
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    """The console's login form."""


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    """The admin's login form."""


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """A refused sign-in (axes' `AXES_LOCKOUT_CALLABLE`): the login page the form re-rendered
    with the lockout message, as 429 with `Retry-After`."""
    if original_response is None or original_response.status_code != 200:
        original_response = HttpResponse(_message(), content_type="text/plain; charset=utf-8")
    original_response.status_code = 429
    original_response["Retry-After"] = str(int(settings.LOGIN_LOCKOUT_SECONDS))
    return original_response
