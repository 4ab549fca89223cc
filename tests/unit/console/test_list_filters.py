"""The sessions list's tag and range filters (console.list_filters): one parser for the page,
its exports and the read API; every bad value named, nothing bad used."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.list_filters import (
    BOUNDS,
    MAX_COST,
    MAX_TAG_FILTERS,
    PARAMETERS,
    bound_lookups,
    first_error,
    parse_list_filters,
)


def parse(**query: str | list[str]):
    def getlist(name: str) -> list[str]:
        value = query.get(name, [])
        return [value] if isinstance(value, str) else value

    return parse_list_filters(getlist)


def test_nothing_asked_is_no_filter():
    found, errors = parse()
    assert not found and errors == {}


def test_tags_are_normalised_once_each():
    found, errors = parse(tag=["Needs Review", "needs-review", "billing", ""])
    assert found.tags == ("needs-review", "billing") and errors == {}


def test_a_bad_tag_is_named_and_the_good_ones_kept():
    found, errors = parse(tag=["ok", "-bad"])
    assert found.tags == ("ok",) and "tag" in errors


def test_more_tags_than_the_limit_are_cut_and_said():
    found, errors = parse(tag=[f"t{i}" for i in range(MAX_TAG_FILTERS + 3)])
    assert len(found.tags) == MAX_TAG_FILTERS and errors["tag"] == "at most 20 tags"


@pytest.mark.parametrize(
    ("param", "text", "message"),
    [
        ("cost_min", "abc", "must be a number"),
        ("cost_min", "NaN", "must be a number"),
        ("cost_max", "Infinity", "must be a number"),
        ("cost_min", "-0.01", "must be 0 or more"),
        ("turns_min", "2.5", "must be a whole number"),
        ("turns_max", "1" * 21, "must be at most 20 characters"),
        ("cost_max", str(MAX_COST + 1), f"must be at most {MAX_COST}"),
    ],
)
def test_a_bad_bound_is_named_with_why_and_not_used(param, text, message):
    found, errors = parse(**{param: text})
    assert errors == {param: message}
    assert found.value(param) is None


def test_the_bounds_are_inclusive_at_their_limits():
    found, errors = parse(cost_min="0", cost_max=str(MAX_COST), turns_min="0", turns_max="7")
    assert errors == {}
    assert bound_lookups(found.bounds) == [
        ("cost_usd__gte", Decimal(0)),
        ("cost_usd__lte", MAX_COST),
        ("turns_count__gte", 0),
        ("turns_count__lte", 7),
    ]


def test_a_max_below_its_min_is_a_bad_max():
    found, errors = parse(cost_min="2", cost_max="1.99")
    assert errors == {"cost_max": "must be at least cost_min (2)"}
    assert found.bounds == (("cost_min", Decimal(2)),)
    # equal ends are one value, not an error
    assert parse(cost_min="2", cost_max="2.0")[1] == {}


def test_the_first_error_follows_the_parameters_reading_order():
    _, errors = parse(turns_max="x", tag="-", cost_min="y")
    assert first_error(errors) == ("tag", errors["tag"])
    assert first_error({}) is None
    assert {"tag", "cost_min", "cost_max", "turns_min", "turns_max"} == PARAMETERS


@given(
    st.decimals(min_value=0, max_value=MAX_COST, allow_nan=False, places=6),
    st.decimals(min_value=0, max_value=MAX_COST, allow_nan=False, places=6),
)
def test_any_two_cost_bounds_either_both_hold_or_the_max_is_named(low, high):
    found, errors = parse(cost_min=str(low), cost_max=str(high))
    if high < low:
        assert set(errors) == {"cost_max"} and found.value("cost_max") is None
    else:
        assert errors == {} and (found.value("cost_min"), found.value("cost_max")) == (low, high)


def test_every_bound_has_a_min_and_a_max_parameter():
    assert [b.params for b in BOUNDS] == [("cost_min", "cost_max"), ("turns_min", "turns_max")]
