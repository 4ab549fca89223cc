"""Sign-in throttling (issue 16): by account and by client address, in the shared cache.

After `LOGIN_FAILURES_PER_ACCOUNT` failed sign-ins for one username, or
`LOGIN_FAILURES_PER_ADDRESS` from one address, within `LOGIN_LOCKOUT_SECONDS`, every sign-in
for that account (or from that address) is refused — the right password included — until the
window has passed, with a message that says so. A successful sign-in clears the account's count.
Both the console's and the admin's login forms use it. The counts live in Django's cache: set
`CACHE_URL=redis://…` so that every web process shares them (the in-process default counts per
process). While the shared cache is unreachable each process counts in its own memory
(`telemetry.shared_cache`): sign-in keeps working, throttled per process.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache.backends.base import BaseCache
from django.http import HttpRequest

from telemetry import shared_cache


def _key(kind: str, value: str) -> str:
    return "login-fail:" + kind + ":" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


def client_address(request: HttpRequest | None) -> str:
    if request is None:
        return ""
    return str(request.META.get("REMOTE_ADDR") or "")


def _limits() -> tuple[tuple[str, int], tuple[str, int]]:
    return (
        ("account", int(settings.LOGIN_FAILURES_PER_ACCOUNT)),
        ("address", int(settings.LOGIN_FAILURES_PER_ADDRESS)),
    )


def _subjects(username: str, address: str) -> dict[str, str]:
    return {"account": username.strip().lower(), "address": address}


def throttled(username: str, address: str) -> str | None:
    """Which limit (`account` or `address`) refuses this sign-in now, or None."""
    return shared_cache.with_fallback(
        lambda cache: _throttled(cache, username, address),
        lambda local: _throttled(local, username, address),
    )


def _throttled(cache: BaseCache, username: str, address: str) -> str | None:
    subjects = _subjects(username, address)
    for kind, limit in _limits():
        if subjects[kind] and int(cache.get(_key(kind, subjects[kind]), 0)) >= limit:
            return kind
    return None


def record_failure(username: str, address: str) -> None:
    shared_cache.with_fallback(
        lambda cache: _record_failure(cache, username, address),
        lambda local: _record_failure(local, username, address),
    )


def _record_failure(cache: BaseCache, username: str, address: str) -> None:
    window = int(settings.LOGIN_LOCKOUT_SECONDS)
    for kind, value in _subjects(username, address).items():
        if not value:
            continue
        key = _key(kind, value)
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=window)


def record_success(username: str) -> None:
    key = _key("account", username.strip().lower())
    shared_cache.with_fallback(lambda cache: cache.delete(key), lambda local: local.delete(key))


def _message(kind: str) -> str:
    minutes = max(1, int(settings.LOGIN_LOCKOUT_SECONDS) // 60)
    what = "this account" if kind == "account" else "your address"
    return (
        f"Too many failed sign-ins for {what}. Sign-in is locked for up to {minutes} minutes; "
        "try again later or ask an administrator."
    )


class _Throttled:
    """Mixin for Django's authentication forms: refuse while throttled, count failures."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        address = client_address(self.request)
        kind = throttled(username, address)
        if kind is not None:
            raise forms.ValidationError(_message(kind), code="throttled")
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            record_failure(username, address)
            raise
        record_success(username)
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    """The console's login form."""


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    """The admin's login form."""
