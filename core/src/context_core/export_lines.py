"""The line format of a session export: JSON lines (JSONL), one stored row a line, versioned.

Every line is one JSON object: the format version `v`, the row's `kind`, and `row`, the row's
stored values under their column names. A `session` line opens a session; every other line
belongs to the session line before it, so a file of many sessions streams in and out one row at
a time (constant memory). Within a session the kinds come in `KINDS` order: a context event
after the calls it names, an operation after the run it names.

Values are plain JSON: integers, strings, booleans, null, objects and arrays as stored;
decimals (money) as their exact decimal string; times as ISO 8601 with their offset. The
importer turns them back with each column's own type, so a decimal is never a float.

Format versions: 1 holds the stored rows; 2 adds `SESSION_TAGS` (`tags`) to a session line's
row: the session's operator tags, sorted (not a column: the rows of `telemetry.SessionTag`). A
reader of version 2 reads version 1 lines too (a session line without `tags` restores no tags).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final

FORMAT_VERSION: Final = 2
# the versions this reader reads: every one up to its own
READ_VERSIONS: Final = tuple(range(1, FORMAT_VERSION + 1))

SESSION_TAGS: Final = "tags"

SESSION: Final = "session"
# A session's rows in the order they are written and must be read.
KINDS: Final = (
    SESSION,
    "turn_key",
    "call",
    "turn",
    "context_event",
    "log",
    "surface_version",
    "surface",
    "run",
    "operation",
)


class ExportLineError(ValueError):
    """A line that is not a row of this format; `line` is its 1-based number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class ExportLine:
    """One decoded line: its number in the file, its kind and the row's values by column."""

    number: int
    kind: str
    record: Mapping[str, Any]


def plain(value: Any) -> Any:
    """`value` as JSON can hold it without loss: a Decimal as its exact fixed-point string
    (never an exponent), a time as ISO 8601 (with its offset). Other values are returned as they
    are. Money reaches here already written by the caller's money rule (the console's session
    export writes it with `telemetry.money.money_text`, as its API does)."""
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def encode_line(kind: str, record: Mapping[str, Any]) -> str:
    """One line (newline included) holding `record` as a row of `kind`.

    Keys keep `record`'s order, so the same row always gives the same bytes. Raises ValueError
    for an unknown kind or a value JSON cannot hold (NaN)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    line = {"v": FORMAT_VERSION, "kind": kind, "row": {k: plain(v) for k, v in record.items()}}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


def decode_line(text: str, number: int) -> ExportLine:
    """The row on line `number`. Raises ExportLineError naming the line when it is not JSON, not
    an object, of a format version not in `READ_VERSIONS`, of an unknown kind or without a `row` object.

    Inverse of `encode_line`: `decode_line(encode_line(k, r), n).record == plain(r)` per value."""
    try:
        line = json.loads(text)
    except ValueError as exc:
        raise ExportLineError(number, f"not JSON ({exc})") from None
    if not isinstance(line, dict):
        raise ExportLineError(number, "a line must be a JSON object")
    version = line.get("v")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise ExportLineError(
            number,
            f"format version {version!r} is not one this reader reads (v: 1 to {FORMAT_VERSION})",
        )
    kind = line.get("kind")
    if kind not in KINDS:
        raise ExportLineError(number, f"unknown kind {kind!r} (kind: one of {', '.join(KINDS)})")
    row = line.get("row")
    if not isinstance(row, dict):
        raise ExportLineError(number, "row: must be an object (the row's values by column)")
    return ExportLine(number=number, kind=kind, record=row)


def opens_session(line: ExportLine) -> bool:
    """True for a line that starts a new session: the rows after it are that session's."""
    return line.kind == SESSION


def check_order(previous: str | None, line: ExportLine) -> None:
    """Raise ExportLineError unless `line` may follow a line of kind `previous` (None: the
    file's first line) in one session: a session line first, then kinds in `KINDS` order."""
    if line.kind == SESSION:
        return
    if previous is None:
        raise ExportLineError(line.number, f"a {line.kind} line before any session line")
    if KINDS.index(line.kind) < KINDS.index(previous):
        raise ExportLineError(line.number, f"a {line.kind} line after {previous} lines")
