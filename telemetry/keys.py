"""Agent keys: the one service that creates, revokes and checks them.

Used by the `create_agent_key` command, the Django admin and the console alike.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from telemetry.errors import FieldError
from telemetry.models import AgentKey
from telemetry.profiles import get_or_create_profile

KEY_PREFIX = "clc"
# Each process remembers a key check this long: the agent API's hottest path skips a query per
# request, and a key revoked anywhere stops working within this long on every process.
KEY_CACHE_SECONDS: Final = 1.0
KEY_CACHE_ENTRIES: Final = 10_000  # wrong keys are remembered too; past this, start afresh


@dataclass(frozen=True)
class IssuedKey:
    """A freshly created key. `plaintext` exists only here: it is shown once, never stored."""

    key: AgentKey
    plaintext: str


def _digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def normalize_scopes(scopes: Iterable[str] | None) -> list[str]:
    """`ingest` is always granted; `compact` is added on request. Unknown scopes are refused."""
    result = [AgentKey.SCOPE_INGEST]
    for scope in scopes or ():
        if scope not in AgentKey.SCOPES:
            raise FieldError(
                "scope", f"unknown scope {scope!r}; use one of {', '.join(AgentKey.SCOPES)}"
            )
        if scope not in result:
            result.append(scope)
    return result


def create_agent_key(
    *, profile_name: str, scopes: Iterable[str] | None = None, name: str = ""
) -> IssuedKey:
    """Create a key bound to `profile_name` (creating the profile if needed)."""
    scope_list = normalize_scopes(scopes)
    with transaction.atomic():
        profile = get_or_create_profile(name=profile_name)
        prefix = secrets.token_hex(6)
        plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
        key = AgentKey.objects.create(
            profile=profile,
            name=name,
            prefix=prefix,
            key_hash=_digest(plaintext),
            scopes=scope_list,
        )
    return IssuedKey(key=key, plaintext=plaintext)


def revoke_agent_key(*, key_id: int) -> AgentKey:
    """Revoke a key. This process forgets it at once; every other process within
    `KEY_CACHE_SECONDS` (the age limit of its remembered checks)."""
    with transaction.atomic():
        key = AgentKey.objects.select_for_update().get(pk=key_id)
        if key.revoked_at is None:
            # A save, not a bulk update: the audit trail records who revoked it (console.audit).
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
    _checks.forget(key_id)
    return key


@dataclass(frozen=True)
class _Check:
    key: AgentKey | None
    at: float


class _RecentChecks:
    """Key checks of the last `KEY_CACHE_SECONDS`, by the digest of the presented key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Check] = {}

    def get(self, digest: str, now: float) -> _Check | None:
        entry = self._entries.get(digest)
        if entry is None or now - entry.at >= KEY_CACHE_SECONDS or now < entry.at:
            return None
        return entry

    def put(self, digest: str, key: AgentKey | None, now: float) -> None:
        with self._lock:
            if len(self._entries) >= KEY_CACHE_ENTRIES:
                self._entries.clear()
            self._entries[digest] = _Check(key, now)

    def forget(self, key_id: int) -> None:
        with self._lock:
            for digest, entry in list(self._entries.items()):
                if entry.key is not None and entry.key.pk == key_id:
                    del self._entries[digest]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_checks = _RecentChecks()


def find_active_key(
    plaintext: str, *, clock: Callable[[], float] = time.monotonic
) -> AgentKey | None:
    """The active key whose digest matches `plaintext`, or None. Constant-time comparison.

    A check is remembered for `KEY_CACHE_SECONDS` in this process (wrong keys included), so a
    busy agent costs one key query a second, not one a request. Each caller gets its own copy
    of the key, so nothing one request does to it reaches another.
    """
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    digest = _digest(plaintext)
    now = clock()
    remembered = _checks.get(digest, now)
    if remembered is not None:
        return None if remembered.key is None else copy.copy(remembered.key)
    key = (
        AgentKey.objects.select_related("profile")
        .filter(prefix=parts[1], revoked_at__isnull=True)
        .first()
    )
    if key is not None and not hmac.compare_digest(key.key_hash, digest):
        key = None
    _checks.put(digest, key, now)
    return None if key is None else copy.copy(key)


def forget_key_checks(*args: object, **kwargs: object) -> None:
    """Drop every remembered key check of this process.

    Connected to the saves and deletes of keys and profiles (`TelemetryConfig.ready`), so the
    process that changes a profile's windows or a key sees the change at once; the others within
    `KEY_CACHE_SECONDS`. Bulk `QuerySet.update()`s send no signal: call it after them.
    """
    _checks.clear()


# A key's "last used" is written at most once a minute per process: an agent reporting every
# second must not turn each request into an extra UPDATE (and the key checks above are cached,
# so the key in hand may carry an old `last_used_at`: the process remembers its own writes).
LAST_USED_RESOLUTION: Final = timedelta(minutes=1)
_marked: dict[str, datetime] = {}  # by key prefix (unique, never reused)
_marked_lock = threading.Lock()


def mark_key_used(key: AgentKey, now: datetime | None = None) -> None:
    """Record that `key` authenticated a request (to the minute). A conditional UPDATE, so
    concurrent processes write it once a minute at most."""
    now = now or timezone.now()
    with _marked_lock:
        last = _marked.get(key.prefix) or key.last_used_at
        if last is not None and now - last < LAST_USED_RESOLUTION:
            return
        _marked[key.prefix] = now
    AgentKey.objects.filter(pk=key.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
    key.last_used_at = now
