"""The canonical payload hash stays byte-identical to its first form (the oracle below): stored
calls keep their hashes, so a replay is still a duplicate and changed content still a conflict.
So does the plain path (msgspec's sorted JSON of the submitted object, `payload_hash`).
No database needed; Django's settings are (the module reads the calls table)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import example, given
from hypothesis import strategies as st

from context_core import content_digest
from telemetry.idempotency import canonical_hash


def _oracle(value: object) -> str:
    """`canonical_hash` as it was first written: a fresh `json.dumps` per call. It is also the
    core's `content_digest`, the digest a client chains over the messages it appended to check
    that a surface follows them (the log's `raw_hash` must be the same value)."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    assert content_digest(value) == digest
    return digest


# Text with what JSON escapes, what it keeps verbatim (non-ASCII, astral) and lone surrogates.
_text = st.text(
    st.characters(codec=None, categories=None)
    | st.sampled_from(['"', "\\", "\n", "\x00", "\x7f", "é", "\U0001f600", "\ud83d", "\udc00"])
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=25,
)


@given(_json)
def test_the_canonical_hash_is_its_first_form_byte_for_byte(value):
    assert canonical_hash(value) == _oracle(value)


@given(st.dictionaries(_text, _json, max_size=6), st.dictionaries(_text, _json, max_size=6))
def test_one_hash_after_another_carries_nothing_over(first, second):
    # the shared encoder keeps no state between calls: each hash is the one a fresh encoder gives
    assert (canonical_hash(first), canonical_hash(second)) == (_oracle(first), _oracle(second))


# --- the plain path: msgspec's sorted JSON, and a record's hash from the submitted object -----

# What `safejson.is_plain` passes: JSON's own types, no float, no lone surrogate (NUL included:
# the encoder must escape it as json.dumps does, whatever the schema later refuses).
_plain_text = st.text(
    st.characters(codec="utf-8") | st.sampled_from(['"', "\\", "\x00", "\b", "\f", "\x7f"])
)
_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | _plain_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_plain_text, children, max_size=4)
    ),
    max_leaves=25,
)


@given(st.dictionaries(_plain_text, _plain, max_size=6))
def test_sorted_msgspec_json_of_a_plain_value_is_the_canonical_text(value):
    from telemetry import safejson
    from telemetry.idempotency import _SORTED_JSON, _plain_hash

    assert safejson.is_plain(value)
    assert hashlib.sha256(_SORTED_JSON.encode(value)).hexdigest() == _oracle(value)
    assert _plain_hash(value).hex() == _oracle(value)  # stored as the digest's bytes


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_is_never_plain(number):
    # encoders spell exponents apart (json.dumps 1e+16, msgspec 1e16): floats take the old path
    from telemetry import safejson

    assert not safejson.is_plain({"usage": {"cost": [number]}})


_small = st.integers(min_value=0, max_value=10**6)
_id = st.text(st.characters(exclude_characters="\x00/", codec="utf-8"), min_size=1, max_size=12)
_usage_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=6),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(max_size=6).filter(lambda k: "\x00" not in k), children, max_size=3
        )
    ),
    max_leaves=8,
)
# `at` in many spellings: the canonical one (`isoformat` in UTC) and the others, at the edges.
_at_texts = st.sampled_from(
    [
        "2025-06-01T00:00:00+00:00",
        "2025-06-01T02:30:00+02:30",
        "2025-06-01T00:00:00Z",
        "2025-05-31T23:59:59.123456-07:00",
        "2025-06-01T00:00:00.5+00:00",
        "2025-06-01T00:00:00.000000+00:00",
        "2025-06-01T00:00:00.100000+00:00",
        "2025-06-01T00:00:00.000001+00:00",
        "2025-06-01T00:00:00.1234567+00:00",
        "2025-06-01 00:00:00+00:00",
        "2025-06-01t00:00:00+00:00",
        "2025-06-01T00:00+00:00",
        "2025-06-01T00:00:00+0000",
        "2025-06-01T00:00:00-00:00",
        "2025-06-01T23:59:59.999999+00:00",
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59.999999+00:00",
        "2024-02-29T12:00:00+00:00",
    ]
) | st.builds(
    lambda moment, spelling: spelling(moment),
    # hypothesis bounds its datetimes by naive ones and adds the zone it draws
    st.datetimes(
        min_value=datetime(2, 1, 1),  # noqa: DTZ001
        max_value=datetime(9998, 12, 31),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    ),
    st.sampled_from(
        [
            datetime.isoformat,
            lambda moment: moment.isoformat(timespec="microseconds"),
            lambda moment: moment.isoformat().replace("+00:00", "Z"),
            lambda moment: moment.astimezone(UTC).isoformat(),
        ]
    ),
)


