"""A typed record (`telemetry.validation.typed`, OTLP's usual call) is answered by
`validate_items` exactly as the JSON object it stands for: the same outcome, the same record,
usage, payload hash and flags. `typed` restates `RecordIn`'s rules for the fields it takes, so
these draw values on both sides of every one of its checks; when it declines, the caller sends
the JSON object and nothing needs proving. So is a JSON object `usual_record` takes (the same
checks, and `at` as text) answered as its validation answers it. No database needed (the
schema imports ninja)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from unittest import mock

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from telemetry.policy_rules import PolicyValues
from telemetry.schemas import MAX_ID, MAX_NAME, MAX_SMALL, RecordIn
from telemetry.validation import Typed, typed, usual_record, validate_items

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


# `at` as an agent may spell it: `isoformat()` of a UTC time (what `usual_record` takes), and
# what it leaves to the validation: other offsets, `Z`, zero microseconds written out, a day
# the calendar lacks, the first and last years, an hour 24, a leap second, other digits, and
# values that are not text.
_canonical_times = st.datetimes(
    min_value=datetime(1, 1, 1),  # noqa: DTZ001
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(datetime.isoformat)
_odd_times: st.SearchStrategy[Any] = st.one_of(
    st.datetimes(timezones=st.sampled_from([timezone(timedelta(hours=2)), timezone.min])).map(
        datetime.isoformat
    ),
    st.sampled_from(
        [
            "2026-02-28T12:00:00Z",
            "2026-02-28T12:00:00.000000+00:00",
            "2026-02-28T12:00:00.5+00:00",
            "2026-02-29T12:00:00+00:00",
            "2024-02-29T12:00:00+00:00",
            "2026-13-01T00:00:00+00:00",
            "2026-04-31T00:00:00+00:00",
            "0000-01-01T00:00:00+00:00",
            "0001-01-01T00:00:00+00:00",
            "0002-01-01T00:00:00+00:00",
            "9998-12-31T23:59:59.999999+00:00",
            "9999-01-01T00:00:00+00:00",
            "2026-01-01T24:00:00+00:00",
            "2026-06-30T23:59:60+00:00",
            "2026-01-01 00:00:00+00:00",
            "2026-01-01T00:00:00-00:00",
            "2026-01-01T00:00:00",
            "2026-01-01",
            "\uff12026-01-01T00:00:00+00:00",
            "2029-12-31T23:59:59.999999+00:00",
            "2030-01-01T00:00:00+00:00",
            "2030-01-01T00:00:00.000001+00:00",
            "",
        ]
    ),
    st.sampled_from([None, 0, 1_700_000_000, True, 1.5, [], {}]),
)


@st.composite
def _json_records(draw: st.DrawFn) -> dict[str, Any]:
    values = draw(_values())
    for name in ("request_chars", "appended_chars", "surface_version"):
        if draw(st.booleans()):
            values[name] = draw(_counts)
    if draw(st.integers(0, 9)) == 0:  # a field `usual_record` leaves to the validation
        values[draw(st.sampled_from(["metadata", "prefix", "output_items", "nonsense"]))] = None
    if draw(st.integers(0, 4)):
        values["at"] = draw(_mostly(_canonical_times, _odd_times))
    return values


def _validated(item: object) -> tuple[Any, ...]:
    """`_answer` with every object validated (`usual_record` declining all)."""
    with mock.patch("telemetry.validation.usual_record", return_value=None):
        return _answer(item)


@settings(max_examples=600, deadline=None)
@given(_json_records())
@example({**_USUAL, "at": "2029-12-31T23:59:59.999999+00:00"})
@example({**_USUAL, "at": "2030-01-01T00:00:00.000001+00:00"})  # after LATEST: refused
@example({**_USUAL, "at": "0002-01-01T00:00:00+00:00"})
@example({**_USUAL, "at": "9998-12-31T23:59:59.999999+00:00"})
@example({**_USUAL, "at": None, "appended_chars": MAX_SMALL, "surface_version": 0})
def test_a_usual_json_record_is_answered_as_its_validation_answers_it(values):
    taken = usual_record(values)
    event("taken" if taken is not None else "declined")
    assert _answer(values) == _validated(values)
    if taken is not None:
        validated = RecordIn.model_validate(values)  # its fields keep every rule
        assert taken.model_dump() == validated.model_dump()
        assert taken.model_fields_set == validated.model_fields_set
        assert taken.at is None or taken.at.utcoffset() == timedelta(0)


def test_usual_record_takes_the_bounds_and_declines_past_them():
    """Each check's limit is taken and one past it declined (then validated: accepted or
    refused as before); `at` only in `isoformat()`'s UTC spelling, in a year no conversion
    takes out of range."""
    for taken in (
        _USUAL,
        {**_USUAL, "at": "2026-01-01T00:00:00+00:00"},
        {**_USUAL, "at": "0002-01-01T00:00:00.000001+00:00"},
        {**_USUAL, "at": "9998-12-31T23:59:59+00:00"},
        {**_USUAL, "at": None},
        {**_USUAL, "appended_chars": 0, "request_chars": MAX_SMALL, "surface_version": 0},
    ):
        assert usual_record(taken) is not None, taken
        assert _answer(taken) == _validated(taken)
    for declined in (
        {**_USUAL, "at": "2026-01-01T00:00:00Z"},
        {**_USUAL, "at": "2026-01-01T00:00:00.000000+00:00"},
        {**_USUAL, "at": "2026-02-29T00:00:00+00:00"},
        {**_USUAL, "at": "0001-01-01T00:00:00+00:00"},
        {**_USUAL, "at": "9999-01-01T00:00:00+00:00"},
        {**_USUAL, "at": 0},
        {**_USUAL, "appended_chars": -1},
        {**_USUAL, "request_chars": MAX_SMALL + 1},
        {**_USUAL, "surface_version": True},
        {**_USUAL, "window_tokens": 0},
        {**_USUAL, "request_id": None},
        {**_USUAL, "metadata": None},
        {**_USUAL, "usage": {"input_tokens": 1.0}},
    ):
        assert usual_record(declined) is None, declined
        assert _answer(declined) == _validated(declined)
