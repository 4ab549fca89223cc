"""Find the exact source text of top-level members and array elements of a JSON document.

`json.loads` keeps values but not their bytes; the transcript log promises every original byte
of each message (escapes such as `\\u0000` included), so the append endpoint slices each message's
own text out of the request body with `json.JSONDecoder.raw_decode`, which reports where a value
ends. Pure; O(len(text)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


@dataclass(frozen=True, slots=True)
class Span:
    value: Any
    text: str


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != char:
        raise json.JSONDecodeError(f"Expecting '{char}'", text, pos)
    return pos + 1


def object_members(text: str) -> dict[str, Span]:
    """The members of the top-level JSON object, each with its value's exact source text.

    Raises json.JSONDecodeError on malformed JSON or a top level that is not an object.
    """
    members: dict[str, Span] = {}
    pos = _expect(text, 0, "{")
    pos = _skip(text, pos)
    if pos < len(text) and text[pos] == "}":
        _end(text, pos + 1)
        return members
    while True:
        pos = _skip(text, pos)
        if pos >= len(text) or text[pos] != '"':
            raise json.JSONDecodeError(
                "Expecting property name enclosed in double quotes", text, pos
            )
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _expect(text, pos, ":")
        start = _skip(text, pos)
        value, pos = _DECODER.raw_decode(text, start)
        members[key] = Span(value, text[start:pos])
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        pos = _expect(text, pos, "}")
        _end(text, pos)
        return members


def array_elements(text: str) -> list[Span]:
    """The elements of a JSON array given as its exact source text."""
    elements: list[Span] = []
    pos = _expect(text, 0, "[")
    pos = _skip(text, pos)
    if pos < len(text) and text[pos] == "]":
        return elements
    while True:
        start = _skip(text, pos)
        value, pos = _DECODER.raw_decode(text, start)
        elements.append(Span(value, text[start:pos]))
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        _expect(text, pos, "]")
        return elements


def _end(text: str, pos: int) -> None:
    if _skip(text, pos) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, pos))