# Each optional field is left out, sent as null, at its default (call 0) or with a value.
_optional = {
    "call": st.sampled_from([0]) | _small,
    "provider": st.sampled_from(["anthropic", "openai", "bedrock"]),
    "request_id": _id,
    "request_chars": _small,
    "appended_chars": _small,
    "window_tokens": st.integers(min_value=1, max_value=10**6),
    "surface_version": _small,
    "at": _at_texts,
    "context_management": st.dictionaries(st.sampled_from(["applied_edits", "x"]), _usage_value),
    "output_items": st.lists(st.dictionaries(st.sampled_from(["type", "id"]), _usage_value)),
    "prefix": st.just([{"kind": "system", "hash": "h1", "tokens": 10, "text": None}]),
}


@st.composite
def _records(draw: st.DrawFn) -> dict[str, object]:
    raw: dict[str, object] = {
        "session_id": draw(_id),
        "turn": draw(_small),
        "model": draw(st.sampled_from(["claude-sonnet-4-5", "gpt-4o", "m"])),
        "usage": {"input_tokens": draw(_small), "output_tokens": draw(_small)}
        | draw(st.dictionaries(st.sampled_from(["cache_read_input_tokens", "x"]), _usage_value)),
    }
    for name, values in _optional.items():
        sent = ["absent", "value"] if name == "call" else ["absent", "null", "value"]
        choice = draw(st.sampled_from(sent))  # `call` has a default but is never null
        if choice == "null":
            raw[name] = None
        elif choice == "value":
            raw[name] = draw(values)
    return raw


@given(_records())
def test_a_records_hash_from_the_submitted_object_is_its_first_form(raw):
    """What the ingest hashes (the submitted object less its defaults, when plain) is what
    `model_dump` and the first canonical text give, for every field sent, left out, null or at
    its default, with and without floats and a prefix."""
    from telemetry import safejson
    from telemetry.idempotency import payload_hash
    from telemetry.schemas import RecordIn

    record = RecordIn.model_validate(raw)
    data = record.model_dump(mode="python", exclude_defaults=True)
    if record.at is not None:
        data["at"] = record.at.astimezone(UTC).isoformat()
    expected = _oracle(data)
    assert payload_hash(record).hex() == expected  # stored as the digest's bytes
    assert payload_hash(record, raw if safejson.is_plain(raw) else None).hex() == expected


@given(_at_texts)
@example("2025-06-01T00:00:00.000000+00:00")
@example("2025-06-01T00:00:00.100000+00:00")
@example("2025-06-01T00:00:00+00:00")
@example("9999-12-31T23:59:59.999999+00:00")
@example("2025-06-01T00:00:00-00:00")
def test_an_at_is_hashed_as_its_utc_isoformat_whatever_its_spelling(at):
    """`payload_hash` keeps an `at` sent in its canonical spelling as sent; any spelling hashes
    as the general path's `astimezone(UTC).isoformat()` of the time `RecordIn` read."""
    from telemetry.idempotency import payload_hash
    from telemetry.schemas import RecordIn

    raw = {"session_id": "s", "turn": 1, "model": "m", "usage": {"input_tokens": 1}, "at": at}
    record = RecordIn.model_validate(raw)
    assert record.at is not None
    data = record.model_dump(mode="python", exclude_defaults=True)
    data["at"] = record.at.astimezone(UTC).isoformat()
    assert payload_hash(record, raw).hex() == _oracle(data)
