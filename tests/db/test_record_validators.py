"""RecordIn's own checks, against what each one stands for (the oracles): a string is refused
for a NUL, the session id for a NUL first and then a '/', `usage` for a NUL anywhere (named
by `_refuse_nul`), and `at` exactly when its conversion to UTC overflows (the year test before
the conversion must never decide otherwise); every other record goes through unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from telemetry.schemas import RecordIn, _refuse_nul

NUL_MESSAGE = "Value error, must not contain NUL characters"
SLASH_MESSAGE = "Value error, must not contain '/' (session ids are one URL path segment)"
RANGE_MESSAGE = "Value error, is out of range once converted to UTC"


def _record(**fields: Any) -> dict[str, Any]:
    return {
        "session_id": "s",
        "turn": 1,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1, "output_tokens": 2},
        **fields,
    }


def _errors(raw: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    try:
        RecordIn.model_validate(raw)
    except ValidationError as exc:
        return [(error["loc"], error["msg"]) for error in exc.errors()]
    return []


texts = st.text(alphabet=st.sampled_from(["a", "é", "/", "\x00", " "]), min_size=1, max_size=6)


@given(session_id=texts, model=texts, request_id=texts, provider=texts)
def test_strings_are_refused_for_nul_and_the_session_id_for_a_slash(
    session_id, model, request_id, provider
):
    errors = _errors(
        _record(session_id=session_id, model=model, request_id=request_id, provider=provider)
    )
    expected = []
    if "\x00" in session_id:
        expected.append((("session_id",), NUL_MESSAGE))
    elif "/" in session_id:
        expected.append((("session_id",), SLASH_MESSAGE))
    expected += [((name,), NUL_MESSAGE) for name in ("model",) if "\x00" in model]
    expected += [((name,), NUL_MESSAGE) for name in ("provider",) if "\x00" in provider]
    expected += [((name,), NUL_MESSAGE) for name in ("request_id",) if "\x00" in request_id]
    assert errors == expected


@given(usage=st.dictionaries(texts, st.one_of(texts, st.integers(), st.lists(texts, max_size=2))))
def test_usage_is_refused_for_a_nul_anywhere_as_refuse_nul_names_it(usage):
    try:
        _refuse_nul(usage)
    except ValueError as exc:
        expected = [(("usage",), f"Value error, {exc}")]
    else:
        expected = []
    assert _errors(_record(usage=usage)) == expected


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
# near both ends of the range; naive bounds, as hypothesis draws naive moments (the offset is
# put on below)
moments = st.one_of(
    st.datetimes(),
    st.datetimes(max_value=datetime.min + timedelta(days=2)),  # noqa: DTZ901
    st.datetimes(min_value=datetime.max - timedelta(days=2)),  # noqa: DTZ901
)


@given(moment=moments, offset=offsets)
def test_at_is_refused_exactly_when_its_conversion_to_utc_overflows(moment, offset):
    at = moment.replace(tzinfo=offset)
    try:
        at.astimezone(UTC)
    except OverflowError:
        expected = [(("at",), RANGE_MESSAGE)]
    else:
        expected = []
    assert _errors(_record(at=at.isoformat())) == expected
    assert _errors(_record(at=at)) == expected


@pytest.mark.parametrize(
    "at",
    ["0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01", "0001-01-01T23:58:00+23:59"],
)
def test_the_first_and_last_moments_past_utc_are_refused(at):
    assert _errors(_record(at=at)) == [(("at",), RANGE_MESSAGE)]
