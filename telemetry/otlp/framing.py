"""The protobuf wire format, walked without decoding: fields by their byte ranges.

OTLP's traces and logs requests nest alike: the request's field 1 holds the resources, a
resource's field 2 its scopes, a scope's field 2 its spans or log records. Walking those
length-delimited fields lets `telemetry.otlp.wire` count an export's items before decoding it
(the item cap) and parse each item on its own (one bad item refused alone), in one walk.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(slots=True)
class Scope:
    """A scope of a walked export: its fields but the items, and its items (views of the
    body); `whole` once its walk reached its end."""

    rest: list[memoryview] = field(default_factory=list)
    items: list[memoryview] = field(default_factory=list)
    whole: bool = False


@dataclass(slots=True)
class Resource:
    """A resource of a walked export: its fields but the scopes, and its scopes."""

    rest: list[memoryview] = field(default_factory=list)
    scopes: list[Scope] = field(default_factory=list)
    whole: bool = False


@dataclass(slots=True)
class Walk:
    """What `walk_export` read: the request's fields but the resources, its resources, and
    `count`, its resources, scopes and items. `whole` once the walk reached the body's end:
    else it stopped where the body broke (Malformed) or just past the cap."""

    count: int = 0
    rest: list[memoryview] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    whole: bool = False


def walk_export(data: bytes, *, cap: int) -> Walk:
    """The resources, scopes and spans or log records (items) of a protobuf traces or logs
    export, from the wire format before it is decoded, in one walk that stops past `cap` of them.

    Both requests nest alike: field 1 holds the resources, a resource's field 2 its scopes, a
    scope's field 2 its items. Only those length-delimited fields are walked; everything else
    is skipped by its length (and kept, as a view of `data`, for the envelope's decoder), so the
    walk costs O(cap) steps, whatever the body's size. A body that is not well-formed protobuf
    stops the walk where it breaks, what was read up to there kept (the decoder refuses it).
    """
    view = memoryview(data)
    walk = Walk()
    try:
        for number, begin, start, stop in fields(data, 0, len(data)):
            if number != 1:
                walk.rest.append(view[begin:stop])
                continue
            walk.count += 1
            if walk.count > cap:
                return walk
            resource = Resource()
            walk.resources.append(resource)
            for r_number, r_begin, r_start, r_stop in fields(data, start, stop):
                if r_number != 2:
                    resource.rest.append(view[r_begin:r_stop])
                    continue
                walk.count += 1
                if walk.count > cap:
                    return walk
                scope = Scope()
                resource.scopes.append(scope)
                for s_number, s_begin, s_start, s_stop in fields(data, r_start, r_stop):
                    if s_number != 2:
                        scope.rest.append(view[s_begin:s_stop])
                        continue
                    walk.count += 1
                    if walk.count > cap:
                        return walk
                    scope.items.append(view[s_start:s_stop])
                scope.whole = True
            resource.whole = True
        walk.whole = True
    except Malformed:
        pass
    return walk


class Malformed(Exception):
    """The bytes are not well-formed protobuf (a field runs past its end, a bad wire type)."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise Malformed


def fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(number, field start, payload start, field end) of each field between `pos` and `end`;
    the payload is a length-delimited field's bytes (number -1 for any other wire type)."""
    while pos < end:
        begin = pos
        tag, pos = _varint(data, pos, end)
        kind = tag & 7
        if kind == 0:
            _, pos = _varint(data, pos, end)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise Malformed
            yield tag >> 3, begin, pos, pos + length
            pos += length
            continue
        else:
            raise Malformed
        if pos > end:
            raise Malformed
        yield -1, begin, pos, pos
