"""The providers' cache diagnostics, read and mapped onto our causes (telemetry.cache_diagnostics)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.cache_diagnostics import (
    NO_DIVERGENCE,
    PROVIDER_TYPES,
    Agreement,
    agrees,
    count,
    from_stored,
    read_anthropic,
    read_openai,
    read_record,
    record_fields,
)
from telemetry.cache_misses import CAUSES, CallObs, Segment, classify
from telemetry.errors import FieldError

ANTHROPIC_TYPES = (
    "model_changed",
    "system_changed",
    "tools_changed",
    "messages_changed",
    "previous_message_not_found",
    "unavailable",
)
OPENAI_REASONS = (
    "model_changed",
    "prompt_cache_key_changed",
    "tools_changed",
    "text_format_changed",
    "reasoning_effort_changed",
    "verbosity_changed",
    "context_compacted",
    "input_changed",
    "service_tier_changed",
)
OPENAI_TYPES = ("cache_hit", "comparison_response_not_found", "unavailable")


def test_every_word_either_provider_sends_maps_onto_one_of_our_causes_or_no_verdict():
    for word in (*ANTHROPIC_TYPES, *OPENAI_REASONS, *OPENAI_TYPES, NO_DIVERGENCE):
        meaning = PROVIDER_TYPES[word]
        assert meaning.cause is None or meaning.cause in CAUSES
        assert meaning.note
    assert set(PROVIDER_TYPES) == {*ANTHROPIC_TYPES, *OPENAI_REASONS, *OPENAI_TYPES, NO_DIVERGENCE}


@pytest.mark.parametrize(
    ("word", "cause", "segment"),
    [
        ("model_changed", "model_switch", None),
        ("system_changed", "prefix_break", "system"),
        ("tools_changed", "prefix_break", "tools"),
        ("messages_changed", "prefix_break", "messages"),
        ("previous_message_not_found", None, None),
        ("unavailable", None, None),
        ("input_changed", "prefix_break", "messages"),
        ("context_compacted", "agent_compaction", None),
        ("reasoning_effort_changed", "prefix_break", "reasoning_effort"),
        ("cache_hit", None, None),
    ],
)
def test_the_mapping_of_each_word(word, cause, segment):
    assert PROVIDER_TYPES[word].cause == cause
    assert PROVIDER_TYPES[word].segment == segment


def test_anthropic_messages_changed_is_read_with_its_tokens_and_kept_verbatim():
    raw = {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 12016}}

    found = read_anthropic(raw)

    assert found is not None
    assert (found.format, found.type, found.missed_tokens) == (
        "anthropic",
        "messages_changed",
        12016,
    )
    assert found.cause == "prefix_break"
    assert found.stored() == {"anthropic": raw}


def test_an_anthropic_null_reason_is_a_diagnosis_without_verdict():
    found = read_anthropic({"cache_miss_reason": None})

    assert found is not None
    assert found.type == NO_DIVERGENCE
    assert found.cause is None


def test_anthropic_reasons_without_tokens_read_as_none():
    found = read_anthropic({"cache_miss_reason": {"type": "previous_message_not_found"}})

    assert found is not None
    assert found.missed_tokens is None
    assert found.cause is None


def test_diagnostics_without_a_reason_key_say_nothing():
    assert read_anthropic({}) is None
    assert read_anthropic(None) is None
    assert read_openai(None) is None


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(12016, 12016), (12016.0, 12016), ("12016", 12016), (" 7 ", 7), (0, 0), (None, None)],
)
def test_odd_but_valid_counts_are_read(tokens, expected):
    raw = {"cache_miss_reason": {"type": "Tools_Changed ", "cache_missed_input_tokens": tokens}}

    found = read_anthropic(raw)

    assert found is not None
    assert found.type == "tools_changed"  # case and spaces of the word do not matter
    assert found.missed_tokens == expected


@pytest.mark.parametrize("tokens", [-1, 1.5, "many", True, [], {}])
def test_counts_that_are_no_count_are_refused_naming_the_field(tokens):
    raw = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": tokens}}

    with pytest.raises(FieldError) as caught:
        read_anthropic(raw)

    assert caught.value.field == "diagnostics.cache_miss_reason.cache_missed_input_tokens"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("messages_changed", "diagnostics"),
        ({"cache_miss_reason": "messages_changed"}, "diagnostics.cache_miss_reason"),
        ({"cache_miss_reason": {"type": ""}}, "diagnostics.cache_miss_reason.type"),
        ({"cache_miss_reason": {"type": 3}}, "diagnostics.cache_miss_reason.type"),
        ({"cache_miss_reason": {"type": "x" * 65}}, "diagnostics.cache_miss_reason.type"),
    ],
)
def test_unreadable_anthropic_shapes_are_refused_naming_the_field(raw, field):
    with pytest.raises(FieldError) as caught:
        read_anthropic(raw)

    assert caught.value.field == field


def test_an_unknown_word_is_kept_without_verdict():
    found = read_anthropic({"cache_miss_reason": {"type": "thinking_changed"}})

    assert found is not None
    assert found.type == "thinking_changed"
    assert not found.known
    assert found.cause is None


def test_openai_cache_miss_reads_its_reason_and_tokens():
    raw = {
        "type": "cache_miss",
        "reason": "tools_changed",
        "cache_missed_tokens": 5629,
        "comparison_reusable_tokens": 5629,
    }

    found = read_openai(raw)

    assert found is not None
    assert (found.format, found.type, found.missed_tokens) == ("openai", "tools_changed", 5629)
    assert found.cause == "prefix_break"
    assert found.stored() == {"openai": raw}


@pytest.mark.parametrize("kind", OPENAI_TYPES)
def test_openai_outcomes_other_than_a_miss_give_no_verdict(kind):
    found = read_openai({"type": kind})

    assert found is not None
    assert found.type == kind
    assert found.cause is None


def test_an_openai_miss_without_reason_is_unexplained_by_the_provider():
    found = read_openai({"type": "cache_miss", "cache_missed_tokens": 10})

    assert found is not None
    assert found.type == "unavailable"
    assert found.missed_tokens == 10


def test_a_record_reads_its_own_fields_then_its_usage():
    anthropic = {"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 5}}
    openai = {"type": "cache_miss", "reason": "input_changed", "cache_missed_tokens": 9}

    def word(**parts: Any) -> tuple[str, str] | None:
        found = read_record(**parts)
        return None if found is None else (found.format, found.type)

    assert word(diagnostics=anthropic) == ("anthropic", "system_changed")
    assert word(prompt_cache_diagnostics=openai) == ("openai", "input_changed")
    assert word(diagnostics=anthropic, prompt_cache_diagnostics=openai) == (
        "anthropic",
        "system_changed",
    )
    assert word(usage={"input_tokens": 1, "diagnostics": anthropic}) == (
        "anthropic",
        "system_changed",
    )
    assert word(usage={"cache_miss_reason": {"type": "model_changed"}}) == (
        "anthropic",
        "model_changed",
    )
    assert word(usage={"prompt_cache_diagnostics": openai}) == ("openai", "input_changed")
    assert read_record(usage={"input_tokens": 1}) is None
    assert read_record() is None


def test_a_refusal_inside_usage_names_the_usage_field():
    with pytest.raises(FieldError) as caught:
        read_record(usage={"prompt_cache_diagnostics": {"type": "cache_miss", "reason": 4}})

    assert caught.value.field == "usage.prompt_cache_diagnostics.reason"


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        (
            {"cache_miss_reason": "messages_changed", "cache_missed_input_tokens": "12016"},
            {
                "diagnostics": {
                    "cache_miss_reason": {
                        "type": "messages_changed",
                        "cache_missed_input_tokens": "12016",
                    }
                }
            },
        ),
        (
            {"cache_miss_reason": '{"type": "tools_changed", "cache_missed_input_tokens": 3}'},
            {
                "diagnostics": {
                    "cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 3}
                }
            },
        ),
        (
            {"anthropic.diagnostics.cache_miss_reason.type": "model_changed"},
            {"diagnostics": {"cache_miss_reason": {"type": "model_changed"}}},
        ),
        (
            {
                "openai.prompt_cache_diagnostics.type": "cache_miss",
                "openai.prompt_cache_diagnostics.reason": "input_changed",
                "openai.prompt_cache_diagnostics.cache_missed_tokens": 40,
            },
            {
                "prompt_cache_diagnostics": {
                    "type": "cache_miss",
                    "reason": "input_changed",
                    "cache_missed_tokens": 40,
                }
            },
        ),
        ({"gen_ai.usage.input_tokens": 3, "cache_miss_reason": ""}, {}),
    ],
)
def test_otlp_attributes_become_the_providers_objects(attributes, expected):
    assert record_fields(attributes) == expected


def test_what_attributes_carry_reads_back_as_the_same_diagnosis():
    fields = record_fields({"cache_miss_reason": "system_changed", "cache_missed_input_tokens": 7})

    found = read_record(**fields)

    assert found is not None
    assert (found.type, found.missed_tokens, found.cause) == ("system_changed", 7, "prefix_break")


def test_a_compaction_where_the_provider_saw_messages_change_agrees():
    assert agrees("prefix_break", "our_compaction", "messages")
    assert agrees("prefix_break", "agent_compaction", "messages")
    assert not agrees("prefix_break", "our_compaction", "system")
    assert agrees("model_switch", "model_switch")
    assert not agrees("model_switch", "expiry")


def test_stored_columns_read_back_as_the_diagnosis():
    raw = {"type": "cache_miss", "reason": "input_changed", "cache_missed_tokens": 9}
    found = read_openai(raw)
    assert found is not None

    back = from_stored(found.type, found.missed_tokens, found.stored())

    assert back == found
    assert from_stored(None, None, None) is None


def test_agreement_rates_add_up():
    total = Agreement(3, 2) + Agreement(1, 1)

    assert (total.compared, total.agreed, total.rate) == (4, 3, 0.75)
    assert Agreement().rate is None


# --- beside our classifier ------------------------------------------------------------------------

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _pair(provider_raw=None, *, second_model="m"):
    first = CallObs(0, 0, T0, "m", 100, 0, cache_write_5m=20_000)
    provider = None if provider_raw is None else read_anthropic(provider_raw)
    second = CallObs(
        1,
        0,
        T0 + timedelta(seconds=30),
        second_model,
        100,
        0,
        cache_write_5m=21_000,
        prefix=None,
        provider=provider,
    )
    return [first, second]


def test_the_providers_verdict_is_the_cause_and_ours_stays_inferred():
    raw = {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 12016}}

    (miss,) = classify(_pair(raw), prices={})

    assert miss.cause == "prefix_break"
    assert miss.inferred_cause == "unexplained"
    assert miss.agrees is False
    assert miss.readings == "provider: messages_changed, 12,016 tokens; ours: unexplained"


def test_without_a_verdict_our_cause_stays_the_cause():
    (miss,) = classify(_pair({"cache_miss_reason": {"type": "unavailable"}}), prices={})

    assert miss.cause == miss.inferred_cause == "unexplained"
    assert miss.agrees is None
    assert miss.readings == "provider: unavailable; ours: unexplained"


def test_without_diagnostics_a_miss_reads_as_before():
    (miss,) = classify(_pair(), prices={})

    assert miss.cause == miss.inferred_cause == "unexplained"
    assert miss.provider is None
    assert miss.readings is None


def test_both_readings_name_our_segment_when_ours_is_a_prefix_break():
    first = CallObs(
        0,
        0,
        T0,
        "m",
        100,
        0,
        cache_write_5m=20_000,
        prefix=(Segment("system", "a", 10_000), Segment("message 0", "b", 10_000)),
    )
    second = CallObs(
        1,
        0,
        T0 + timedelta(seconds=30),
        "m",
        100,
        0,
        cache_write_5m=21_000,
        prefix=(Segment("system", "a", 10_000), Segment("message 0", "c", 11_000)),
        provider=read_anthropic(
            {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 11_000}}
        ),
    )

    (miss,) = classify([first, second], prices={})

    assert miss.agrees is True
    assert (
        miss.readings
        == "provider: messages_changed, 11,000 tokens; ours: prefix_break at message 0"
    )


_WORDS = st.sampled_from(sorted(PROVIDER_TYPES)) | st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=40
)
_COUNTS = st.none() | st.integers(0, 2**31 - 1) | st.integers(0, 10**9).map(str)


@given(word=_WORDS, tokens=_COUNTS)
def test_any_valid_anthropic_reason_reads_back_to_one_cause_or_none(word, tokens):
    raw = {"cache_miss_reason": {"type": word, "cache_missed_input_tokens": tokens}}

    found = read_anthropic(raw)

    assert found is not None
    assert found.type == word
    assert found.missed_tokens == (None if tokens is None else int(tokens))
    assert found.cause is None or found.cause in CAUSES
    assert found.cause == (PROVIDER_TYPES[word].cause if word in PROVIDER_TYPES else None)
    assert from_stored(found.type, found.missed_tokens, found.stored()) == found


@given(word=_WORDS, tokens=_COUNTS, compared=st.booleans())
def test_the_cause_is_the_providers_verdict_or_else_ours(word, tokens, compared):
    raw = {"type": "cache_miss", "reason": word, "cache_missed_tokens": tokens}
    calls = _pair()
    calls[1] = CallObs(
        1,
        0,
        T0 + timedelta(seconds=30),
        "m",
        100,
        0,
        cache_write_5m=21_000,
        provider=read_openai(raw) if compared else None,
    )

    (miss,) = classify(calls, prices={})

    verdict = PROVIDER_TYPES[word].cause if compared and word in PROVIDER_TYPES else None
    assert miss.inferred_cause == "unexplained"
    assert miss.cause == (verdict or "unexplained")
    assert (miss.agrees is None) == (verdict is None)


@given(counts=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=10))
def test_agreement_is_a_share_of_the_compared(counts):
    total = Agreement()
    for compared, agreed in counts:
        total = total + Agreement(compared + agreed, agreed)

    assert total.rate is None or 0 <= total.rate <= 1
    assert total.agreed <= total.compared


def test_count_refuses_a_bool():
    with pytest.raises(FieldError):
        count(True, "x")
