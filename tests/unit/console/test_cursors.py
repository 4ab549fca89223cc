"""Keyset cursors: what is encoded comes back equal, anything else is refused, never a crash."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.cursors import Cursor, CursorError, cursor_scope, decode_cursor, encode_cursor

keys = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.decimals(allow_nan=False, allow_infinity=False, places=9),
    st.datetimes(
        min_value=datetime(1, 1, 2),  # noqa: DTZ001 (hypothesis takes naive bounds)
        max_value=datetime(9999, 12, 30),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    ),
)


@given(st.lists(keys, max_size=4), st.text(max_size=20))
def test_a_cursor_decodes_to_the_keys_it_was_made_of(values, scope):
    cursor = Cursor(scope, tuple(values))
    text = encode_cursor(cursor)
    assert text.isascii() and "=" not in text and "/" not in text and "+" not in text
    decoded = decode_cursor(text, scope=scope, keys=len(values))
    assert decoded == cursor
    # the same type back, not merely an equal value (a bool is not an int, a float not a Decimal)
    assert [type(k) for k in decoded.keys] == [type(k) for k in values]


@given(st.text(max_size=200))
def test_any_text_is_a_cursor_or_a_cursor_error(text):
    with contextlib.suppress(CursorError):  # anything else fails the test
        decode_cursor(text, scope="s", keys=2)


@given(st.binary(max_size=200))
def test_any_base64_of_any_bytes_is_a_cursor_or_a_cursor_error(raw):
    import base64

    with contextlib.suppress(CursorError):
        decode_cursor(base64.urlsafe_b64encode(raw).decode(), scope="s", keys=1)


def test_a_cursor_of_another_sort_or_filters_is_refused_saying_so():
    text = encode_cursor(Cursor(cursor_scope("-cost", "q=a"), (Decimal("1.5"), 7)))
    with pytest.raises(CursorError, match="another sort or other filters"):
        decode_cursor(text, scope=cursor_scope("-cost", "q=b"), keys=2)
    assert decode_cursor(text, scope=cursor_scope("-cost", "q=a"), keys=2).keys == (
        Decimal("1.5"),
        7,
    )


def test_a_cursor_with_another_number_of_keys_is_refused():
    text = encode_cursor(Cursor("s", (1, 2)))
    with pytest.raises(CursorError):
        decode_cursor(text, scope="s", keys=3)


@pytest.mark.parametrize(
    "document",
    [
        '["s",[["t","2025-01-01T00:00:00"]]]',  # a naive time
        '["s",[["f","inf"]]]',
        '["s",[["d","NaN"]]]',
        '["s",[["i","1.5"]]]',
        '["s",[["x","1"]]]',
        '["s",[["n",1]]]',
        '["s",[[]]]',
        '["s",[1]]',
        '{"s":1}',
    ],
)
def test_a_key_that_is_not_one_a_cursor_holds_is_refused(document):
    import base64

    with pytest.raises(CursorError):
        decode_cursor(base64.urlsafe_b64encode(document.encode()).decode(), scope="s", keys=1)


def test_an_overlong_cursor_is_refused_before_it_is_decoded():
    with pytest.raises(CursorError, match="over"):
        decode_cursor("A" * 5000, scope="s", keys=1)


def test_keys_a_cursor_cannot_hold_fail_when_encoded_not_when_decoded():
    for bad in (
        float("nan"),
        Decimal("Infinity"),
        datetime(2025, 1, 1, tzinfo=UTC).replace(tzinfo=None),
    ):
        with pytest.raises(ValueError):
            encode_cursor(Cursor("s", (bad,)))
