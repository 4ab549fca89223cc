"""A session's totals over its turns, brought forward by what one ingest changed in its turns.

A session stores the sums and maxima of all its turns (`AgentSession.turns_count`, `cost_usd`,
…). Re-reading every turn to re-derive them cost each ingest time in proportion to the
session's length: a record into a session of 10,000 turns cost far more PostgreSQL CPU than
one into a session of 10 (docs/performance.md). `advance` gives the same totals from the
stored ones and the touched turns alone: each sum moves by its turns' differences (after
minus before), each maximum takes the touched turns' new values into account.

That is exact because a turn's figures only grow: calls are only ever added to a turn (a
duplicate adds nothing, a conflict is refused), and every maximum a session keeps (the turn's
calls, its peak context, its last call's time) is over the turn's calls. `of_turns` is the
from-scratch definition the tests hold `advance` to (the same aggregates as
`telemetry.figures.SESSION_TOTALS`). Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Protocol, TypeVar


@dataclass(frozen=True, slots=True)
class TurnSums:
    """What a session totals of one turn (the `Turn` columns of the same names)."""

    calls: int
    context_tokens: int
    cache_read_reported: int
    cache_denominator: int
    cache_reported_calls: int
    cost_usd: Decimal | None  # None: no call of the turn was priced
    no_cache_cost_usd: Decimal | None
    unpriced_calls: int
    last_at: datetime


class Summed(Protocol):
    """What `change_of` reads of a turn: `TurnSums`, or `telemetry.accounting.TurnFigures`."""

    @property
    def calls(self) -> int: ...
    @property
    def context_tokens(self) -> int: ...
    @property
    def cache_read_reported(self) -> int: ...
    @property
    def cache_denominator(self) -> int: ...
    @property
    def cache_reported_calls(self) -> int: ...
    @property
    def cost_usd(self) -> Decimal | None: ...
    @property
    def no_cache_cost_usd(self) -> Decimal | None: ...
    @property
    def unpriced_calls(self) -> int: ...
    @property
    def last_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Totals:
    """A session's figures over all its turns (`telemetry.derivation.derive_session_figures`)."""

    turns: int = 0
    calls: int = 0
    max_rounds: int | None = None
    peak: int | None = None
    read: int = 0
    denominator: int = 0
    reported: int = 0
    cost: Decimal | None = None  # None while no turn was priced
    no_cache: Decimal | None = None
    unpriced: int = 0
    last_seen: datetime | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """What one ingest did to the touched turns of one session, summed over them (the database
    computes it in the statement that re-derives the turns, `telemetry.ingest.turn_derivation.derive_turns`):
    differences for the sums, the touched turns' new values for the maxima."""

    new_turns: int
    calls: int
    max_rounds: int
    peak: int
    read: int
    denominator: int
    reported: int
    cost: Decimal  # NULL costs count as 0 on both sides
    priced: bool  # a touched turn has a cost now
    no_cache: Decimal
    no_cache_priced: bool
    unpriced: int
    last_seen: datetime


def _add_money(stored: Decimal | None, delta: Decimal, priced: bool) -> Decimal | None:
    if stored is None and not priced:
        return None
    return (stored or Decimal(0)) + delta


_Ordered = TypeVar("_Ordered", int, datetime)


def _larger(stored: _Ordered | None, value: _Ordered) -> _Ordered:
    return value if stored is None or value > stored else stored


def advance(totals: Totals, change: Change) -> Totals:
    """`totals` after `change` (see the module's note on why this is exact)."""
    return Totals(
        turns=totals.turns + change.new_turns,
        calls=totals.calls + change.calls,
        max_rounds=_larger(totals.max_rounds, change.max_rounds),
        peak=_larger(totals.peak, change.peak),
        read=totals.read + change.read,
        denominator=totals.denominator + change.denominator,
        reported=totals.reported + change.reported,
        cost=_add_money(totals.cost, change.cost, change.priced),
        no_cache=_add_money(totals.no_cache, change.no_cache, change.no_cache_priced),
        unpriced=totals.unpriced + change.unpriced,
        last_seen=_larger(totals.last_seen, change.last_seen),
    )


def change_of(touched: Iterable[tuple[Summed | None, Summed]]) -> Change:
    """The `Change` of (before, after) pairs of touched turns, before None for a new turn: what
    `derive_turns`'s statement sums in SQL, in Python (the tests hold the two equal;
    `telemetry.ingest.known_sessions` sends a single record's figures computed with it)."""
    pairs = list(touched)
    assert pairs, "a change touches at least one turn"

    def diff(name: str) -> int:
        return sum(getattr(a, name) - (getattr(b, name) if b else 0) for b, a in pairs)

    def money(name: str) -> Decimal:
        return sum(
            ((getattr(a, name) or Decimal(0)) - ((getattr(b, name) if b else None) or Decimal(0)))
            for b, a in pairs
        ) or Decimal(0)

    return Change(
        new_turns=sum(1 for b, _ in pairs if b is None),
        calls=diff("calls"),
        max_rounds=max(a.calls for _, a in pairs),
        peak=max(a.context_tokens for _, a in pairs),
        read=diff("cache_read_reported"),
        denominator=diff("cache_denominator"),
        reported=diff("cache_reported_calls"),
        cost=money("cost_usd"),
        priced=any(a.cost_usd is not None for _, a in pairs),
        no_cache=money("no_cache_cost_usd"),
        no_cache_priced=any(a.no_cache_cost_usd is not None for _, a in pairs),
        unpriced=diff("unpriced_calls"),
        last_seen=max(a.last_at for _, a in pairs),
    )


