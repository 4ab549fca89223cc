"""What a database error means for an answer, decided once: the database is away, or it is full.

Every layer that turns a database error into an HTTP answer (`console.middleware` for views and
the API, `telemetry.otlp.views` for OTLP exports, the `/healthz` check) asks `database_fault`,
so an error is never classified two ways. Both faults answer 503 with `Retry-After`: a full
disk is not the client's fault and clears when an operator frees space, and 503 is what OTLP
exporters and the bundled reporting client retry (a 507 would make them drop the batch).

Answers never carry the driver's text: PostgreSQL's disk-full message names the server's data
file (`could not extend file "base/16384/…"`), SQLite's the database file. `public_text` is
the one wording of a database error that may leave the server; the full text goes to the log.

A full disk is also remembered for `DATABASE_FULL_HEALTH_SECONDS` in the shared cache (every
web process sees it; during a cache outage, this process's own memory), so `/healthz` reports
unhealthy while writes fail even though its read-only `SELECT 1` still works.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Literal

from django.conf import settings
from django.db import InterfaceError, OperationalError

from telemetry import shared_cache

log = logging.getLogger(__name__)

Fault = Literal["full", "unavailable"]

# SQLSTATE class 53 "insufficient resources": disk_full, the class itself, out_of_memory. Its
# other members (too_many_connections, configuration_limit_exceeded) are a server that cannot
# take this connection now: `unavailable`, like a server that is down.
_FULL_SQLSTATES = frozenset({"53100", "53000", "53200"})
_OUT_OF_MEMORY_SQLSTATES = frozenset({"53000", "53200"})

UNAVAILABLE_RETRY_AFTER_SECONDS = 5
# Space comes back when an operator frees it: ask clients to wait longer than for a restart.
FULL_RETRY_AFTER_SECONDS = 30

_FULL_KEY = "database-full-at"


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's exception behind Django's wrapper (Django sets it as `__cause__`)."""
    cause = exc.__cause__
    return cause if cause is not None else exc


def database_fault(exc: BaseException) -> Fault | None:
    """`full` for PostgreSQL SQLSTATE 53100/53000/53200 and SQLite's SQLITE_FULL; `unavailable`
    for any other operational or interface error (a connection that failed or broke); None for
    everything else (an integrity error, a bug: not this module's to answer)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return None
    driver = _driver_error(exc)
    if getattr(driver, "sqlstate", None) in _FULL_SQLSTATES:
        return "full"
    if isinstance(driver, sqlite3.Error) and (
        getattr(driver, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
        or "database or disk is full" in str(driver)
    ):
        return "full"
    return "unavailable"


def full_detail(exc: BaseException | None = None) -> str:
    """The words for a full database; out of memory is named as such (no path, no driver text)."""
    if (
        exc is not None
        and getattr(_driver_error(exc), "sqlstate", None) in _OUT_OF_MEMORY_SQLSTATES
    ):
        return "the database has run out of memory or other resources"
    return "the database has no space left"


def public_text(exc: BaseException) -> str:
    """A failure's text as an answer or a stored run may show it: for a database error, its
    meaning and class (never the driver's message, which names server files); else
    `Type: message`."""
    fault = database_fault(exc)
    if fault == "full":
        return f"{type(exc).__name__}: {full_detail(exc)}"
    if fault == "unavailable":
        return f"{type(exc).__name__}: the database is not answering"
    return f"{type(exc).__name__}: {exc}"


def note_fault(exc: BaseException, where: str) -> Fault | None:
    """Classify `exc`, log its full text (server side only), and remember a full database."""
    fault = database_fault(exc)
    if fault == "full":
        log.error("database full on %s: %s", where, exc)
        remember_full()
    elif fault == "unavailable":
        log.warning("database unavailable on %s: %s", where, exc)
    return fault


def remember_full() -> None:
    """Record now as the latest disk-full refusal, for every process that reads the cache."""
    hold = int(settings.DATABASE_FULL_HEALTH_SECONDS)
    if hold <= 0:
        return
    now = time.time()
    shared_cache.with_fallback(
        lambda cache: cache.set(_FULL_KEY, now, hold),
        lambda cache: cache.set(_FULL_KEY, now, hold),
    )


def full_seconds_ago() -> float | None:
    """Seconds since the last disk-full refusal within `DATABASE_FULL_HEALTH_SECONDS`; else None."""
    hold = int(settings.DATABASE_FULL_HEALTH_SECONDS)
    if hold <= 0:
        return None
    at = shared_cache.with_fallback(
        lambda cache: cache.get(_FULL_KEY), lambda cache: cache.get(_FULL_KEY)
    )
    if not isinstance(at, int | float):
        return None
    ago = max(0.0, time.time() - float(at))
    return ago if ago <= hold else None


def forget_full() -> None:
    """Clear the memory of a full disk (an operator freed space and wants the check green now)."""
    shared_cache.with_fallback(
        lambda cache: cache.delete(_FULL_KEY), lambda cache: cache.delete(_FULL_KEY)
    )
