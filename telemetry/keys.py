"""Agent keys: the one service that creates, revokes and checks them.

Used by the `create_agent_key` command, the Django admin and the console alike.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from telemetry.models import AgentKey
from telemetry.profiles import ProfileError, get_or_create_profile

KEY_PREFIX = "clc"


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
            raise ProfileError(
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
    """Revoke a key; it stops working on the next request (no cache sits in front of the check)."""
    key = AgentKey.objects.get(pk=key_id)
    if key.revoked_at is None:
        AgentKey.objects.filter(pk=key_id, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        key.refresh_from_db()
    return key


def find_active_key(plaintext: str) -> AgentKey | None:
    """The active key whose digest matches `plaintext`, or None. Constant-time comparison."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    key = (
        AgentKey.objects.select_related("profile")
        .filter(prefix=parts[1], revoked_at__isnull=True)
        .first()
    )
    if key is None:
        return None
    if not hmac.compare_digest(key.key_hash, _digest(plaintext)):
        return None
    return key
