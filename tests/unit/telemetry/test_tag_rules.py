"""Operator tags (telemetry.tag_rules): what a tag may be, normalised once, the limits held."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.tag_rules import (
    MAX_TAGS_PER_CHANGE,
    MAX_TAGS_PER_SESSION,
    TAG_CHARS,
    TAG_PATTERN,
    TagError,
    normalise,
    parse_tags,
    tag_problem,
    tags_after_adding,
)


@given(st.text(max_size=60))
def test_normalising_is_idempotent_and_a_kept_tag_matches_the_pattern(text):
    once = normalise(text)
    assert normalise(once) == once
    if tag_problem(once) is None:
        assert re.fullmatch(TAG_PATTERN.strip("^$"), once)
        assert 1 <= len(once) <= TAG_CHARS


@pytest.mark.parametrize(
    ("typed", "tag"),
    [(" Needs Review ", "needs-review"), ("team:billing", "team:billing"), ("A/B", "a/b")],
)
def test_what_an_operator_types_becomes_one_tag(typed, tag):
    assert parse_tags([typed]) == (tag,)


def test_the_length_limit_is_exact():
    assert tag_problem("a" * TAG_CHARS) is None
    assert "at most 40" in (tag_problem("a" * (TAG_CHARS + 1)) or "")


@pytest.mark.parametrize("bad", ["-lead", "a b\x00", "naïve", "<b>", "_x"])
def test_a_bad_tag_is_refused_on_the_tags_field(bad):
    with pytest.raises(FieldError) as caught:
        parse_tags([f"fine, {bad}"])
    assert caught.value.field == "tags" and caught.value.status == 422


def test_several_tags_in_one_input_are_split_on_commas_and_kept_once_in_order():
    assert parse_tags(["b, a,,B ", "c"]) == ("b", "a", "c")
    assert parse_tags([" , "]) == ()


def test_one_change_names_at_most_the_limit():
    names = [f"t{i}" for i in range(MAX_TAGS_PER_CHANGE)]
    assert len(parse_tags([",".join(names)])) == MAX_TAGS_PER_CHANGE
    with pytest.raises(TagError, match="at once"):
        parse_tags([",".join([*names, "one-more"])])


@given(
    st.sets(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=25),
    st.sets(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=25),
)
def test_adding_never_passes_the_session_limit_and_keeps_what_was_held(held, added):
    if len(held | added) > MAX_TAGS_PER_SESSION:
        with pytest.raises(TagError, match="at most 20"):
            tags_after_adding(held, added)
    else:
        after = tags_after_adding(held, added)
        assert after == tuple(sorted(held | added))


@given(st.lists(st.text(max_size=50), max_size=5))
def test_whatever_is_typed_is_refused_or_becomes_distinct_valid_tags(texts):
    try:
        tags = parse_tags(texts)
    except TagError as exc:
        assert exc.field == "tags" and exc.message
    else:
        assert len(set(tags)) == len(tags) <= MAX_TAGS_PER_CHANGE
        assert all(tag_problem(tag) is None for tag in tags)
