"""What a saved view of the sessions list may be: its name and the query it keeps (pure).

A saved view is the list's query string under a name of the operator's choosing. The query is
kept as the list reads it, without `page` (a view opens on its first page) and without blank
values; its parameters are the list's own, read by the same code when the view is applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlencode

from telemetry.errors import FieldError

NAME_CHARS: Final = 60
QUERY_CHARS: Final = 2000
MAX_VIEWS_PER_USER: Final = 50
# what a view never keeps: the page it was on, and a form's CSRF token
DROPPED: Final = frozenset({"page", "csrfmiddlewaretoken"})
_SPACE: Final = re.compile(r"\s+")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def view_name(text: str) -> str:
    """The name `text` gives a view: space runs as one space, trimmed. Raises `FieldError` on
    `name` when it is empty, longer than `NAME_CHARS` or holds a control character."""
    name = _SPACE.sub(" ", text).strip()
    if _CONTROL.search(name):
        raise FieldError("name", "must not hold control characters")
    if not name:
        raise FieldError("name", "is required")
    if len(name) > NAME_CHARS:
        raise FieldError("name", f"must be at most {NAME_CHARS} characters")
    return name


def saved_query(pairs: Iterable[tuple[str, str]]) -> str:
    """The query a view keeps of the list's query `pairs` (in their order): without `page`,
    the CSRF token and blank values. Raises `FieldError` on `query` past `QUERY_CHARS`."""
    kept = [(k, v) for k, v in pairs if k not in DROPPED and v.strip() and k.strip()]
    query = urlencode(kept)
    if len(query) > QUERY_CHARS:
        raise FieldError("query", f"must be at most {QUERY_CHARS} characters")
    return query
