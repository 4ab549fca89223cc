"""Opaque cursors for keyset paging: the sort keys of the last row a page ended at.

A page read "after" a cursor asks for the rows that sort after that row, not for rows at an
offset, so rows inserted meanwhile (a new session, a new compaction) neither repeat a row nor
skip one. The cursor carries the values of the last row's sort keys and a `scope`: a digest
of the sort and filters it was issued for, so it cannot be replayed against another order.

Standard library only (the unit suite imports this with `-p no:django`). A cursor is not
secret and needs no signature: whatever it says, the page is still read with the caller's
own filters and profile; it only has to refuse, never crash on, text it did not write.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Final

# A sort key's value as a cursor holds it: what the database gave for the last row.
Key = None | bool | int | float | str | Decimal | datetime

MAX_CURSOR_CHARS: Final = 2000


class CursorError(ValueError):
    """The text is not a cursor this API wrote for this sort and these filters."""


@dataclass(frozen=True)
class Cursor:
    scope: str
    keys: tuple[Key, ...]


def cursor_scope(*parts: object) -> str:
    """A short digest of what a cursor is valid for (the sort and the filters)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _tagged(value: Key) -> list[object]:
    # bool before int: a bool is an int to isinstance
    if value is None:
        return ["n"]
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a cursor key must be finite, got {value!r}")
        return ["f", repr(value)]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"a cursor key must be finite, got {value!r}")
        return ["d", str(value)]
    if value.tzinfo is None:
        raise ValueError("a cursor key time must be aware")
    return ["t", value.isoformat()]


def _untagged(item: object) -> Key:
    if not isinstance(item, list) or not item or not isinstance(item[0], str):
        raise CursorError("holds a key that is not tagged")
    tag, *rest = item
    if tag == "n" and not rest:
        return None
    if len(rest) != 1:
        raise CursorError("holds a key of the wrong shape")
    (text,) = rest
    if tag == "b" and isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise CursorError("holds a key of the wrong shape")
    try:
        if tag == "i":
            return int(text)
        if tag == "f":
            number = float(text)
            if not math.isfinite(number):
                raise CursorError("holds a number that is not finite")
            return number
        if tag == "s":
            return text
        if tag == "d":
            amount = Decimal(text)
            if not amount.is_finite():
                raise CursorError("holds a number that is not finite")
            return amount
        if tag == "t":
            at = datetime.fromisoformat(text)
            if at.tzinfo is None:
                raise CursorError("holds a time without its offset")
            return at
    except (ValueError, InvalidOperation):
        raise CursorError("holds a key that does not parse") from None
    raise CursorError("holds a key of an unknown kind")


def encode_cursor(cursor: Cursor) -> str:
    """`cursor` as URL-safe text (base64url of compact JSON, unpadded).

    Invariant: `decode_cursor(encode_cursor(c), scope=c.scope, keys=len(c.keys)) == c`.
    """
    document = [cursor.scope, [_tagged(key) for key in cursor.keys]]
    raw = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(text: str, *, scope: str, keys: int) -> Cursor:
    """The cursor `text` encodes, issued for `scope` with `keys` sort keys.

    Raises `CursorError` (only) for anything else: text it did not write, a cursor of another
    sort or other filters, or one with another number of keys.
    """
    if len(text) > MAX_CURSOR_CHARS:
        raise CursorError(f"is over {MAX_CURSOR_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        document = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise CursorError("is not a cursor this API wrote") from None
    if (
        not isinstance(document, list)
        or len(document) != 2
        or not isinstance(document[0], str)
        or not isinstance(document[1], list)
    ):
        raise CursorError("is not a cursor this API wrote")
    if document[0] != scope:
        raise CursorError(
            "was issued for another sort or other filters; start again without a cursor"
        )
    if len(document[1]) != keys:
        raise CursorError("is not a cursor this API wrote")
    return Cursor(scope, tuple(_untagged(item) for item in document[1]))
