"""Console tables as CSV and JSON Lines: RFC 4180 that any reader parses back, no cell a
spreadsheet runs as a formula, money exact, times in UTC, and rows written as they arrive."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.export_format import (
    FORMULA_LEADS,
    Column,
    csv_cell,
    csv_lines,
    export_lines,
    json_value,
    jsonl_lines,
    safe_text,
)

COLUMNS = (
    Column("name"),
    Column("turns", "int"),
    Column("hit", "float"),
    Column("cost_usd", "money"),
    Column("price", "decimal"),
    Column("seen", "time"),
    Column("revoked", "bool"),
    Column("scopes", "list"),
)
ROW = (
    'a "quoted", name\nwith a line',
    12,
    0.25,
    Decimal("0.412365000"),
    Decimal("3.000000"),
    datetime(2026, 3, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))),
    False,
    ["compact"],
)


def parsed(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_csv_has_a_header_then_rfc4180_rows_with_crlf_ends():
    text = "".join(csv_lines(COLUMNS, [ROW]))
    assert text.startswith("name,turns,hit,cost_usd,price,seen,revoked,scopes\r\n")
    assert '"a ""quoted"", name\nwith a line"' in text  # quotes doubled, the field quoted
    assert text.endswith("\r\n")
    assert parsed(text) == [
        [c.name for c in COLUMNS],
        [
            'a "quoted", name\nwith a line',
            "12",
            "0.25",
            "0.412365000",
            "3.000000",
            "2026-03-01T10:30:00+00:00",
            "false",
            "compact",
        ],
    ]


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_a_text_cell_a_spreadsheet_would_run_is_prefixed_with_an_apostrophe(lead):
    formula = f'{lead}HYPERLINK("http://evil","x")'
    assert csv_cell(formula, "text") == "'" + formula
    (header, row) = parsed("".join(csv_lines([Column("name")], [(formula,)])))
    assert row == ["'" + formula]


def test_numbers_and_money_keep_their_sign_only_text_is_guarded():
    assert csv_cell(-3, "int") == "-3"
    assert csv_cell(Decimal("-0.5"), "money") == "-0.500000000"
    assert csv_cell(["-x"], "list") == "'-x"


def test_money_is_exact_with_nine_places_and_prices_digit_for_digit():
    assert json_value(Decimal("0.000000001"), "money") == "0.000000001"
    assert json_value(Decimal("12.5"), "money") == "12.500000000"
    assert json_value(Decimal("0.0000000015"), "money") == "0.000000002"  # half up, as stored
    assert json_value(Decimal("1E+1"), "decimal") == "10"
    assert json_value(Decimal("0.000001"), "decimal") == "0.000001"


def test_times_are_iso_8601_in_utc():
    at = datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert json_value(at, "time") == "2026-01-01T05:30:00+00:00"
    assert json_value(datetime(2026, 1, 1, tzinfo=UTC), "time") == "2026-01-01T00:00:00+00:00"


def test_none_is_an_empty_cell_and_json_null():
    for column in COLUMNS:
        assert csv_cell(None, column.kind) == ""
        assert json_value(None, column.kind) is None


def test_json_lines_are_one_object_a_row_keyed_in_column_order_without_header():
    lines = list(jsonl_lines(COLUMNS, [ROW, ROW]))
    assert len(lines) == 2 and all(line.endswith("\n") for line in lines)
    document = json.loads(lines[0])
    assert list(document) == [c.name for c in COLUMNS]
    assert document == {
        "name": 'a "quoted", name\nwith a line',  # JSON text is left as it is
        "turns": 12,
        "hit": 0.25,
        "cost_usd": "0.412365000",
        "price": "3.000000",
        "seen": "2026-03-01T10:30:00+00:00",
        "revoked": False,
        "scopes": ["compact"],
    }
    assert list(jsonl_lines(COLUMNS, [])) == []


def test_unicode_is_written_as_utf8_text_not_escapes():
    (line,) = jsonl_lines([Column("name")], [("séance ✓",)])
    assert "séance ✓" in line


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_rows_are_written_as_they_arrive(fmt):
    pulled: list[int] = []

    def rows() -> Iterator[tuple[object, ...]]:
        for n in range(1_000_000):
            pulled.append(n)
            yield (f"s{n}",)

    lines = export_lines(fmt, [Column("name")], rows())
    first = [next(lines) for _ in range(3)]
    assert len(pulled) <= 3  # no row read ahead of its line
    assert "s0" in "".join(first)


cells = st.one_of(st.none(), st.text(max_size=30))


@given(st.lists(st.tuples(cells, cells), max_size=20))
def test_any_text_comes_back_from_a_csv_reader_guarded_and_otherwise_unchanged(rows):
    columns = [Column("a"), Column("b")]
    back = parsed("".join(csv_lines(columns, rows)))
    assert back[0] == ["a", "b"]
    # the csv module reads a lone "\r" inside an unquoted field as a line break; every such
    # field is quoted by the writer, so rows come back whole
    assert back[1:] == [["" if v is None else safe_text(v) for v in row] for row in rows]


@given(st.text(max_size=30))
def test_no_guarded_cell_starts_with_a_formula_lead(text):
    assert not safe_text(text).startswith(FORMULA_LEADS)
    assert safe_text(text) in (text, "'" + text)
