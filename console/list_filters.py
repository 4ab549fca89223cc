"""The sessions list's tag and range filters, parsed once for the page, its exports and the
read API (`GET /api/v1/sessions`): one parser, one message per bad field.

Pure (no Django). `?tag=a&tag=b` selects the sessions holding any of the tags; `?cost_min=` and
`?cost_max=` bound the session's cost in US dollars, `?turns_min=` and `?turns_max=` its turns,
both ends inclusive. A page shows a bad value's message beside the filters and ignores that
value (a list never fails to show); the API refuses it, 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from telemetry.tag_rules import normalise, tag_problem

MAX_TAG_FILTERS: Final = 20  # tags one query may name (as the other multi-selects)
NUMBER_CHARS: Final = 20
MAX_COST: Final = Decimal(10) ** 9
MAX_TURNS: Final = 2**31 - 1


@dataclass(frozen=True)
class Bound:
    """A range filter: `<name>_min` and `<name>_max` over a session column."""

    name: str
    column: str
    label: str
    integer: bool

    @property
    def params(self) -> tuple[str, str]:
        return (f"{self.name}_min", f"{self.name}_max")

    @property
    def limit(self) -> Decimal:
        return Decimal(MAX_TURNS) if self.integer else MAX_COST


# The range filters: the one list the form, the SQL and the API's parameters are made from.
BOUNDS: Final = (
    Bound("cost", "cost_usd", "Cost, US$", integer=False),
    Bound("turns", "turns_count", "Turns", integer=True),
)
PARAMETERS: Final = frozenset({"tag", *(p for bound in BOUNDS for p in bound.params)})
# the parameters that take several values (the API refuses any other given twice)
REPEATABLE: Final = frozenset({"tag"})


@dataclass(frozen=True)
class ListFilters:
    """The parsed tag and range filters (empty: no narrowing)."""

    tags: tuple[str, ...] = ()
    # (parameter, bound) pairs, e.g. ("cost_min", Decimal("0.5")); only the valid ones
    bounds: tuple[tuple[str, Decimal], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tags or self.bounds)

    def value(self, param: str) -> Decimal | None:
        return dict(self.bounds).get(param)


def _number(text: str, bound: Bound) -> Decimal:
    """`text` as a bound of `bound`, or ValueError saying why."""
    if len(text) > NUMBER_CHARS:
        raise ValueError(f"must be at most {NUMBER_CHARS} characters")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError("must be a number") from None
    if not number.is_finite():
        raise ValueError("must be a number")
    if bound.integer and number != number.to_integral_value():
        raise ValueError("must be a whole number")
    if number < 0:
        raise ValueError("must be 0 or more")
    if number > bound.limit:
        raise ValueError(f"must be at most {bound.limit}")
    return number


def parse_list_filters(
    getlist: Callable[[str], Sequence[str]],
) -> tuple[ListFilters, dict[str, str]]:
    """The filters in a query (`getlist(name)` gives a parameter's values), and a message per
    bad parameter ({} when every value is good). Blank values are no filter. A range whose
    `_max` is below its `_min` is a bad `_max`."""
    errors: dict[str, str] = {}
    tags: dict[str, None] = {}
    for text in getlist("tag"):
        tag = normalise(text)
        if not tag:
            continue
        problem = tag_problem(tag)
        if problem is not None:
            errors.setdefault("tag", problem)
            continue
        tags[tag] = None
    if len(tags) > MAX_TAG_FILTERS:
        errors["tag"] = f"at most {MAX_TAG_FILTERS} tags"
        tags = dict.fromkeys(list(tags)[:MAX_TAG_FILTERS])
    bounds: list[tuple[str, Decimal]] = []
    for bound in BOUNDS:
        low_param, high_param = bound.params
        found: dict[str, Decimal] = {}
        for param in bound.params:
            values = [v.strip() for v in getlist(param) if v.strip()]
            if not values:
                continue
            try:
                found[param] = _number(values[-1], bound)
            except ValueError as exc:
                errors[param] = str(exc)
        low, high = found.get(low_param), found.get(high_param)
        if low is not None and high is not None and high < low:
            errors[high_param] = f"must be at least {low_param} ({low})"
            del found[high_param]
        bounds.extend(found.items())
    return ListFilters(tuple(tags), tuple(bounds)), errors


_BOUND_OF: Final = {param: bound for bound in BOUNDS for param in bound.params}


def bound_lookups(bounds: Sequence[tuple[str, Decimal]]) -> list[tuple[str, Decimal | int]]:
    """The ORM lookups of parsed bounds: `cost_min=0.5` is `cost_usd__gte=0.5`, `turns_max=9`
    is `turns_count__lte=9` (both ends inclusive; whole numbers for integer columns)."""
    lookups: list[tuple[str, Decimal | int]] = []
    for param, value in bounds:
        bound = _BOUND_OF[param]
        operator = "gte" if param == bound.params[0] else "lte"
        lookups.append((f"{bound.column}__{operator}", int(value) if bound.integer else value))
    return lookups


def first_error(errors: dict[str, str]) -> tuple[str, str] | None:
    """The first bad parameter and its message, in `PARAMETERS`' reading order (tag, then each
    range's min and max), or None."""
    for param in ("tag", *(p for bound in BOUNDS for p in bound.params)):
        if param in errors:
            return param, errors[param]
    return None
