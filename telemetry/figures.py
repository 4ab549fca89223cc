"""A turn's figures, each defined once: its name (the `Turn` column), how Python folds a turn's
calls into it, and the SQL aggregate that computes it from the stored calls. Pure: no Django.

Everything that lists a turn's figures is built from `TURN_FIGURES` by name, never by position:
the columns the ingest writes (`TURN_FIGURE_NAMES`), the set-wise derivation's SELECT (each
expression `AS` its name, read back by name: `telemetry.ingest.turn_derivation`) and a turn's row
from the fast one-pass `telemetry.accounting.summarize_turn` (`turn_row`). `fold_turn` is the
plain Python form of every figure; tests/unit/telemetry/test_summarize_turn.py holds
`summarize_turn` to it name by name, tests/db/test_set_wise_derivation.py the SQL.

The call buckets are `telemetry.usage.BUCKETS` and a request's size is
`telemetry.usage.context_size` (`context_sql` in SQL): a bucket added there is summed, costed
and folded here without another list to edit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from operator import attrgetter
from typing import Any, Final

from telemetry.accounting import CallFigures, TurnFigures
from telemetry.usage import BUCKETS, context_sql

Fold = Callable[[Sequence[CallFigures]], Any]


@dataclass(frozen=True, slots=True)
class TurnFigure:
    """One figure of a turn.

    `fold` computes it from the turn's calls in call-number order (at least one). `sql` computes
    it in PostgreSQL: over all the turn's stored calls, aliased `c`, as an aggregate; or, when
    `of_last`, over its highest-numbered call alone, aliased `l`. Both give the same value for
    the same calls (money by value: the column keeps nine places).
    """

    name: str
    fold: Fold
    sql: str
    of_last: bool = False


_ZERO: Final = Decimal(0)
_REPORTED: Final = "FILTER (WHERE c.reported_cache)"
# a call is priced when it has cost buckets (all or none: `telemetry.costing.call_values`)
_PRICED: Final = f"FILTER (WHERE c.cost_{BUCKETS[0]} IS NOT NULL)"


# `_sum` and `_last` build `TURN_FIGURES` once, at import, before mutmut can switch a mutant
# on; the figures they build are held by tests/unit/telemetry/test_figures.py (the folds) and
# tests/db/test_turn_figures.py (the SQL), not by mutation (docs/mutation.md).
# pragma: no mutate start
def _sum(name: str) -> TurnFigure:
    """A token count summed over the calls."""
    get = attrgetter(name)
    return TurnFigure(name, lambda calls: sum(get(c) for c in calls), f"SUM(c.{name})::bigint")


def _last(name: str, column: str | None = None) -> TurnFigure:
    """The highest-numbered call's `column` (default: the same name)."""
    get = attrgetter(column or name)
    return TurnFigure(name, lambda calls: get(calls[-1]), f"l.{column or name}", of_last=True)


# pragma: no mutate end


def _sum_or_none(values: list[Any], start: Any = 0) -> Any:
    """The sum from `start` of the values that are not None; None when every one is."""
    present = [v for v in values if v is not None]
    return sum(present, start) if present else None


def _cost(index: int) -> Fold:
    def fold(calls: Sequence[CallFigures]) -> Decimal | None:
        priced = [c.cost_buckets for c in calls if c.cost_buckets is not None]
        return sum((b[index] for b in priced), _ZERO) if priced else None

    return fold


def _total_cost(calls: Sequence[CallFigures]) -> Decimal | None:
    sums = [_cost(i)(calls) for i in range(len(BUCKETS))]
    return None if sums[0] is None else sum(sums, _ZERO)


def _context(c: CallFigures) -> int:
    return c.context_tokens


_COSTS: Final = [f"SUM(c.cost_{bucket}) {_PRICED}" for bucket in BUCKETS]

