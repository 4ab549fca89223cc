"""Operator tags on sessions: what a tag may be, written once.

Pure (no Django). A tag is what an operator types, normalised: surrounding space dropped,
lower case, inner runs of space as one `-` ("Needs Review" → "needs-review"). A normalised tag
is 1-`TAG_CHARS` characters of letters, digits and `-_.:/`, starting with a letter or a digit,
so it reads the same in a URL, a CSV cell and a filter. A session holds at most
`MAX_TAGS_PER_SESSION` tags (`telemetry.session_tags` stores them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from telemetry.errors import FieldError

TAG_CHARS: Final = 40
MAX_TAGS_PER_SESSION: Final = 20
# what one add may name at once (the form's input and the API's body)
MAX_TAGS_PER_CHANGE: Final = MAX_TAGS_PER_SESSION
TAG_PATTERN: Final = rf"^[a-z0-9][a-z0-9_.:/-]{{0,{TAG_CHARS - 1}}}$"
_TAG: Final = re.compile(TAG_PATTERN)
_SPACE: Final = re.compile(r"\s+")
# what separates tags typed into one input: commas (spaces are part of a tag, see `normalise`)
_SEPARATOR: Final = re.compile(r",")
TAG_HELP: Final = (
    f"up to {TAG_CHARS} letters, digits or -_.:/ each, starting with a letter or digit; "
    f"at most {MAX_TAGS_PER_SESSION} per session"
)


class TagError(FieldError):
    """A tag or a set of tags that cannot be kept, refused on the field `tags` (422)."""

    def __init__(self, message: str) -> None:
        super().__init__("tags", message)


def normalise(text: str) -> str:
    """The tag `text` stands for: stripped, lower case, inner space runs as one `-`. Idempotent.

    Not yet checked: `tag_problem` says whether the result is a tag."""
    return _SPACE.sub("-", text.strip().lower())


def tag_problem(tag: str) -> str | None:
    """Why the normalised `tag` is not a tag, or None."""
    if not tag:
        return "is empty"
    if len(tag) > TAG_CHARS:
        return f"{tag[:TAG_CHARS]}…: must be at most {TAG_CHARS} characters"
    if not _TAG.match(tag):
        return f"{tag!r} must be letters, digits or -_.:/, starting with a letter or digit"
    return None


def parse_tags(texts: Iterable[str]) -> tuple[str, ...]:
    """The tags named by `texts` (each may hold several, comma-separated), normalised, in first
    order, each once. Raises `TagError` naming the first bad one, or when there are more than
    `MAX_TAGS_PER_CHANGE`. Blank pieces (",,", a trailing comma) are skipped."""
    found: dict[str, None] = {}
    for text in texts:
        for piece in _SEPARATOR.split(text):
            tag = normalise(piece)
            if not tag:
                continue
            problem = tag_problem(tag)
            if problem is not None:
                raise TagError(problem)
            found[tag] = None
            if len(found) > MAX_TAGS_PER_CHANGE:
                raise TagError(f"at most {MAX_TAGS_PER_CHANGE} tags at once")
    return tuple(found)


def tags_after_adding(held: Iterable[str], added: Iterable[str]) -> tuple[str, ...]:
    """The session's tags once `added` are added to `held`, sorted. Raises `TagError` when
    that is more than `MAX_TAGS_PER_SESSION` (then nothing is added)."""
    result = sorted({*held, *added})
    if len(result) > MAX_TAGS_PER_SESSION:
        raise TagError(f"a session holds at most {MAX_TAGS_PER_SESSION} tags")
    return tuple(result)
