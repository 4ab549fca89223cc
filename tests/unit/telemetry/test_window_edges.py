"""The window rule at its edges: the API's overflow parser names the field it refuses, the
override text's messages word for word with counts at and past their limits, and each source's
label."""

from __future__ import annotations

import pytest

from telemetry.errors import FieldError
from telemetry.windows import (
    MAX_WINDOW,
    SOURCE_LABELS,
    LearnedWindow,
    WindowInForce,
    format_window_overrides,
    parse_overflow_limit,
    parse_window_overrides,
    window_in_force,
)


def test_the_api_parser_reads_what_the_core_reads():
    found = parse_overflow_limit("prompt is too long: 210345 tokens > 200000 maximum")
    assert found is not None and (found.limit, found.requested) == (200_000, 210_345)
    assert parse_overflow_limit("rate limited") is None


def test_a_number_of_more_than_18_digits_is_a_field_error_on_the_named_field():
    text = f"prompt is too long: {'9' * 19} tokens > 200000 maximum"
    with pytest.raises(FieldError) as caught:
        parse_overflow_limit(text)
    assert (caught.value.field, caught.value.message, caught.value.status) == (
        "detail",
        "states a number of 19 digits; a token count has at most 18",
        422,
    )
    with pytest.raises(FieldError) as named:
        parse_overflow_limit(text, field="error.message")
    assert named.value.field == "error.message"
    assert isinstance(named.value.__cause__, ValueError)


def refused(text: str) -> tuple[str, str]:
    with pytest.raises(FieldError) as caught:
        parse_window_overrides(text)
    return caught.value.field, caught.value.message


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("a", "line 1", "write `model = tokens` (or `* = tokens`)"),
        ("\n\n = 5", "line 3", "write `model = tokens` (or `* = tokens`)"),
        ("a = 0", "line 1", "'0' is not a positive number of tokens"),
        ("a = -5", "line 1", "'-5' is not a positive number of tokens"),
        ("a = 1.5", "line 1", "'1.5' is not a positive number of tokens"),
        ("a =", "line 1", "'' is not a positive number of tokens"),
        (
            f"a = {MAX_WINDOW + 1}",
            "line 1",
            f"'{MAX_WINDOW + 1}' is not a positive number of tokens",
        ),
        ("a = 1\n# b = 2\na = 3", "line 3", "'a' is set twice"),
    ],
)
def test_a_bad_line_is_named_with_what_is_wrong(text, field, message):
    assert refused(text) == (field, message)


def test_counts_from_one_to_the_largest_window_are_accepted_with_separators():
    text = f"a = 1\nb = {MAX_WINDOW}\nc = 1_000,000  # a comment\n  \n#only a comment\nd=7"
    assert parse_window_overrides(text) == {"a": 1, "b": MAX_WINDOW, "c": 1_000_000, "d": 7}


def test_the_name_ends_at_the_first_equals_sign():
    assert refused("a = b = 5") == ("line 1", "'b = 5' is not a positive number of tokens")


def test_the_text_form_puts_the_default_first_and_drops_invalid_figures():
    stored: dict[str, object] = {
        "b-model": 300_000,
        "*": 200_000,
        "a-model": 400_000,
        "bad": 0,
        "worse": "lots",
        "bool": True,
        "huge": MAX_WINDOW + 1,
    }
    assert format_window_overrides(stored) == "* = 200000\na-model = 400000\nb-model = 300000"
    assert format_window_overrides({}) == ""


def _resolve(**overrides: object) -> WindowInForce | None:
    args: dict[str, object] = {
        "model": "m",
        "record_window": None,
        "learned": None,
        "overrides": {},
        "family": None,
        "catalogue_window": None,
    }
    return window_in_force(**(args | overrides))  # type: ignore[arg-type]


def test_each_source_says_where_its_figure_came_from():
    cases = [
        (_resolve(record_window=5), "record"),
        (_resolve(learned=LearnedWindow("m", 6)), "overflow"),
        (_resolve(overrides={"m": 7}), "profile_model"),
        (_resolve(family="f", overrides={"f": 8}), "profile_model"),
        (_resolve(overrides={"*": 9}), "profile_default"),
        (_resolve(catalogue_window=10), "catalogue"),
    ]
    assert [(w.tokens, w.source) for w, _ in cases if w is not None] == [
        (5, "record"),
        (6, "overflow"),
        (7, "profile_model"),
        (8, "profile_model"),
        (9, "profile_default"),
        (10, "catalogue"),
    ]
    for window, source in cases:
        assert window is not None and window.label == SOURCE_LABELS[source]  # type: ignore[index]
    assert _resolve(record_window=5).label == "reported by the agent with the call"  # type: ignore[union-attr]


def test_the_model_wins_over_its_family_and_invalid_figures_fall_through():
    assert _resolve(family="f", overrides={"m": 7, "f": 8}) == WindowInForce(7, "profile_model")
    assert _resolve(family="f", overrides={"m": True, "f": 8}) == WindowInForce(8, "profile_model")
    assert _resolve(family="f", overrides={"m": 0, "f": 0, "*": 9}) == WindowInForce(
        9, "profile_default"
    )
    assert _resolve(overrides={"*": MAX_WINDOW + 1}, catalogue_window=10) == WindowInForce(
        10, "catalogue"
    )
    assert _resolve(overrides={"*": MAX_WINDOW}) == WindowInForce(MAX_WINDOW, "profile_default")
    assert _resolve(learned=LearnedWindow("other", 6)) is None
    assert _resolve(record_window=0, catalogue_window=10) == WindowInForce(0, "record")


def test_a_comment_starts_at_the_first_hash():
    assert parse_window_overrides("a = 5 # one # two\n(beta) = 6") == {"a": 5, "(beta)": 6}


def test_the_default_comes_first_even_before_names_that_sort_before_it():
    assert format_window_overrides({"(beta)": 2, "*": 1, " x": 3}) == "* = 1\n x = 3\n(beta) = 2"
