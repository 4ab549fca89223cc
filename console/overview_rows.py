"""The overview's table rows and list links as HTML, written in Python rather than in the template.

The overview draws a row per bucket of its period (a month in days, a day in hours), its top
sessions and a row per profile with a link per pressure band, on every load and every 30-second
refresh. Through the template engine each cell is a variable lookup, filters, autoescaping and
localisation, and each link a `{% url %}` and a query tag: that was more CPU than the rest of
the page's rendering. The markup is the former template's, byte for byte:
`tests/db/test_overview_rows.py` renders that template beside these for every kind of row.
As in `console.session_rows`, the standard library's `html.escape` is what Django's `escape`
calls, without its lazy-string wrapper; a time, a count, dollars and a percentage (`minute`,
`tokens`, `money`, `percent`) are digits and punctuation with nothing to escape, and go in as
they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, tzinfo
from functools import lru_cache
from html import escape
from urllib.parse import quote

from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import get_current_timezone, localtime

from console.overview import Bucket, ProfileLine
from console.periods import Period
from console.session_rows import truncated
from console.templatetags.console_format import (
    band_badge,
    money,
    percent,
    period_query,
    tokens,
    unpriced_note,
)
from telemetry.models import AgentSession
from telemetry.pressure import PressureBand


def _safe(html: str) -> SafeString:
    return mark_safe(html)  # noqa: S308 (every value in it was escaped or is a number)


def minute(at: datetime | None, zone: tzinfo | None = None) -> str:
    """`at` as the template's `date:"Y-m-d H:i"|default:"—"` wrote it, in the current time
    zone (`zone`: that zone, looked up once by a caller writing many)."""
    if at is None:
        return "—"
    local = localtime(at, zone)
    return f"{local.year:04d}-{local.month:02d}-{local.day:02d} {local.hour:02d}:{local.minute:02d}"


def band_link(period: Period, band: str, profile: str, sessions_url: str) -> str:
    """The sessions list of the sessions of `profile` (every profile when "") active in
    `period` whose pressure is in `band` now. A preset period as the list's own `seen` filter,
    so the list keeps it; another period by its bounds. Unescaped: an attribute escapes it."""
    if not period.preset:
        return f"{sessions_url}?{period_query(period, band=band, profile=profile)}"
    query = f"band={band}&seen={period.preset}"
    return (
        f"{sessions_url}?{query}&profile={quote(profile)}" if profile else f"{sessions_url}?{query}"
    )


def profile_sessions_link(period: Period, profile: str, sessions_url: str) -> str:
    """The sessions list of the sessions of `profile` active in `period` (as `band_link`)."""
    if not period.preset:
        return f"{sessions_url}?{period_query(period, profile=profile)}"
    return f"{sessions_url}?seen={period.preset}&profile={quote(profile)}"


def bucket_rows(buckets: Iterable[Bucket], links: Iterable[str]) -> list[SafeString]:
    """The `<tr>` of each bucket: its start (local), calls, spend, saved, cache hit and the link
    to its sessions (`links`, one a bucket)."""
    rows = []
    zone = get_current_timezone()
    for bucket, link in zip(buckets, links, strict=True):
        when = minute(bucket.start, zone)
        rows.append(
            _safe(
                f'<tr><td>{when}</td><td class="num">{tokens(bucket.calls)}</td>'
                f'<td class="num">{money(bucket.cost)}</td>'
                f'<td class="num">{money(bucket.saved)}</td>'
                f'<td class="num">{percent(bucket.hit, 1)}</td>'
                f'<td><a href="{escape(link)}" class="drill">the sessions of {when}</a></td></tr>'
            )
        )
    return rows


def table_body(rows: Iterable[SafeString], indent: str) -> SafeString:
    """`rows` as a template's `{% for row in rows %}` loop of `\n{indent}{{ row }}\n{indent}`
    writes them: a page of many rows places them at once, not a row at a time."""
    return _safe("".join(f"\n{indent}{row}\n{indent}" for row in rows))


def _session_cell(session: AgentSession) -> str:
    href = _session_href(get_script_prefix(), get_urlconf(), session.pk)
    return (
        f'<td><a href="{href}" class="mono">{escape(truncated(session.external_id, 32))}</a></td>'
        f"<td>{escape(session.profile.name)}</td>"
    )


@lru_cache(maxsize=1024)
def _session_href(prefix: str, urlconf: str | None, pk: int) -> str:
    """The session page's address, escaped: reversed once for a session drawn on every refresh
    (the address depends on the script prefix and URLconf `reverse` reads, and the pk)."""
    return escape(reverse("session", args=[pk]))


def top_cost_rows(sessions: Iterable[AgentSession]) -> list[SafeString]:
    """The `<tr>` of each top session by cost: id (linked), profile, cost, last seen."""
    zone = get_current_timezone()
    return [
        _safe(
            f'<tr>{_session_cell(s)}<td class="num">{money(s.cost_usd)}</td>'
            f'<td class="small">{minute(s.last_seen_at, zone)}</td></tr>'
        )
        for s in sessions
    ]


def top_pressure_rows(
    pairs: Iterable[tuple[AgentSession, PressureBand]],
) -> list[SafeString]:
    """The `<tr>` of each top session by pressure: id (linked), profile, band badge, last
    seen."""
    zone = get_current_timezone()
    return [
        _safe(
            f"<tr>{_session_cell(s)}<td>{band_badge(band, s.pressure, None, 0)}</td>"
            f'<td class="small">{minute(s.last_seen_at, zone)}</td></tr>'
        )
        for s, band in pairs
    ]


def profile_rows(
    lines: Iterable[ProfileLine], period: Period, sessions_url: str
) -> list[SafeString]:
    """The `<tr>` of each profile: its name (the overview of it), calls, spend (with the
    unpriced note), saved, cache hit, its sessions in each band now (linked when any) and the
    link to all of its sessions."""
    rows = []
    for line in lines:
        name = line.name
        bands = "".join(
            f'<td class="num"><a href="{escape(band_link(period, band, name, sessions_url))}">'
            f"{n}</a></td>"
            if n
            else '<td class="num">0</td>'
            for band, n in line.bands.items()
        )
        rows.append(
            _safe(
                f'<tr><td><a href="?{escape(period_query(period, profile=name))}">{escape(name)}</a>'
                f'</td><td class="num">{tokens(line.calls)}</td>'
                f'<td class="num">{money(line.cost)}{unpriced_note(line.unpriced)}</td>'
                f'<td class="num">{money(line.saved)}</td>'
                f'<td class="num">{percent(line.hit, 1)}</td>\n      {bands}\n      '
                f'<td><a href="{escape(profile_sessions_link(period, name, sessions_url))}">'
                "its sessions</a></td></tr>"
            )
        )
    return rows
