"""One row of the sessions list as HTML, written in Python rather than in the template.

The list draws 25 rows of ten cells on every load and every 10-second poll. Through the template
engine each cell is a variable lookup, filters, autoescaping and localisation, and each pressure
badge an include: that was as much CPU as the rest of the request (make bench, P5: the list
against a Django page of the same rows). The markup is the former template's, byte for byte —
`tests/db/test_session_rows.py` renders that template beside this for every kind of row.
The standard library's `html.escape` is what Django's `escape` calls, without its lazy-string
wrapper (the wrapper was a third of the rows' CPU).
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import quote

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.utils.timezone import localtime

from console.presenters.sessions import SessionRow, relief_flag
from console.templatetags.console_format import band_badge, money, percent, unpriced_note
from telemetry.models import AgentSession


def session_row(row: SessionRow) -> SafeString:
    """The `<tr>` of one session: id (linked), pressure badge (and the relief flag), profile,
    model, cache hit of the last turn and overall, cost, turns, rounds of the last turn (with
    the round flag), last seen."""
    session, policy = row.session, row.policy
    flag = ""
    if row.round_flag == "hard":
        flag = (
            ' <span class="flag hard" title="a turn reached the hard cap of '
            f'{policy.round_hard_cap} rounds">hard cap</span>'
        )
    elif row.round_flag == "soft":
        flag = (
            ' <span class="flag soft" title="a turn passed the soft limit of '
            f'{policy.round_soft_limit} rounds">soft limit</span>'
        )
    relief = ""
    if (shown := relief_flag(row.relief)) is not None:
        classes, text, title = shown
        if row.relief.failed_run is not None:
            # to the failed run on the session's page
            run = f"{reverse('session', args=[session.pk])}#run-{row.relief.failed_run}"
            relief = (
                f' <a href="{escape(run)}" class="{classes}" title="{escape(title)}">'
                f"{escape(text)}</a>"
            )
        else:
            relief = f' <span class="{classes}" title="{escape(title)}">{escape(text)}</span>'
    seen_iso, seen = _seen(session.last_seen_at)
    cells = (
        _name_cell(session, row.tags),
        f"<td>{band_badge(row.band, session.pressure, policy, 0)}{relief}\n</td>",
        f'<td class="wraps">{escape(session.profile.name)}</td>',
        f'<td class="mono small wraps">{escape(session.model or "—")}</td>',
        f'<td class="num">{escape(percent(session.last_turn_cache_hit_ratio))}</td>',
        f'<td class="num">{escape(percent(row.hit_ratio))}</td>',
        f'<td class="num">{escape(money(session.cost_usd))}{_unpriced(session)}</td>',
        f'<td class="num">{session.turns_count}</td>',
        f'<td class="num">{session.last_turn_rounds}{flag}</td>',
        f'<td class="small"><time datetime="{seen_iso}">{seen}</time></td>',
    )
    return mark_safe(  # noqa: S308 (every value in it was escaped or is a number)
        "<tr>\n        " + "\n        ".join(cells) + "\n      </tr>"
    )


def _unpriced(session: AgentSession) -> str:
    """The note of calls the cost leaves out; "" for the usual, fully priced session (no call)."""
    return unpriced_note(session.unpriced_calls) if session.unpriced_calls else ""


def truncated(text: str, length: int) -> str:
    """The template's `truncatechars`; ASCII that fits is returned as it is (nothing to
    normalise, nothing to cut), which is every id agents send in practice."""
    if len(text) <= length and text.isascii():
        return text
    return Truncator(text).chars(length)


def _seen(at: datetime | None) -> tuple[str, str]:
    """`at` as the template's `date:'c'` and `date:"Y-m-d H:i:s"|default:"—"` wrote it, in the
    current time zone."""
    if at is None:
        return "", "—"
    local = localtime(at)
    return (
        local.isoformat(),
        f"{local.year:04d}-{local.month:02d}-{local.day:02d} "
        f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}",
    )


def _name_cell(session: AgentSession, tags: tuple[str, ...] = ()) -> str:
    """The session's title linked, its id beside it; the id alone while it has no title. Its
    tags after, each a link to the list filtered by it."""
    href = escape(reverse("session", args=[session.pk]))
    short_id = escape(truncated(session.external_id, 40))
    chips = _tag_chips(tags)
    if not session.title:
        return f'<td class="name wraps"><a href="{href}" class="mono">{short_id}</a>{chips}</td>'
    return (
        f'<td class="name wraps"><a href="{href}" class="session-title">{escape(session.title)}</a>'
        f' <span class="mono small muted session-id">{short_id}</span>{chips}</td>'
    )


def _tag_chips(tags: tuple[str, ...]) -> str:
    """The session's tags as links to the list filtered by each; "" for none."""
    if not tags:
        return ""
    links = "".join(
        f'<a class="tag" href="?tag={quote(tag)}" title="sessions tagged {escape(tag)}">'
        f"{escape(tag)}</a>"
        for tag in tags
    )
    return f' <span class="tags">{links}</span>'
