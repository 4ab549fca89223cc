"""Log retention (issue 35): which transcript messages may lose their text, and what stands in
for one that has.

The log is append-only and its hash chain runs through every message, so retention never
deletes a message: it removes the text of one the surface no longer shows (`hidden_seqs`) once
an archive holds that text, and keeps its seq, role, format and digest. Loaded from storage,
such a message is `removed_message`: no content, never on the surface, so `derive_surface`
gives the same bytes before and after.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from context_core.messages import Format, Message, Role
from context_core.operations import Operation
from context_core.surface import hidden_seqs


def removed_message(*, seq: int, role: str, format: Format) -> Message:
    """The stand-in of a log message whose text retention removed: its seq, role and format and
    no content. Never shown: only messages the surface hides lose their text."""
    return Message(role=cast(Role, role), blocks=(), seq=seq, format=format)


def is_removed(message: Message) -> bool:
    """A `removed_message` (a parsed message always keeps its text in `raw`; a summary of ours
    has content)."""
    return not message.blocks and not message.raw


def removable_seqs(
    rows: Iterable[tuple[int, str]], operations: Iterable[Operation], *, archived: int
) -> tuple[int, ...]:
    """Of stored log rows `(seq, role)` in seq order, the seqs whose text retention may remove
    now: hidden from the surface of `operations` (`hidden_seqs`, which reads only a stored
    message's seq and role, so no text is parsed), and held by an archive of the log's first
    `archived` messages (seq < archived). Any sub-list of the rows gives the same answer for
    each of its rows, so a job can look at the old rows only.
    """
    stand_ins = [removed_message(seq=seq, role=role, format="anthropic") for seq, role in rows]
    return tuple(seq for seq in hidden_seqs(stand_ins, operations) if seq < archived)
