"""Where a rule may send: an HTTPS URL on a public address, or an email address.

A receiver URL is resolved when the rule is saved and again before every send (a name that
later resolves to an internal address must not turn the console into a proxy to it: SSRF).
`ALERTS_ALLOW_PRIVATE_URLS` admits loopback and private addresses (local receivers, tests);
`ALERTS_REQUIRE_HTTPS` (on unless DEBUG) refuses plain http.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from alerts.firing import RuleError


def check_target(channel: str, target: str) -> str:
    """The target, stripped, or RuleError("target", why)."""
    target = target.strip()
    if channel == "none":
        return target
    if not target:
        raise RuleError("target", f"the {channel} channel needs a target")
    if channel == "email":
        try:
            validate_email(target)
        except ValidationError as exc:
            raise RuleError("target", "is not an email address") from exc
        return target
    check_url(target)
    return target


def check_url(url: str) -> None:
    """RuleError("target", why) unless `url` is http(s) with a host resolving only to addresses
    we may reach (see the module's docstring)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RuleError("target", "must be an http(s) URL with a host")
    if parts.scheme != "https" and settings.ALERTS_REQUIRE_HTTPS:
        raise RuleError("target", "must use https (ALERTS_REQUIRE_HTTPS)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise RuleError("target", "has an invalid port") from exc
    try:
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise RuleError("target", f"host {parts.hostname!r} does not resolve") from exc
    if settings.ALERTS_ALLOW_PRIVATE_URLS:
        return
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not address.is_global or address.is_multicast:
            raise RuleError(
                "target",
                f"resolves to the non-public address {address} (ALERTS_ALLOW_PRIVATE_URLS "
                "admits such receivers)",
            )
