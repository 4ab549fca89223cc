"""The archive search's presentation: snippets made safe HTML (only our own <mark> tags kept) and
the page of hits with the owning session's profile and the archive's time. Pure: no query."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from compaction.archives import SearchHit
from console.selectors.compaction import SEARCH_HITS, FoundHits


def safe_snippet(snippet: str) -> SafeString:
    """A search snippet as HTML: everything escaped except balanced <mark>…</mark> pairs.

    The database highlighter wraps hits in <mark> but escapes nothing else, and the archived
    text is whatever an agent sent (a `<script>` included)."""
    out: list[str] = []
    open_marks = 0
    for part in _MARK_TAG.split(snippet):
        if part == "<mark>":
            out.append(part)
            open_marks += 1
        elif part == "</mark>":
            if open_marks:
                out.append(part)
                open_marks -= 1
        else:
            # compaction.archives already escapes; unescape(escape(x)) == x, so escaping once
            # more shows the text exactly, and stays safe if a snippet ever arrives unescaped.
            out.append(escape(html.unescape(part)))
    out.append("</mark>" * open_marks)
    return mark_safe("".join(out))  # noqa: S308 (every other character was escaped above)


_MARK_TAG: Final = re.compile(r"(</?mark>)")


@dataclass(frozen=True)
class ShownHit:
    hit: SearchHit
    snippet: SafeString
    profile: str
    session_pk: int | None
    created_at: datetime | None


@dataclass(frozen=True)
class HitsPage:
    hits: list[ShownHit]
    number: int
    has_more: bool
    total: int = 0

    @property
    def first(self) -> int:
        return (self.number - 1) * SEARCH_HITS + 1

    @property
    def last(self) -> int:
        return self.first + len(self.hits) - 1


def hits_page(found: FoundHits) -> HitsPage:
    """The hits as the archives page lists them: snippets made safe, owners named."""
    shown = [
        ShownHit(
            hit,
            safe_snippet(hit.snippet),
            owner.profile.name if owner else "",
            owner.pk if owner else None,
            _parsed_time(hit.created_at),
        )
        for hit, owner in found.hits
    ]
    return HitsPage(shown, found.number, found.has_more, found.total)


def _parsed_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