# The `Turn` columns the ingest derives, in the order the turn table's rows are written.
TURN_FIGURES: Final[tuple[TurnFigure, ...]] = (
    TurnFigure("calls", len, "COUNT(*)"),
    # pressure is per request: the turn's context is its peak call, never a sum
    TurnFigure("context_tokens", lambda calls: max(map(_context, calls)), f"MAX{context_sql('c')}"),
    *(_sum(bucket) for bucket in BUCKETS),
    TurnFigure(
        "reasoning_output",
        lambda calls: _sum_or_none([c.reasoning_output for c in calls]),
        "SUM(c.reasoning_output)::bigint",
    ),
    TurnFigure(
        "cache_reported_calls",
        lambda calls: sum(1 for c in calls if c.reported_cache),
        f"COUNT(*) {_REPORTED}",
    ),
    TurnFigure(
        "cache_read_reported",
        lambda calls: sum(c.cache_read for c in calls if c.reported_cache),
        f"COALESCE(SUM(c.cache_read) {_REPORTED}, 0)::bigint",
    ),
    TurnFigure(
        "cache_denominator",
        lambda calls: sum(c.context_tokens for c in calls if c.reported_cache),
        f"COALESCE(SUM{context_sql('c')} {_REPORTED}, 0)::bigint",
    ),
    *(TurnFigure(f"cost_{b}", _cost(i), _COSTS[i]) for i, b in enumerate(BUCKETS)),
    TurnFigure("cost_usd", _total_cost, " + ".join(_COSTS)),  # NULL when no call was priced
    TurnFigure(
        "no_cache_cost_usd",
        lambda calls: _sum_or_none([c.no_cache_cost for c in calls], _ZERO),
        "SUM(c.no_cache_cost_usd)",
    ),
    TurnFigure(
        "unpriced_calls",
        lambda calls: sum(1 for c in calls if c.cost_buckets is None),
        f"COUNT(*) FILTER (WHERE c.cost_{BUCKETS[0]} IS NULL)",
    ),
    TurnFigure("first_at", lambda calls: min(c.at for c in calls), "MIN(c.at)"),
    TurnFigure("last_at", lambda calls: max(c.at for c in calls), "MAX(c.at)"),
    _last("model"),
    TurnFigure("last_call", lambda calls: calls[-1].call, "MAX(c.call)"),
    TurnFigure(
        "last_call_context_tokens", lambda calls: calls[-1].context_tokens, context_sql("l"), True
    ),
    _last("last_call_output", "output"),
    _last("last_call_reasoning_output", "reasoning_output"),
    _last("last_call_appended_chars", "appended_chars"),
    _last("last_call_window_tokens", "window_tokens"),
    _last("surface_version"),
)

TURN_FIGURE_NAMES: Final = tuple(f.name for f in TURN_FIGURES)


def fold_turn(calls: Sequence[CallFigures]) -> dict[str, Any]:
    """Every figure of `TURN_FIGURES` by name, folded from a turn's calls (any order, at least
    one) by its plain Python form: the definition `summarize_turn` is held to."""
    if not calls:
        raise ValueError("a turn has at least one call")
    ordered = sorted(calls, key=attrgetter("call"))
    return {figure.name: figure.fold(ordered) for figure in TURN_FIGURES}


# `TurnFigures` keeps a turn's cost buckets as one tuple in `BUCKETS` order; every other figure
# is its field of the same name.
_COST_AT: Final = {f"cost_{bucket}": i for i, bucket in enumerate(BUCKETS)}
_FIELD_OF: Final = {name: attrgetter(name) for name in TURN_FIGURE_NAMES if name not in _COST_AT}


def turn_row(figures: TurnFigures) -> dict[str, Any]:
    """`figures` (from `summarize_turn`) as the turn's row: each figure by its name."""
    row = {name: get(figures) for name, get in _FIELD_OF.items()}
    buckets = figures.cost_buckets
    for name, i in _COST_AT.items():
        row[name] = None if buckets is None else buckets[i]
    return row


def turn_values(session_id: int, turn: int, figures: TurnFigures) -> tuple[Any, ...]:
    """A turn's row, in the order of `("session_id", "turn", *TURN_FIGURE_NAMES)`."""
    row = turn_row(figures)
    return (session_id, turn, *(row[name] for name in TURN_FIGURE_NAMES))


