"""Read a JSONL file line by line from a byte offset, in bounded memory.

A file being written may end in a partial line: a last line without its newline is returned
only when it is complete JSON (a writer that never ends the file with a newline), otherwise it is
left for the next read, so an interrupted write is never imported half.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from compaction.imports.records import Skipped
from telemetry import safejson
from telemetry.errors import FieldError

CHUNK = 1 << 20
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 4 * 1024


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based
    start: int  # byte offset of the line
    end: int  # byte offset after it (and its newline)
    text: str


@dataclass(frozen=True, slots=True)
class Partial:
    """A last line without its newline that is not complete JSON (yet)."""

    number: int
    start: int
    size: int


def read_lines(
    handle: BinaryIO, *, offset: int = 0, first_line: int = 1, partial: list[Partial] | None = None
) -> Iterator[Line]:
    """Yield the complete lines after `offset`. Memory: one chunk plus the longest line.

    Invalid UTF-8 is decoded with replacement characters (the parser then reports the line if it
    is not JSON). A trailing partial line is appended to `partial` when a list is given.
    """
    handle.seek(offset)
    number = first_line
    position = offset
    pending = b""
    while True:
        chunk = handle.read(CHUNK)
        if not chunk:
            break
        pending += chunk
        start = 0
        while True:
            newline = pending.find(b"\n", start)
            if newline < 0:
                break
            raw = pending[start:newline]
            end = position + newline + 1
            yield Line(number, position + start, end, raw.decode("utf-8", "replace").rstrip("\r"))
            number += 1
            start = newline + 1
        position += start
        pending = pending[start:]
    if pending.strip():
        text = pending.decode("utf-8", "replace")
        if _complete_json(text):
            yield Line(number, position, position + len(pending), text)
        elif partial is not None:
            partial.append(Partial(number, position, len(pending)))


def _complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def prefix_digest(handle: BinaryIO, offset: int) -> tuple[str, str]:
    """SHA-256 of the file's first 64 KiB and of the 4 KiB before `offset` (both within the
    part already imported): a rewritten or replaced file changes one of them. Leaves the
    handle's position where it was (a reader may be iterating it)."""
    position = handle.tell()
    head_size = min(offset, HEAD_BYTES)
    handle.seek(0)
    head = hashlib.sha256(handle.read(head_size)).hexdigest()
    tail_start = max(0, offset - TAIL_BYTES)
    handle.seek(tail_start)
    tail = hashlib.sha256(handle.read(offset - tail_start)).hexdigest()
    handle.seek(position)
    return head, tail


def line_object(number: int, text: str) -> dict[str, Any] | Skipped | None:
    """Line `number` of a JSONL transcript as its JSON object; None for a blank line; else a
    `Skipped` record saying why it is not one, so a parser skips it and goes on."""
    if not text.strip():
        return None
    try:
        obj = safejson.loads(text)
    except FieldError as exc:
        # the one JSON rule of every door (issue 16): a lone surrogate, NaN or a value too deep
        # would poison the session's log; the line is skipped like a malformed one
        return Skipped(number, f"refused by the JSON rule ({exc})")
    except ValueError as exc:
        return Skipped(number, f"not valid JSON ({exc})")
    if not isinstance(obj, dict):
        return Skipped(number, "not a JSON object")
    return obj
