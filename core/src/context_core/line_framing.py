"""JSONL lines out of a byte stream, with a cap on a line's length (pure: bytes in, frames out).

A transcript file is untrusted input of any size: a line may be gigabytes long (a sparse file
with no newline costs no disk), a file may start with a UTF-8 byte order mark, its last line
may still be being written. `LineFramer` takes the bytes in chunks and keeps at most
`max_bytes` plus one chunk in memory:

* a complete line of at most `max_bytes` bytes (its newline and a trailing CR left out) is a
  `Frame`; one longer is reported once as `Overlong` the moment it passes the cap, and its
  bytes are dropped up to its newline, never held;
* a UTF-8 BOM at the very start of the stream is not part of the first line;
* bytes after the last newline are the stream's `tail`: not consumed until the caller takes it
  (`take_tail`), so a reader of a growing file can wait for the newline.

`state()` is everything needed to resume at the same place in a later run (an import that
stopped): the byte position of the first unconsumed byte, the number of the next line, whether
an over-long line is being dropped, and whether the last run took an unterminated tail (so the
newline that completes it later does not count as an empty line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_LINE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Frame:
    """Line `number` (1-based) at bytes [start, end) of the stream; `data` without its newline,
    trailing CR, or a leading BOM. `terminated` is False for a tail taken without a newline."""

    number: int
    start: int
    end: int
    data: bytes
    terminated: bool = True


@dataclass(frozen=True, slots=True)
class Overlong:
    """Line `number`, starting at byte `start`, is longer than the cap: refused, not read."""

    number: int
    start: int


@dataclass(frozen=True, slots=True)
class FramerState:
    position: int = 0
    number: int = 1
    discarding: bool = False
    open_tail: bool = False


class LineFramer:
    """Split fed chunks into lines of at most `max_bytes` bytes (see the module docstring).

    Invariants: memory held is at most `max_bytes` bytes plus the chunk being fed; every byte
    fed belongs to exactly one frame, over-long line or the tail; line numbers count newlines
    (a blank line is a frame with empty data).
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_LINE_BYTES, state: FramerState) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.max_bytes = max_bytes
        self.position = state.position  # first byte not yet consumed (the tail's start)
        self.number = state.number
        self.discarding = state.discarding
        self.open_tail = state.open_tail
        self._pending = bytearray()

    @property
    def read_to(self) -> int:
        """The byte position after everything fed so far (where the next chunk starts)."""
        return self.position + len(self._pending)

    def state(self) -> FramerState:
        return FramerState(self.position, self.number, self.discarding, self.open_tail)

    def feed(self, chunk: bytes) -> list[Frame | Overlong]:
        """The lines completed or found over-long by `chunk`, in order."""
        out: list[Frame | Overlong] = []
        start, size = 0, len(chunk)
        if self.open_tail and size:
            # The last run took an unterminated last line whole; its newline is no new line.
            self.open_tail = False
            if chunk[:1] == b"\n":
                start = 1
                self.position += 1
        while start < size:
            newline = chunk.find(b"\n", start)
            if self.discarding:
                if newline < 0:
                    self.position += size - start
                    break
                self.position += newline + 1 - start
                self.number += 1
                self.discarding = False
                start = newline + 1
                continue
            if newline < 0:
                if len(self._pending) + size - start > self.max_bytes:
                    out.append(Overlong(self.number, self.position))
                    self.position += len(self._pending) + size - start
                    self._pending.clear()
                    self.discarding = True
                else:
                    self._pending += chunk[start:]
                break
            length = len(self._pending) + newline - start
            if length > self.max_bytes:
                out.append(Overlong(self.number, self.position))
            else:
                raw = bytes(self._pending) + chunk[start:newline]
                out.append(
                    Frame(self.number, self.position, self.position + length + 1, self._clean(raw))
                )
            self.position += length + 1
            self.number += 1
            self._pending.clear()
            start = newline + 1
        return out

    def tail(self) -> Frame | None:
        """The bytes after the last newline as an unterminated line (not consumed); None when
        there are none or an over-long line is being dropped."""
        if not self._pending:
            return None
        data = bytes(self._pending)
        return Frame(self.number, self.position, self.read_to, self._clean(data), False)

    def take_tail(self) -> Frame | None:
        """Consume the tail as the stream's last line (the writer is done with it)."""
        frame = self.tail()
        if frame is not None:
            self.position = frame.end
            self.number += 1
            self.open_tail = True
            self._pending.clear()
        return frame

    def _clean(self, raw: bytes) -> bytes:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if self.position == 0:
            raw = raw.removeprefix(BOM)
        return raw


def strip_bom(data: bytes) -> bytes:
    """`data` without a UTF-8 byte order mark at its start (the only place one means anything)."""
    return data.removeprefix(BOM)


def pass_order(names: Sequence[str], turn: int) -> list[str]:
    """The files of `--follow`'s pass number `turn`: every name once, starting `turn` places
    further along each pass (round robin), so no file is always served first.

    With a bounded amount read per file per pass, a file with new lines is served within one
    pass however much another file holds or keeps growing.
    """
    if not names:
        return []
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]
