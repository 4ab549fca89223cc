"""Sending one notification body through a rule's channel; each call is one attempt.

Written on the standard library (urllib) and Django's email backend rather than a notification
library: the webhook must be signed over the exact bytes sent, every attempt's status code must
be recorded, and retries belong to Celery (docs/alerts.md says why Apprise does not fit).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import send_mail

from alerts.firing import DELIVERY_HEADER, SIGNATURE_HEADER, body_bytes, signature
from alerts.targets import check_url


@dataclass(frozen=True)
class Sent:
    ok: bool
    status_code: int | None = None
    error: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # a redirect could lead to an address the target check refused: never follow one
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_json(url: str, body: bytes, headers: dict[str, str]) -> Sent:
    """POST `body`; ok on 2xx. The URL is checked again first (SSRF: a name may re-resolve)."""
    check_url(url)
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "context-console", **headers},
    )
    try:
        with _OPENER.open(request, timeout=settings.ALERTS_DELIVERY_TIMEOUT_SECONDS) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return Sent(False, exc.code, f"HTTP {exc.code}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Sent(False, None, str(getattr(exc, "reason", exc))[:500])
    return Sent(200 <= status < 300, status, "" if 200 <= status < 300 else f"HTTP {status}")


def send(
    channel: str, target: str, *, payload: dict[str, object], secret: str, delivery_id: str
) -> Sent:
    if channel == "webhook":
        body = body_bytes(payload)
        return post_json(
            target,
            body,
            {SIGNATURE_HEADER: signature(secret, body), DELIVERY_HEADER: delivery_id},
        )
    if channel == "slack":
        return post_json(target, body_bytes({"text": str(payload["text"])}), {})
    if channel == "email":
        try:
            send_mail(
                subject=str(payload["title"]),
                message=str(payload["text"]),
                from_email=None,
                recipient_list=[target],
            )
        except Exception as exc:  # any backend error is one failed attempt, retried
            return Sent(False, None, str(exc)[:500])
        return Sent(True)
    return Sent(False, None, f"unknown channel {channel!r}")
