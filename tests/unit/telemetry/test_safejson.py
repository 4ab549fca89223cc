"""The one JSON rule (issue 16): what parses but cannot be kept is named, never raised raw."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry import safejson
from telemetry.errors import FieldError


def test_a_lone_surrogate_is_named_by_its_path():
    value = safejson.decode('{"messages": [{"content": [{"text": "a\\ud83d"}]}]}')
    assert safejson.problem(value) == (
        "messages.0.content.0.text",
        safejson._SURROGATE_MESSAGE,
    )


def test_a_surrogate_pair_is_text():
    assert safejson.loads('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


def test_a_surrogate_key_is_named_with_its_escape():
    field, message = safejson.problem(safejson.decode('{"u": {"\\udc00": 1}}')) or ("", "")
    assert field == "u.\\udc00" and message.startswith("key ")


@pytest.mark.parametrize("text", ['{"x": NaN}', '{"x": [Infinity]}', '{"x": -1e999}'])
def test_non_finite_numbers_are_refused(text):
    with pytest.raises(FieldError) as caught:
        safejson.loads(text)
    assert caught.value.field.startswith("x")


def test_depth_over_the_limit_is_refused_and_at_the_limit_accepted():
    at_limit = "[" * safejson.MAX_DEPTH + "]" * safejson.MAX_DEPTH
    assert safejson.problem(json.loads(at_limit)) is None
    over = "[" * (safejson.MAX_DEPTH + 1) + "]" * (safejson.MAX_DEPTH + 1)
    assert safejson.problem(json.loads(over)) is not None


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "9" * 5000])
def test_what_python_cannot_decode_is_unsafe_not_recursion_or_value_error(text):
    with pytest.raises(FieldError) as caught:
        safejson.decode(text)
    assert caught.value.field == "body"


def test_malformed_json_stays_a_decode_error():
    with pytest.raises(json.JSONDecodeError):
        safejson.decode("{")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(_json)
def test_whatever_passes_the_rule_encodes_as_utf8_json(value):
    if safejson.problem(value) is None:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
        assert json.loads(text) == value


_risky_text = st.lists(st.sampled_from(["a", "é", "\ud83d", "\ude00", "\U0001f600", "x.y"])).map(
    "".join
) | st.text(max_size=5)
_risky_leaf = (
    st.none() | st.booleans() | st.integers() | st.floats() | _risky_text  # NaN, ±inf included
)


def _nest(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def _nested(depth: int) -> st.SearchStrategy[object]:
    return st.integers(1, depth).map(_nest)


_risky = st.recursive(
    _risky_leaf | _nested(safejson.MAX_DEPTH + 2),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_risky_text, children, max_size=4)
    ),
    max_leaves=20,
)


@given(_risky, st.sampled_from(["", "records.3"]))
def test_the_quick_pass_answers_as_the_full_walk(value, base):
    # The full walk is the oracle: same field, same message, or None for both.
    assert safejson.problem(value, base=base) == safejson._first_problem(value, base=base)


@pytest.mark.parametrize(
    "value",
    [
        "é\ud83d",
        ["ascii", "é \ud83d"],
        {"a": "ok", "b": "\ude00é"},
        {"é\udc00": 1},
        {"a": [{"b": "x\ud800"}]},
    ],
)
def test_the_quick_pass_searches_text_that_is_not_ascii(value):
    # the quick pass skips only strings CPython marks ASCII; anything else is still searched
    assert not safejson._keeps_rule(value, 1)
    assert safejson.problem(value) is not None


@pytest.mark.parametrize("value", ["ascii", {"k": "é \U0001f600", "é": ["\U0001f600"]}])
def test_text_without_a_lone_surrogate_keeps_the_rule(value):
    assert safejson._keeps_rule(value, 1) and safejson.problem(value) is None


def _containers(count: int) -> dict[str, object]:
    """`count` dicts, each inside the last."""
    value: dict[str, object] = {}
    for _ in range(count - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1.5},  # a float: encoders spell exponents apart
        {"a": [1, 2.0]},
        {"a": "x\ud800"},  # a lone surrogate
        {"a": Decimal("1.5")},  # not JSON's own types
        {"a": (1, 2)},
        {"a": b"bytes"},
        {1: "a non-text key"},
        _containers(safejson.MAX_DEPTH + 1),
    ],
)
def test_is_plain_refuses_floats_surrogates_foreign_types_and_depth(value):
    assert not safejson.is_plain(value)


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": None, "b": True, "c": -(2**70), "d": "é\U0001f600\x00", "e": [[], {}, [{"f": 1}]]},
        _containers(safejson.MAX_DEPTH),
    ],
)
def test_is_plain_passes_json_without_floats(value):
    assert safejson.is_plain(value) and safejson.problem(value) is None
