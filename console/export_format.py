"""A console table as a download: CSV (RFC 4180) or JSON Lines, one row at a time.

Each table names its columns and what each holds (`Column.kind`); a cell is written by its kind,
the same in every table: money as an exact decimal string with the places costs are stored with
(`telemetry.money.money_text`), other decimals (catalogue prices) digit for digit as stored,
times as ISO 8601 in UTC, text as is. A CSV text cell that a spreadsheet would read as a formula
(it starts with = + - @, a tab or a carriage return) is prefixed with an apostrophe (OWASP's
"CSV injection"); JSON Lines keeps the text untouched (no program evaluates a JSON string).

Rows are written as they arrive: both writers are generators, so a download of a million rows
holds one row in memory. Pure: no Django.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final, Literal

from telemetry.money import money_text

Kind = Literal["text", "int", "float", "money", "decimal", "time", "bool", "list"]
Format = Literal["csv", "jsonl"]
FORMATS: Final[tuple[Format, ...]] = ("csv", "jsonl")
CONTENT_TYPES: Final[dict[Format, str]] = {
    "csv": "text/csv; charset=utf-8; header=present",
    "jsonl": "application/x-ndjson; charset=utf-8",
}
# what a spreadsheet may take for the start of a formula (OWASP, CSV injection)
FORMULA_LEADS: Final = ("=", "+", "-", "@", "\t", "\r")

JsonValue = str | int | float | bool | list[str] | None


@dataclass(frozen=True)
class Column:
    """One column of an export: its name (the CSV header and the JSON key) and what it holds."""

    name: str
    kind: Kind = "text"


def json_value(value: object, kind: Kind) -> JsonValue:
    """`value` as the JSON of a `kind` cell: money and decimals as exact strings, times as
    ISO 8601 UTC strings, None as null; numbers stay numbers, text stays text."""
    if value is None:
        return None
    if kind == "money":
        assert isinstance(value, Decimal | int)
        return money_text(value)
    if kind == "decimal":
        assert isinstance(value, Decimal | int)
        return f"{Decimal(value):f}"
    if kind == "time":
        assert isinstance(value, datetime)
        return value.astimezone(UTC).isoformat()
    if kind == "int":
        assert isinstance(value, int)
        return int(value)
    if kind == "float":
        assert isinstance(value, int | float)
        return float(value)
    if kind == "bool":
        return bool(value)
    if kind == "list":
        assert isinstance(value, list | tuple)
        return [str(item) for item in value]
    return str(value)


def safe_text(text: str) -> str:
    """`text` as a CSV cell no spreadsheet runs as a formula: an apostrophe before a lead
    character. Text without one comes back unchanged."""
    return "'" + text if text.startswith(FORMULA_LEADS) else text


def csv_cell(value: object, kind: Kind) -> str:
    """`value` as the text of a CSV cell of `kind` (an empty cell for None)."""
    shown = json_value(value, kind)
    if shown is None:
        return ""
    if isinstance(shown, bool):
        return "true" if shown else "false"
    if isinstance(shown, list):
        return safe_text(" ".join(shown))
    if kind == "text":
        return safe_text(str(shown))
    return str(shown)


def csv_lines(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """The header line, then one line per row: RFC 4180 (CRLF line ends, a field holding a comma,
    a quote or a line break quoted, quotes doubled). Each line is yielded as soon as its row
    arrives."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)

    def line(cells: Sequence[str]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(cells)
        return buffer.getvalue()

    yield line([column.name for column in columns])
    for row in rows:
        cells = [csv_cell(value, column.kind) for column, value in zip(columns, row, strict=True)]
        yield line(cells)


def jsonl_lines(columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """One JSON object per row and line, keyed by the column names in their order (JSON Lines:
    no header, no enclosing array; an empty table is an empty file)."""
    for row in rows:
        document = {
            column.name: json_value(value, column.kind)
            for column, value in zip(columns, row, strict=True)
        }
        yield json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


def export_lines(
    fmt: Format, columns: Sequence[Column], rows: Iterable[Sequence[object]]
) -> Iterator[str]:
    """The lines of the download in `fmt`."""
    return csv_lines(columns, rows) if fmt == "csv" else jsonl_lines(columns, rows)
