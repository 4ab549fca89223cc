"""The one rule for JSON the service accepts, on every door (pure; standard library only).

Python's `json` accepts documents that the rest of the stack cannot keep: a lone UTF-16
surrogate escape (`"\\ud83d"`) decodes to a `str` that UTF-8 cannot encode, so archives,
PostgreSQL and the console fail on it later, long after the 201; `NaN`, `Infinity` and numbers
such as `1e999` are not JSON at all when served back; nesting thousands of levels deep raises
RecursionError in every recursive consumer; an integer literal over 4,300 digits raises
ValueError in `int()`. The rule: such a document is refused at the door with 422 naming the
field where it breaks, and nothing of the request is stored. Agents that split an emoji must
send the whole pair (or the UTF-8 character).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from telemetry.errors import FieldError

# Deeper than any transcript or usage object seen in practice; far below the interpreter's
# recursion limit, so recursive code further in (pydantic, canonical JSON) never meets it.
MAX_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")


def decode(text: str) -> Any:
    """`json.loads` that raises JSONDecodeError for malformed text and FieldError for text
    Python cannot decode safely; never RecursionError or a bare ValueError. See `check` for the
    rest of the rule."""
    return _decode(json.loads, text)


def loads(text: str) -> Any:
    """`decode`, then `check`: a value that keeps the whole rule."""
    value = decode(text)
    check(value)
    return value


def raw_decode(decoder: json.JSONDecoder, text: str, pos: int) -> tuple[Any, int]:
    """`decoder.raw_decode` with the same guarantees as `loads` for the decoding itself."""
    result: tuple[Any, int] = _decode(lambda t: decoder.raw_decode(t, pos), text)
    return result


def _decode(function: Any, text: str) -> Any:
    try:
        return function(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise FieldError("body", f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # int(): "Exceeds the limit (4300 digits) for integer string ..."
        raise FieldError("body", f"holds a number that cannot be read: {exc}") from None


def problem(value: Any, *, base: str = "") -> tuple[str, str] | None:
    """The first (field, message) that breaks the rule in a decoded value, or None.

    A value that keeps the rule is passed by `_keeps_rule` without naming a single path (most
    of this check's cost on a 1,000-record batch, make bench P1); anything else is walked
    again by `_first_problem`, which names the field. Neither can exhaust the stack.
    """
    if _keeps_rule(value, 1, True):
        return None
    return _first_problem(value, base=base)


def is_plain(value: Any) -> bool:
    """True when `value` keeps the rule and holds nothing but JSON's own types and no float:
    dicts with text keys, lists, text, integers, booleans and nulls (what `problem` passes
    without a walk that names fields, floats aside). Such a value's canonical JSON is the same
    from any encoder that sorts keys and escapes as `json.dumps` does
    (`telemetry.idempotency.payload_hash`); floats are left out because encoders spell an
    exponent differently (`1e+16` or `1e16`)."""
    return _keeps_rule(value, 1, False)


def _keeps_rule(item: Any, depth: int, floats: bool = True) -> bool:
    """True when `item` (a container at `depth`) surely keeps the rule; False when it may not,
    or holds anything but JSON's own types (or a float, unless `floats`). Recursion stops past
    `MAX_DEPTH`.

    The test of a child is written out twice, for a dict's values and a list's items, on
    purpose: a function call per scalar would cost this pass most of what it saves over the
    full walk (`_first_problem`) on every ingest's values. A string CPython knows to be ASCII
    (`isascii` reads a flag, it does not scan) holds no surrogate, so only the others are
    searched, which is most strings of most records."""
    kind = type(item)
    if kind is dict:
        if depth > MAX_DEPTH:
            return False
        for key, child in item.items():
            if type(key) is not str or not (key.isascii() or _SURROGATE.search(key) is None):
                return False
            child_kind = type(child)
            if child_kind is str:
                if not child.isascii() and _SURROGATE.search(child) is not None:
                    return False
            elif child_kind is int or child is None or child_kind is bool:
                continue
            elif not _keeps_rule(child, depth + 1, floats):
                return False
        return True
    if kind is list:
        if depth > MAX_DEPTH:
            return False
        for child in item:
            child_kind = type(child)
            if child_kind is str:
                if not child.isascii() and _SURROGATE.search(child) is not None:
                    return False
            elif child_kind is int or child is None or child_kind is bool:
                continue
            elif not _keeps_rule(child, depth + 1, floats):
                return False
        return True
    if kind is str:
        return item.isascii() or _SURROGATE.search(item) is None
    if kind is float:
        return floats and math.isfinite(item)
    return kind is int or item is None or kind is bool


def _first_problem(value: Any, *, base: str = "") -> tuple[str, str] | None:
    """`problem` by a full walk that names the field (iterative: a deep value cannot exhaust
    the stack while it is being checked)."""
    stack: list[tuple[Any, str, int]] = [(value, base, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return _name(path), _SURROGATE_MESSAGE
        elif isinstance(item, float):
            if not math.isfinite(item):
                return _name(path), "must be a finite number (NaN and Infinity are not JSON)"
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return _name(path), f"nests deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in reversed(list(item.items())):
                    if _SURROGATE.search(key):  # named with the escape, itself text
                        return _name(_join(path, ascii(key)[1:-1])), "key " + _SURROGATE_MESSAGE
                    child_path = _join(path, str(key))
                    stack.append((child, child_path, depth + 1))
            else:
                for index in range(len(item) - 1, -1, -1):
                    stack.append((item[index], _join(path, str(index)), depth + 1))
    return None


def check(value: Any, *, base: str = "") -> None:
    """Raise FieldError for the first value that breaks the rule."""
    found = problem(value, base=base)
    if found is not None:
        raise FieldError(*found)


_SURROGATE_MESSAGE = (
    "holds a lone UTF-16 surrogate (such as \\ud83d without its pair), which is not text; "
    "send the whole character"
)


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _name(path: str) -> str:
    return path or "body"


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None
