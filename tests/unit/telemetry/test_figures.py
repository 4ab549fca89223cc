"""Each figure of a turn is defined once (`telemetry.figures.TURN_FIGURES`): the fast one-pass
`summarize_turn` gives, name by name, what each figure's plain fold gives; every list of a
turn's columns is the definition's names; a bucket of `BUCKETS` is summed and costed by it."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.accounting import CallFigures, TurnFigures, summarize_turn
from telemetry.figures import (
    SESSION_CHANGE_READS,
    SESSION_TOTALS,
    TURN_FIGURE_NAMES,
    TURN_FIGURES,
    fold_session,
    fold_turn,
    session_change_sql,
    turn_row,
    turn_values,
)
from telemetry.session_totals import Change, Totals, TurnSums, of_turns
from telemetry.usage import BUCKETS, INPUT_BUCKETS, MAX_TOKENS, context_sql
from tests.unit.telemetry.test_session_totals import _sums, calls
from tests.unit.telemetry.test_summarize_turn import _call

_AT = datetime(2026, 11, 30, tzinfo=UTC)


def _one(call: int = 1, **overrides: object) -> CallFigures:
    values: dict[str, object] = {
        "call": call,
        "at": _AT,
        "model": "m",
        **dict.fromkeys(BUCKETS, 0),
        "reasoning_output": None,
        "reported_cache": True,
        "appended_chars": None,
        "window_tokens": None,
        "surface_version": None,
        "cost_buckets": None,
        "no_cache_cost": None,
        **overrides,
    }
    return CallFigures(**values)  # type: ignore[arg-type]


def _exact(row: dict[str, object]) -> dict[str, tuple[object, ...]]:
    # Decimal("100") == Decimal("1E+2"); their text differs, and the stored numeric keeps it
    return {
        name: (type(v), str(v), v.tzinfo if isinstance(v, datetime) else None)
        for name, v in row.items()
    }


_MAXIMAL = _one(**dict.fromkeys(BUCKETS, MAX_TOKENS), reasoning_output=MAX_TOKENS)
_NINE_PLACES = (Decimal("0.000000001"),) * len(BUCKETS)


@given(st.lists(_call, min_size=1, max_size=8))
@example([_one()])  # zero counts, unpriced
@example([_MAXIMAL, _MAXIMAL])  # maximal counts
@example([_one(cost_buckets=_NINE_PLACES, no_cache_cost=Decimal("1E-9")), _one(2)])
def test_the_one_pass_summary_gives_every_figure_its_definition_gives(calls):
    assert _exact(turn_row(summarize_turn(calls))) == _exact(fold_turn(calls))


def test_the_turn_row_is_the_definitions_names_in_its_order():
    figures = summarize_turn([_one(cost_buckets=_NINE_PLACES)])
    row = dict(
        zip(["session_id", "turn", *TURN_FIGURE_NAMES], turn_values(7, 3, figures), strict=True)
    )
    assert row == {"session_id": 7, "turn": 3, **turn_row(figures)}


def test_every_figure_is_a_field_of_the_turns_figures_or_a_cost_bucket():
    fields = set(TurnFigures.__slots__) - {"cost_buckets"}
    assert set(TURN_FIGURE_NAMES) == fields | {f"cost_{bucket}" for bucket in BUCKETS}
    assert len(TURN_FIGURE_NAMES) == len(set(TURN_FIGURE_NAMES))


def test_every_bucket_is_summed_and_costed_and_the_peak_is_the_context_sql():
    sql = {f.name: f.sql for f in TURN_FIGURES}
    for bucket in BUCKETS:
        assert sql[bucket] == f"SUM(c.{bucket})::bigint"
        assert f"SUM(c.cost_{bucket})" in sql["cost_usd"]
    assert sql["context_tokens"] == f"MAX{context_sql('c')}"
    assert all(f"c.{bucket}" in sql["cache_denominator"] for bucket in INPUT_BUCKETS)
    assert sql["last_call_context_tokens"] == context_sql("l")


# --- a session's totals ---------------------------------------------------------------------


@given(st.lists(st.lists(calls, min_size=1, max_size=4), max_size=8))
def test_the_totals_from_scratch_are_each_totals_definition(turns):
    sums = [_sums(turn_calls) for turn_calls in turns]
    totals = of_turns(sums)
    defined = fold_session(sums)
    assert set(defined) == {t.name for t in SESSION_TOTALS}  # every total, none left out
    assert {name: getattr(totals, name) for name in defined} == defined


def test_a_turn_without_calls_has_no_figures():
    with pytest.raises(ValueError, match="^a turn has at least one call$"):
        fold_turn([])


def test_every_total_and_its_change_is_a_field_by_name():
    assert {t.name for t in SESSION_TOTALS} == {f.name for f in fields(Totals)}
    assert set(session_change_sql()) == {f.name for f in fields(Change)}
    assert set(SESSION_CHANGE_READS) <= {f.name for f in fields(TurnSums)}
    assert {t.column for t in SESSION_TOTALS if t.kind != "count"} <= {
        f.name for f in fields(TurnSums)
    }
