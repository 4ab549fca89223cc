"""The protobuf wire format, walked without decoding: fields by their byte ranges.

OTLP's traces and logs requests nest alike: the request's field 1 holds the resources, a
resource's field 2 its scopes, a scope's field 2 its spans or log records. Walking those
length-delimited fields lets `telemetry.otlp.wire` count an export's items before decoding it
(the item cap) and parse each item on its own (one bad item refused alone). Standard library
only.
"""

from __future__ import annotations

from collections.abc import Iterator


def count_protobuf_items(data: bytes, *, cap: int) -> int:
    """The spans or log records (and their resource and scope envelopes) of a protobuf traces or
    logs export, counted from the wire format before it is decoded, stopping past `cap`.

    Both requests nest alike: field 1 holds the resources, a resource's field 2 its scopes, a
    scope's field 2 its items. Only those length-delimited fields are walked; everything else
    is skipped by its length, so the count costs O(cap) steps, whatever the body's size. A body
    that is not well-formed protobuf stops the count where it breaks (the decoder refuses it).
    """
    count = 0
    try:
        for _ in _units(data):
            count += 1
            if count > cap:
                break
    except Malformed:
        pass
    return count


def _units(data: bytes) -> Iterator[None]:
    """One step per resource, per scope and per item of the export, in wire order."""
    for start, end in submessages(data, 0, len(data), 1):
        yield None
        for scope_start, scope_end in submessages(data, start, end, 2):
            yield None
            for _ in submessages(data, scope_start, scope_end, 2):
                yield None


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


def submessages(data: bytes, pos: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each length-delimited field `number` between `pos` and `end`."""
    for found, _, start, stop in fields(data, pos, end):
        if found == number:
            yield start, stop