@dataclass(frozen=True, slots=True)
class SessionTotal:
    """One of a session's totals over its turns (`telemetry.session_totals.Totals`' field
    `name`), of the turns' `column`: "count" of turns, "sum", "max", or "money" (a sum that is
    None while no turn has a value). `changed` names what one ingest changed of it
    (`telemetry.session_totals.Change`) and `priced`, for money, whether a touched turn has a
    value now."""

    name: str
    kind: str
    column: str
    changed: str
    priced: str | None = None


SESSION_TOTALS: Final[tuple[SessionTotal, ...]] = (
    SessionTotal("turns", "count", "turn", "new_turns"),
    SessionTotal("calls", "sum", "calls", "calls"),
    SessionTotal("max_rounds", "max", "calls", "max_rounds"),
    SessionTotal("peak", "max", "context_tokens", "peak"),
    SessionTotal("read", "sum", "cache_read_reported", "read"),
    SessionTotal("denominator", "sum", "cache_denominator", "denominator"),
    SessionTotal("reported", "sum", "cache_reported_calls", "reported"),
    SessionTotal("cost", "money", "cost_usd", "cost", priced="priced"),
    SessionTotal("no_cache", "money", "no_cache_cost_usd", "no_cache", priced="no_cache_priced"),
    SessionTotal("unpriced", "sum", "unpriced_calls", "unpriced"),
    SessionTotal("last_seen", "max", "last_at", "last_seen"),
)

# Each total as an SQL aggregate over all of a session's turns: (its name, function, column).
SESSION_AGGREGATES: Final = tuple(
    (f"total_{t.name}", {"count": "COUNT", "max": "MAX"}.get(t.kind, "SUM"), t.column)
    for t in SESSION_TOTALS
)


# SQL text: what it computes is held on a real database (tests/db/test_turn_figures.py and
# tests/db/test_set_wise_derivation.py), which the pure tests `make mutate` runs cannot reach.
# pragma: no mutate start
def session_change_sql() -> dict[str, str]:
    """What an upsert of a session's touched turns changed of each total (`Change`'s fields, by
    name), as SQL over the touched turns after (`n`) and before (`o`, NULL for a new turn)."""
    change: dict[str, str] = {}
    for t in SESSION_TOTALS:
        column = t.column
        if t.kind == "count":
            change[t.changed] = "COUNT(*) FILTER (WHERE o.turn IS NULL)"
        elif t.kind == "sum":
            change[t.changed] = f"SUM(n.{column} - COALESCE(o.{column}, 0))::bigint"
        elif t.kind == "max":
            change[t.changed] = f"MAX(n.{column})"
        else:
            change[t.changed] = (
                f"COALESCE(SUM(COALESCE(n.{column}, 0) - COALESCE(o.{column}, 0)), 0)"
            )
            change[str(t.priced)] = f"bool_or(n.{column} IS NOT NULL)"
    return change


# pragma: no mutate end


# The touched turns' columns the change reads as they were before the upsert.
SESSION_CHANGE_READS: Final = tuple(
    dict.fromkeys(t.column for t in SESSION_TOTALS if t.kind in ("sum", "money"))
)


def fold_session(turns: Sequence[Any]) -> dict[str, Any]:
    """Every total of `SESSION_TOTALS` by name over a session's turns (each read by its
    columns' names), by its plain form: the definition `telemetry.session_totals.of_turns` is
    held to. None for a maximum or money over no value."""
    out: dict[str, Any] = {}
    for t in SESSION_TOTALS:
        if t.kind == "count":
            out[t.name] = len(turns)
            continue
        values = [getattr(turn, t.column) for turn in turns]
        if t.kind == "sum":
            out[t.name] = sum(values)
        elif t.kind == "max":
            out[t.name] = max(values, default=None)
        else:
            out[t.name] = _sum_or_none(values, _ZERO)
    return out