def joined(first: Totals, second: Totals) -> Totals:
    """The totals of the turns of `first` and of `second` together (two disjoint sets of a
    session's turns: those retention removed and those it kept, `derivation`): `first`
    advanced by `second`'s turns as if they were new (`advance`, the one rule)."""
    if not second.turns:
        return first
    assert second.max_rounds is not None and second.peak is not None
    assert second.last_seen is not None
    return advance(
        first,
        Change(
            new_turns=second.turns,
            calls=second.calls,
            max_rounds=second.max_rounds,
            peak=second.peak,
            read=second.read,
            denominator=second.denominator,
            reported=second.reported,
            cost=second.cost or Decimal(0),
            priced=second.cost is not None,
            no_cache=second.no_cache or Decimal(0),
            no_cache_priced=second.no_cache is not None,
            unpriced=second.unpriced,
            last_seen=second.last_seen,
        ),
    )


def totals_as_json(totals: Totals) -> dict[str, object]:
    """`totals` as JSON values (money as its exact decimal text, times as ISO 8601)."""
    return {
        "turns": totals.turns,
        "calls": totals.calls,
        "max_rounds": totals.max_rounds,
        "peak": totals.peak,
        "read": totals.read,
        "denominator": totals.denominator,
        "reported": totals.reported,
        "cost": None if totals.cost is None else str(totals.cost),
        "no_cache": None if totals.no_cache is None else str(totals.no_cache),
        "unpriced": totals.unpriced,
        "last_seen": None if totals.last_seen is None else totals.last_seen.isoformat(),
    }


_COUNTS = ("turns", "calls", "read", "denominator", "reported", "unpriced")
_MAXIMA = ("max_rounds", "peak")
_MONEY = ("cost", "no_cache")


def totals_from_json(found: object) -> Totals:
    """`totals_as_json`'s reverse; no totals (an empty `Totals`) for None. Anything else is
    refused with a ValueError naming the key (an imported session's line holds it)."""
    if found is None:
        return Totals()
    if not isinstance(found, dict):
        raise ValueError("must be an object")
    unknown = sorted(set(found) - {*_COUNTS, *_MAXIMA, *_MONEY, "last_seen"})
    if unknown:
        raise ValueError(f"{unknown[0]}: not a total")

    def count(name: str, *, nullable: bool = False) -> int | None:
        value = found.get(name, None if nullable else 0)
        if value is None and nullable:
            return None
        # the session's columns: token sums `bigint`, counts `integer`
        top = 2**63 - 1 if name in ("read", "denominator", "peak") else 2**31 - 1
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise ValueError(f"{name}: must be a whole number from 0 to {top}")
        return value

    def money(name: str) -> Decimal | None:
        value = found.get(name)
        if value is None:
            return None
        try:
            amount = Decimal(str(value)) if isinstance(value, str | int) else None
            # a session's money column holds 11 digits before the point (`money_field`)
            if amount is not None and (not amount.is_finite() or abs(amount) >= 10**11):
                amount = None
        except ArithmeticError:
            amount = None
        if amount is None or isinstance(value, bool):
            raise ValueError(f"{name}: must be a decimal amount or null")
        return amount

    seen = found.get("last_seen")
    last_seen = None
    if seen is not None:
        try:
            last_seen = datetime.fromisoformat(seen) if isinstance(seen, str) else None
        except ValueError:
            last_seen = None
        if last_seen is None or last_seen.tzinfo is None:
            raise ValueError("last_seen: must be an ISO 8601 time with its offset, or null")
    counts = {name: count(name) for name in _COUNTS}
    return Totals(
        **counts,  # type: ignore[arg-type]
        max_rounds=count("max_rounds", nullable=True),
        peak=count("peak", nullable=True),
        cost=money("cost"),
        no_cache=money("no_cache"),
        last_seen=last_seen,
    )


def of_turns(turns: Iterable[TurnSums]) -> Totals:
    """The totals of a session holding `turns`, from scratch (the definition)."""
    rows = list(turns)
    if not rows:
        return Totals()
    costs = [t.cost_usd for t in rows if t.cost_usd is not None]
    no_cache = [t.no_cache_cost_usd for t in rows if t.no_cache_cost_usd is not None]
    return Totals(
        turns=len(rows),
        calls=sum(t.calls for t in rows),
        max_rounds=max(t.calls for t in rows),
        peak=max(t.context_tokens for t in rows),
        read=sum(t.cache_read_reported for t in rows),
        denominator=sum(t.cache_denominator for t in rows),
        reported=sum(t.cache_reported_calls for t in rows),
        cost=sum(costs, Decimal(0)) if costs else None,
        no_cache=sum(no_cache, Decimal(0)) if no_cache else None,
        unpriced=sum(t.unpriced_calls for t in rows),
        last_seen=max(t.last_at for t in rows),
    )
