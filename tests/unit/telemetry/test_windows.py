"""The window in force and the overflow-text parser (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core.overflow_limit import parse_overflow_limit
from telemetry.errors import FieldError
from telemetry.pricing import SEED_CATALOGUE, find_price
from telemetry.windows import (
    LearnedWindow,
    format_window_overrides,
    parse_window_overrides,
    window_in_force,
)


def resolve(**overrides: object) -> object:
    args: dict[str, object] = {
        "model": "claude-opus-4-6",
        "record_window": None,
        "learned": None,
        "overrides": {},
        "family": "claude-opus-4-6",
        "catalogue_window": 200_000,
    }
    args.update(overrides)
    found = window_in_force(**args)  # type: ignore[arg-type]
    return None if found is None else (found.tokens, found.source)


def test_the_record_wins_over_everything():
    assert resolve(
        record_window=1_000_000,
        learned=LearnedWindow("claude-opus-4-6", 150_000),
        overrides={"claude-opus-4-6": 300_000, "*": 400_000},
    ) == (1_000_000, "record")


def test_a_learned_limit_beats_the_profile_but_only_for_its_model():
    learned = LearnedWindow("claude-opus-4-6", 150_000)
    assert resolve(learned=learned, overrides={"*": 400_000}) == (150_000, "overflow")
    assert resolve(learned=learned, model="claude-sonnet-4-6", family=None) == (
        200_000,
        "catalogue",
    )


def test_profile_model_then_family_then_default_then_catalogue():
    assert resolve(overrides={"claude-opus-4-6": 1_000_000, "*": 300_000}) == (
        1_000_000,
        "profile_model",
    )
    assert resolve(model="claude-opus-4-6-20260101", overrides={"claude-opus-4-6": 900_000}) == (
        900_000,
        "profile_model",
    )
    assert resolve(overrides={"*": 300_000}) == (300_000, "profile_default")
    assert resolve(overrides={"*": "lots", "claude-opus-4-6": 0}) == (200_000, "catalogue")
    assert resolve(catalogue_window=None) is None


def test_the_seed_catalogue_keeps_standard_and_opt_in_windows_apart():
    opus = find_price("claude-opus-4-6", SEED_CATALOGUE)
    assert opus is not None
    assert (opus.window_tokens, opus.max_window_tokens) == (200_000, 1_000_000)
    for price in SEED_CATALOGUE:
        assert price.max_window_tokens is None or price.max_window_tokens >= price.window_tokens


@pytest.mark.parametrize(
    ("text", "limit", "requested"),
    [
        ("prompt is too long: 210345 tokens > 200000 maximum", 200_000, 210_345),
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":'
            '"prompt is too long: 1,012,345 tokens > 1,000,000 maximum"}}',
            1_000_000,
            1_012_345,
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130601 tokens. Please reduce the length of the messages.",
            128_000,
            130_601,
        ),
        (
            "Your input exceeds the context window of this model. The maximum context window "
            "is 400000 tokens.",
            400_000,
            None,
        ),
        ("Input exceeds the context window of 272000 tokens", 272_000, None),
    ],
)
def test_overflow_texts_state_the_limit(text, limit, requested):
    found = parse_overflow_limit(text)
    assert found is not None
    assert (found.limit, found.requested) == (limit, requested)


@pytest.mark.parametrize(
    "text", ["", "prompt is too long", "rate limited", "0 tokens > 0 maximum", "context window"]
)
def test_texts_without_a_limit_teach_nothing(text):
    assert parse_overflow_limit(text) is None


def test_window_overrides_text_round_trips_and_names_the_bad_line():
    parsed = parse_window_overrides("# opus runs 1M\nclaude-opus-4-6 = 1_000_000\n* = 200,000\n")
    assert parsed == {"claude-opus-4-6": 1_000_000, "*": 200_000}
    assert parse_window_overrides(format_window_overrides(parsed)) == parsed
    for bad, line in [("a = 1\nb", "line 2"), ("x = -5", "line 1"), ("x = 1\nx = 2", "line 2")]:
        with pytest.raises(FieldError) as error:
            parse_window_overrides(bad)
        assert error.value.field == line


@given(
    st.dictionaries(
        st.from_regex(r"[a-z*][a-z0-9.-]{0,20}", fullmatch=True), st.integers(1, 2**31 - 1)
    )
)
def test_any_valid_overrides_survive_the_text_form(overrides):
    assert parse_window_overrides(format_window_overrides(overrides)) == overrides
