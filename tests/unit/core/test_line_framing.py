"""Line framing with a cap, the byte order mark, resuming, and the --follow pass order."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from context_core.line_framing import (
    BOM,
    Frame,
    FramerState,
    LineFramer,
    Overlong,
    pass_order,
    strip_bom,
)

lines = st.lists(
    st.one_of(
        st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
        st.sampled_from([b"", b"\r", b"{}", b"x" * 8, b"y" * 9, BOM + b"z"]),
    ),
    max_size=12,
)
tails = st.sampled_from([b"", b"t", b"tail\r", b"w" * 9, b"w" * 30])


def reference(data: bytes, cap: int) -> tuple[list[Frame | Overlong], bytes]:
    """The frames a whole-buffer split gives, and the unterminated tail."""
    out: list[Frame | Overlong] = []
    *complete, tail = data.split(b"\n")
    position = 0
    for number, raw in enumerate(complete, 1):
        if len(raw) > cap:
            out.append(Overlong(number, position))
        else:
            clean = raw[:-1] if raw.endswith(b"\r") else raw
            if position == 0:
                clean = strip_bom(clean)
            out.append(Frame(number, position, position + len(raw) + 1, clean))
        position += len(raw) + 1
    return out, tail


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(lines, tails, st.lists(st.integers(0, 400), max_size=8), st.integers(1, 10))
def test_any_chunking_frames_like_a_whole_split_and_holds_at_most_the_cap(body, tail, cuts, cap):
    data = b"".join(line + b"\n" for line in body) + tail
    framer = LineFramer(max_bytes=cap, state=FramerState())
    got: list[Frame | Overlong] = []
    for piece in chunked(data, cuts):
        got.extend(framer.feed(piece))
        assert framer.read_to - framer.position <= cap  # never more than the cap held
    want, want_tail = reference(data, cap)
    if len(want_tail) > cap:
        want.append(Overlong(len(want) + 1, len(data) - len(want_tail)))
        assert framer.tail() is None and framer.discarding
    else:
        found = framer.tail()
        assert (found.end - found.start if found else 0) == len(want_tail)
    assert got == want


@given(lines, st.integers(0, 300), st.integers(1, 10))
def test_resuming_from_the_state_at_any_point_gives_the_same_frames(body, cut, cap):
    data = b"".join(line + b"\n" for line in body)
    cut %= len(data) + 1
    whole = LineFramer(max_bytes=cap, state=FramerState()).feed(data)
    first = LineFramer(max_bytes=cap, state=FramerState())
    got = first.feed(data[:cut])
    state = first.state()
    again = LineFramer(max_bytes=cap, state=state)
    got.extend(again.feed(data[state.position :]))
    assert got == whole


@given(st.integers(1, 64))
def test_a_line_of_exactly_the_cap_is_kept_and_one_byte_more_is_refused(cap):
    framer = LineFramer(max_bytes=cap, state=FramerState())
    got = framer.feed(b"a" * cap + b"\n" + b"b" * (cap + 1) + b"\nc\n")
    assert got == [
        Frame(1, 0, cap + 1, b"a" * cap),
        Overlong(2, cap + 1),
        Frame(3, 2 * cap + 3, 2 * cap + 5, b"c"),
    ]


def test_an_endless_line_is_refused_once_and_never_held():
    framer = LineFramer(max_bytes=1024, state=FramerState())
    refused = []
    for _ in range(1000):
        refused.extend(framer.feed(b"\0" * 4096))
        assert framer.read_to - framer.position == 0
    assert refused == [Overlong(1, 0)]
    assert framer.state() == FramerState(4096 * 1000, 1, discarding=True)


@given(lines)
def test_a_bom_at_the_start_changes_no_line(body):
    data = b"".join(line + b"\n" for line in body)
    assume(not data.startswith(BOM))
    plain = LineFramer(max_bytes=64, state=FramerState()).feed(data)
    marked = LineFramer(max_bytes=64, state=FramerState()).feed(BOM + data)
    assert [(f.number, f.data) for f in marked if isinstance(f, Frame)] == [
        (f.number, f.data) for f in plain if isinstance(f, Frame)
    ]


def test_a_tail_taken_whole_is_one_line_and_its_later_newline_no_line():
    framer = LineFramer(max_bytes=64, state=FramerState())
    assert framer.feed(b'{"a": 1}\n{"b": 2}') == [Frame(1, 0, 9, b'{"a": 1}')]
    assert framer.tail() == Frame(2, 9, 17, b'{"b": 2}', terminated=False)
    assert framer.take_tail() is not None
    resumed = LineFramer(max_bytes=64, state=framer.state())
    assert resumed.feed(b'\n{"c": 3}\n') == [Frame(3, 18, 27, b'{"c": 3}')]


@given(st.lists(st.text(min_size=1, max_size=3), unique=True, max_size=8), st.integers(0, 50))
def test_each_pass_visits_every_file_once_and_the_first_place_goes_round(names, turn):
    order = pass_order(names, turn)
    assert sorted(order) == sorted(names)
    if names:
        firsts = {pass_order(names, turn + k)[0] for k in range(len(names))}
        assert firsts == set(names)
