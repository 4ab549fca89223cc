"""A typed record (`telemetry.validation.typed`, OTLP's usual call) is answered by
`validate_items` exactly as the JSON object it stands for: the same outcome, the same record,
usage, payload hash and flags. `typed` restates `RecordIn`'s rules for the fields it takes, so
these draw values on both sides of every one of its checks; when it declines, the caller sends
the JSON object and nothing needs proving. No database needed (the schema imports ninja)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from telemetry.policy_rules import PolicyValues
from telemetry.schemas import MAX_ID, MAX_NAME, MAX_SMALL, RecordIn
from telemetry.validation import Typed, typed, validate_items

LATEST = datetime(2030, 1, 1, tzinfo=UTC)
POLICY = PolicyValues(reserved_output_tokens=1_000)


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` nine times in ten, else `odd`: most drawn records are then taken by `typed`,
    and the others each break one rule or two."""
    return st.integers(0, 9).flatmap(lambda n: odd if n == 0 else usual)


def _text(limit: int) -> st.SearchStrategy[Any]:
    """Text at and around `limit` characters, with what the rules refuse now and then."""
    pieces = st.sampled_from(["a", "b7", "é", "-", " ", ":"])
    usual = st.lists(pieces, min_size=1, max_size=8).map("".join)
    sized = st.sampled_from([1, limit - 1, limit]).map(lambda n: "x" * n)
    odd = st.sampled_from(["", "x" * (limit + 1), "/", "a\x00", "\ud800", "é\ud83d"])
    return _mostly(st.one_of(usual, sized), st.one_of(odd, st.integers(), st.none()))


_counts = _mostly(
    st.one_of(st.sampled_from([0, 1, 1_000, 1_001, MAX_SMALL]), st.integers(0, MAX_SMALL)),
    st.one_of(
        st.sampled_from([-1, MAX_SMALL + 1, True, False, "12", 3.0]),
        st.integers(),
        st.floats(allow_nan=True),
    ),
)
_usage_values = _mostly(
    st.one_of(st.integers(min_value=0, max_value=10**13), st.sampled_from(["anthropic", "12"])),
    st.one_of(
        st.integers(min_value=-5, max_value=10**13),
        st.sampled_from(["a\x00b", "\ud83d", "", True, None, 1.5, float("nan")]),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.sampled_from(["k", "k\x00"]), st.integers(), max_size=2),
    ),
)
_usage_keys = _mostly(
    st.sampled_from(
        [
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.provider.name",
        ]
    ),
    st.sampled_from(
        [
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.provider.name",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "key\x00",
            "\ud800",
        ]
    ),
)
_usage = _mostly(
    st.dictionaries(_usage_keys, _usage_values, max_size=6),
    st.sampled_from([None, [], {"gen_ai.usage.input_tokens": 1.0}]),
)
_times = st.one_of(
    st.none(),
    st.datetimes(  # hypothesis bounds are naive
        min_value=datetime(1, 1, 2),  # noqa: DTZ001
        max_value=datetime(9999, 12, 30),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    st.sampled_from(
        [
            LATEST,
            LATEST + timedelta(microseconds=1),
            datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))),
            datetime(2026, 1, 1),  # noqa: DTZ001  (naive: declined, refused as JSON)
        ]
    ),
)


@st.composite
def _values(draw: st.DrawFn) -> dict[str, Any]:
    values: dict[str, Any] = {
        "session_id": draw(_text(MAX_ID)),
        "turn": draw(_counts),
        "model": draw(_text(MAX_ID)),
        "usage": draw(_usage),
    }
    for name, strategy in (
        ("call", _counts),
        ("request_id", _text(MAX_ID)),
        ("provider", _text(MAX_NAME)),
        ("agent", _text(MAX_NAME)),
        ("window_tokens", _counts),
        ("diagnostics", st.just({"cache_miss_reason": {"type": "x"}})),
    ):
        if draw(st.booleans()) and (name != "diagnostics" or draw(st.integers(0, 9)) == 0):
            values[name] = draw(strategy)
    if draw(st.integers(0, 19)) == 0:  # now and then a field is missing
        del values[draw(st.sampled_from(sorted(values)))]
    return values


_USUAL = {
    "session_id": "s" * MAX_ID,
    "turn": MAX_SMALL,
    "call": 0,
    "model": "m" * MAX_ID,
    "provider": "o" * MAX_NAME,
    "agent": "claude-code",
    "request_id": "r" * MAX_ID,
    "window_tokens": 1_001,
    "usage": {
        "gen_ai.usage.input_tokens": 20_000,
        "gen_ai.usage.output_tokens": 400,
        "gen_ai.usage.cache_read.input_tokens": 18_000,
        "gen_ai.provider.name": "anthropic",
    },
}


def _answer(item: object) -> tuple[Any, ...]:
    outcomes, valid = validate_items([item], policy=POLICY, batch=True, latest_at=LATEST)
    return outcomes, [
        (v.index, v.record.model_dump(), v.usage, v.payload_hash, v.provided, v.plain, v.diagnosis)
        for v in valid
    ]


@settings(max_examples=400, deadline=None)
@given(_values(), _times)
@example(_USUAL, LATEST)
@example(_USUAL, None)
@example({**_USUAL, "window_tokens": 1_000}, None)  # the window check still runs
@example({**_USUAL, "usage": {"gen_ai.usage.input_tokens": 5}}, None)  # so does the usage's
def test_a_typed_record_is_answered_as_its_json_object(values, at):
    built = typed(values, at)
    event("typed" if built is not None else "declined")
    if built is None:
        return
    sent = dict(values) if at is None else {**values, "at": at.isoformat()}
    assert isinstance(built, Typed)
    assert _answer(built) == _answer(sent)
    RecordIn.model_validate(sent)  # its fields keep every rule


def test_the_boundaries_of_every_check():
    """Each limit is taken at the limit and declined one past it (declined: sent as JSON, whose
    validation refuses it)."""
    assert typed(_USUAL, LATEST) is not None
    assert typed(_USUAL, None) is not None
    for name, past in (
        ("session_id", "s" * (MAX_ID + 1)),
        ("session_id", ""),
        ("session_id", "a/b"),
        ("model", "m\x00"),
        ("request_id", "r" * (MAX_ID + 1)),
        ("provider", "o" * (MAX_NAME + 1)),
        ("agent", ""),
        ("turn", MAX_SMALL + 1),
        ("turn", -1),
        ("turn", True),
        ("call", -1),
        ("window_tokens", 0),
        ("usage", {"gen_ai.usage.input_tokens": 1.0}),
        ("usage", {"gen_ai.usage.input_tokens": "a\x00"}),
        ("usage", {"\ud800": 1}),
        ("usage", {"gen_ai.provider.name": "é\ud83d"}),  # the flat usage's own pass
        ("usage", {"k\x00": 1}),
        ("usage", {"k": 1, "n": [1, "\ud800"]}),  # not flat: the walks
        ("model", "é\ud83d"),
        ("request_id", "\udc00"),
        ("diagnostics", {}),
    ):
        assert typed({**_USUAL, name: past}, None) is None, name
        assert _answer({**_USUAL, name: past})[1] == [] or name == "diagnostics"
    assert typed({**_USUAL, "window_tokens": 1}, None) is not None
    assert typed({**_USUAL, "turn": 0, "call": MAX_SMALL}, None) is not None
    naive = datetime(2026, 1, 1)  # noqa: DTZ001
    for at in (naive, datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=1)))):
        assert typed(_USUAL, at) is None
    missing = dict(_USUAL)
    del missing["model"]
    assert typed(missing, None) is None
