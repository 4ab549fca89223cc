"""`text_array` (telemetry.ingest.values) gives PostgreSQL the array the driver's adaptation of
the same list gives: drawn text of any character a text column stores, and the elements an
unquoted literal would misread (NULL, empty, separators, braces, quotes, backslashes, spaces)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.ingest.statements import run
from telemetry.ingest.values import text_array

pytestmark = pytest.mark.django_db

# Any character PostgreSQL's text stores: no NUL, no lone surrogate (UTF-8 cannot carry one).
_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))


def _as_array(value: Any) -> list[str]:
    if connection.vendor != "postgresql":
        pytest.skip("array literals are PostgreSQL's")
    (row,) = run("SELECT %s::text[]", [value], prepare=False)
    result: list[str] = row[0]
    return result


@given(st.lists(_TEXT, max_size=12))
@example([])
@example([""])
@example(["", ""])
@example(["NULL", "null", "{}", "{", "}", ",", '"', "\\", '\\"', '"\\'])
@example([" a ", "\t", "\n", "a b", "ä", "😀", "a,b", '{"x"}'])
def test_text_array_is_the_array_the_driver_sends(column: list[str]) -> None:
    assert _as_array(text_array(column)) == _as_array(column) == column


def test_text_array_leaves_a_column_holding_nul_to_the_driver() -> None:
    column = ["a", "b\x00c"]
    assert text_array(column) == column
