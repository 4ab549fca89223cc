"""Read a JSONL file line by line from a byte offset, in bounded memory.

The framing (a cap on a line's length, the byte order mark, the unterminated last line) is
`context_core.line_framing`; this module feeds it from a file. A file being written may end in
a partial line: `read_frames` leaves it as the framer's tail, and its caller decides whether
the writer is done with it (an import that is `final`) or it waits for its newline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from compaction.imports.records import Skipped
from context_core.line_framing import (
    DEFAULT_MAX_LINE_BYTES,
    Frame,
    FramerState,
    LineFramer,
    Overlong,
)
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


def as_line(frame: Frame) -> Line:
    """Invalid UTF-8 is decoded with replacement characters (the parser then reports the line
    if it is not JSON)."""
    return Line(frame.number, frame.start, frame.end, frame.data.decode("utf-8", "replace"))


def read_frames(
    handle: BinaryIO, framer: LineFramer, *, end: int | None = None, budget: int | None = None
) -> Iterator[Frame | Overlong]:
    """Feed `framer` from `handle` at its position up to byte `end` (None: the end of the file)
    and yield what it frames; stop early once `budget` bytes were read. Memory: one chunk plus
    the framer's cap. The handle's position may move between yields (a caller digesting the
    prefix); each read seeks first."""
    began = framer.read_to
    while True:
        at = framer.read_to
        size = CHUNK if end is None else min(CHUNK, end - at)
        if size <= 0 or (budget is not None and at - began >= budget):
            return
        handle.seek(at)
        chunk = handle.read(size)
        if not chunk:
            return
        yield from framer.feed(chunk)


def read_lines(
    handle: BinaryIO,
    *,
    offset: int = 0,
    first_line: int = 1,
    partial: list[Partial] | None = None,
    max_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[Line]:
    """Yield the complete lines after `offset` (over-long ones left out), then an unterminated
    last line when it is complete JSON; otherwise it is appended to `partial` when a list is
    given."""
    framer = LineFramer(max_bytes=max_bytes, state=FramerState(offset, first_line))
    for frame in read_frames(handle, framer):
        if isinstance(frame, Frame):
            yield as_line(frame)
    tail = framer.tail()
    if tail is None or not tail.data.strip():
        return
    line = as_line(tail)
    if complete_json(line.text):
        yield line
    elif partial is not None:
        partial.append(Partial(tail.number, tail.start, tail.end - tail.start))


def complete_json(text: str) -> bool:
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
