"""Prefix fingerprints of a surface (D1): one hash and token estimate per segment, in order.

Standard library only. The segments are the leading system prompt (`system`, when the surface
has one) and then one per message (`message 0`, `message 1`, … counted after the system
prompt), the same shape an agent reports in a telemetry record's `prefix` (the tools segment is
the agent's to report: the log never holds tool schemas). Two requests' prefixes first differ at
the segment that broke the prompt cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from context_core.messages import Format, Message, ToolResult
from context_core.surface import Surface, canonical_json
from context_core.tokens import estimate_tokens

HASH_CHARS = 16


@dataclass(frozen=True, slots=True)
class SegmentPrint:
    """One segment: its name, a content hash, a chars//4 token estimate, and its readable text
    (text blocks and tool-result text, when asked for)."""

    name: str
    hash: str
    tokens: int
    text: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "hash": self.hash, "tokens": self.tokens}
        if self.text is not None:
            out["text"] = self.text
        return out


def readable_text(message: Message) -> str:
    """The message's text and its tool results' text, one block a paragraph."""
    parts = [message.text] if message.text else []
    parts.extend(b.text for b in message.blocks if isinstance(b, ToolResult))
    return "\n".join(parts)


def surface_fingerprints(
    surface: Surface | Sequence[Message], *, format: Format | None = None, with_text: bool = False
) -> tuple[SegmentPrint, ...]:
    """The fingerprints of a surface, in order. Same messages ⇒ same fingerprints (the hash is
    of each message's canonical JSON in `format`, the surface's own by default)."""
    items = surface.messages if isinstance(surface, Surface) else tuple(surface)
    fmt: Format = format or (items[0].format if items else "anthropic")
    prints: list[SegmentPrint] = []
    index = 0
    for position, message in enumerate(items):
        leading_system = message.role == "system" and position == 0
        name = "system" if leading_system else f"message {index}"
        if not leading_system:
            index += 1
        digest = hashlib.sha256(canonical_json((message,), format=fmt)).hexdigest()[:HASH_CHARS]
        prints.append(
            SegmentPrint(
                name=name,
                hash=digest,
                tokens=estimate_tokens(message.chars),
                text=readable_text(message) if with_text else None,
            )
        )
    return tuple(prints)
