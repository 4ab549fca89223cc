"""Saved views (console.view_rules): the name and the query a view keeps."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.view_rules import NAME_CHARS, QUERY_CHARS, saved_query, view_name
from telemetry.errors import FieldError


def test_a_name_is_trimmed_with_inner_space_collapsed():
    assert view_name("  Billing   agents\n") == "Billing agents"
    assert view_name("x" * NAME_CHARS) == "x" * NAME_CHARS


@pytest.mark.parametrize("bad", ["", "   ", "x" * (NAME_CHARS + 1), "a\x00b", "a\x7fb"])
def test_a_bad_name_is_refused_on_the_name_field(bad):
    with pytest.raises(FieldError) as caught:
        view_name(bad)
    assert caught.value.field == "name"


def test_the_query_drops_the_page_the_token_and_blanks_and_keeps_order_and_repeats():
    pairs = [("page", "3"), ("tag", "b"), ("q", " "), ("tag", "a"), ("csrfmiddlewaretoken", "t")]
    assert saved_query(pairs) == "tag=b&tag=a"


def test_a_query_past_the_limit_is_refused_on_the_query_field():
    with pytest.raises(FieldError) as caught:
        saved_query([("q", "x" * QUERY_CHARS)])
    assert caught.value.field == "query"


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=20)), max_size=8))
def test_a_saved_query_reads_back_as_the_pairs_kept(pairs):
    kept = [(k, v) for k, v in pairs if k not in {"page", "csrfmiddlewaretoken"} and v.strip()]
    kept = [(k, v) for k, v in kept if k.strip()]
    assert parse_qsl(saved_query(pairs), keep_blank_values=True) == kept
