"""The session export's line format: a row survives a round trip exactly, and a reader refuses
what it cannot read, naming the line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core.export_lines import (
    FORMAT_VERSION,
    KINDS,
    READ_VERSIONS,
    SESSION,
    ExportLine,
    ExportLineError,
    check_order,
    decode_line,
    encode_line,
    plain,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
money = st.decimals(
    min_value=Decimal("-1e10"), max_value=Decimal("1e10"), places=9, allow_nan=False
)
times = st.datetimes(
    datetime(1971, 1, 1),  # noqa: DTZ001 - the bounds of hypothesis are naive
    datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
columns = st.text(max_size=12)
records = st.dictionaries(columns, json_values | money | times, max_size=8)


@given(kind=st.sampled_from(KINDS), record=records, number=st.integers(1, 10**9))
def test_a_row_comes_back_as_its_plain_values_in_its_order(kind, record, number):
    text = encode_line(kind, record)
    assert text.endswith("\n") and text.count("\n") == 1  # one row, one line
    line = decode_line(text, number)
    assert line == ExportLine(number, kind, {k: plain(v) for k, v in record.items()})
    assert list(line.record) == list(record)


@given(amount=money)
def test_money_is_its_exact_decimal_string_never_a_float(amount):
    line = decode_line(encode_line("call", {"cost_usd": amount}), 1)
    assert Decimal(line.record["cost_usd"]) == amount
    assert "E" not in line.record["cost_usd"].upper()  # fixed point, never an exponent


def test_a_stored_zero_is_fixed_point_not_an_exponent():
    # what the database hands back for 0 at nine places, and a whole amount in exponent form
    assert plain(Decimal("0E-9")) == "0.000000000"
    assert plain(Decimal("1E+2")) == "100"


def test_a_time_keeps_its_offset():
    at = datetime(2026, 3, 1, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    line = decode_line(encode_line("call", {"at": at}), 1)
    assert datetime.fromisoformat(line.record["at"]) == at
    assert line.record["at"].endswith("+02:00")


def test_the_same_row_gives_the_same_bytes():
    row = {"turn": 3, "call": 0, "raw_usage": {"b": 1, "a": "é\n"}, "cost_usd": Decimal("0.1")}
    assert encode_line("call", row) == encode_line("call", dict(row))
    assert encode_line("call", row) == (
        '{"v":2,"kind":"call","row":{"turn":3,"call":0,"raw_usage":{"b":1,"a":"é\\n"},'
        '"cost_usd":"0.1"}}\n'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[1]", "a line must be a JSON object"),
        ('{"kind":"call"}', "format version None"),
        ('{"v":3,"kind":"call"}', "format version 3 is not one this reader reads (v: 1 to 2)"),
        ('{"v":0,"kind":"call"}', "format version 0"),
        ('{"v":true,"kind":"call"}', "format version True"),
        ('{"v":1,"kind":"calls","row":{}}', "unknown kind 'calls'"),
        ('{"v":1}', "unknown kind None"),
        ('{"v":1,"kind":"call"}', "row: must be an object"),
        ('{"v":1,"kind":"call","row":[]}', "row: must be an object"),
    ],
)
def test_a_line_that_is_not_a_row_is_refused_with_its_number(text, message):
    with pytest.raises(ExportLineError) as caught:
        decode_line(text, 7)
    assert caught.value.line == 7
    assert str(caught.value).startswith("line 7: ") and message in str(caught.value)


def test_a_row_may_have_columns_named_like_the_format_fields_but_no_nan():
    line = decode_line(encode_line("operation", {"kind": "prune", "v": 3}), 1)
    assert (line.kind, line.record) == ("operation", {"kind": "prune", "v": 3})
    with pytest.raises(ValueError, match="unknown kind"):
        encode_line("nope", {})
    with pytest.raises(ValueError):
        encode_line("call", {"x": float("nan")})


def test_the_format_version_is_on_every_line():
    assert decode_line(encode_line(SESSION, {}), 1).kind == SESSION
    assert encode_line(SESSION, {}).startswith(f'{{"v":{FORMAT_VERSION},')


def test_every_earlier_version_is_still_read():
    # version 1 files (written before session lines held tags) stay readable
    assert 1 in READ_VERSIONS and FORMAT_VERSION in READ_VERSIONS
    for version in READ_VERSIONS:
        line = decode_line(f'{{"v":{version},"kind":"session","row":{{"model":"m"}}}}', 1)
        assert line.record == {"model": "m"}


def test_a_session_line_comes_first_and_kinds_keep_their_order():
    def line(kind: str) -> ExportLine:
        return ExportLine(5, kind, {})

    check_order(None, line(SESSION))
    check_order("operation", line(SESSION))  # the next session
    check_order("call", line("call"))
    check_order("call", line("turn"))
    with pytest.raises(ExportLineError, match="line 5: a call line before any session line"):
        check_order(None, line("call"))
    with pytest.raises(ExportLineError, match="a run line after operation lines"):
        check_order("operation", line("run"))
