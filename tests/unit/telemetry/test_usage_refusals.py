"""Usage normalisation's refusals name the exact field and say why in JSON's words; a model id's
family is read from its last path segment, Bedrock's `openai.` prefix included."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from telemetry.errors import FieldError
from telemetry.usage import NormalizedUsage, normalize_usage


def refused(usage: Any, **kw: Any) -> tuple[str, str]:
    with pytest.raises(FieldError) as caught:
        normalize_usage(usage, **kw)
    return caught.value.field, caught.value.message


# --- the family of a model id ------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "gpt-5",
        "openai/gpt-5",
        "azure/deployments/gpt-4o",
        "openai.gpt-oss-120b-1:0",
        "  OpenAI.GPT-OSS-20B  ",
    ],
)
def test_an_openai_model_id_reads_bare_input_as_responses(model):
    got = normalize_usage({"input_tokens": 10, "output_tokens": 5}, model=model)
    assert (got.provider, got.uncached_input, got.output) == ("openai_responses", 10, 5)


@pytest.mark.parametrize("model", ["gpt-5/llama-3", "vendor/openai-clone", "openai.", None, ""])
def test_a_model_id_of_no_known_family_leaves_the_provider_unknown(model):
    field, message = refused({"input_tokens": 10, "output_tokens": 5}, model=model)
    assert field == "usage" and message.startswith("cannot tell the provider")


def test_a_model_that_is_not_a_string_is_no_family():
    field, _ = refused({"input_tokens": 10, "output_tokens": 5}, model=12)
    assert field == "usage"


# --- OpenAI's fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "usage", "field"),
    [
        ("openai_chat", {"completion_tokens": 1}, "usage.prompt_tokens"),
        ("openai_chat", {"prompt_tokens": 1}, "usage.completion_tokens"),
        ("openai_responses", {"output_tokens": 1}, "usage.input_tokens"),
        ("openai_responses", {"input_tokens": 1}, "usage.output_tokens"),
    ],
)
def test_a_missing_openai_count_is_named(provider, usage, field):
    assert refused(usage, provider=provider) == (field, "is required")


CHAT = {"prompt_tokens": 10, "completion_tokens": 5}


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        (
            {"prompt_tokens_details": 3},
            "usage.prompt_tokens_details",
            "must be an object, got integer",
        ),
        (
            {"completion_tokens_details": [1]},
            "usage.completion_tokens_details",
            "must be an object, got array",
        ),
        (
            {"prompt_tokens_details": {"cached_tokens": "3"}},
            "usage.prompt_tokens_details.cached_tokens",
            "must be an integer, got string",
        ),
        (
            {"prompt_tokens_details": {"cached_tokens": 11}},
            "usage.prompt_tokens_details.cached_tokens",
            "11 exceeds usage.prompt_tokens (10)",
        ),
        (
            {"completion_tokens_details": {"reasoning_tokens": 1.0}},
            "usage.completion_tokens_details.reasoning_tokens",
            "must be an integer, got number",
        ),
        (
            {"completion_tokens_details": {"reasoning_tokens": 6}},
            "usage.completion_tokens_details.reasoning_tokens",
            "6 exceeds usage.completion_tokens (5)",
        ),
        ({"total_tokens": True}, "usage.total_tokens", "must be an integer, got boolean"),
        ({"prompt_tokens": {}}, "usage.prompt_tokens", "must be an integer, got object"),
        ({"prompt_tokens": Decimal(10)}, "usage.prompt_tokens", "must be an integer, got Decimal"),
    ],
)
def test_a_bad_openai_field_is_named_with_its_json_type(extra, field, message):
    assert refused(CHAT | extra, provider="openai_chat") == (field, message)


def test_cached_and_reasoning_counts_may_equal_their_totals():
    got = normalize_usage(
        CHAT
        | {
            "prompt_tokens_details": {"cached_tokens": 10},
            "completion_tokens_details": {"reasoning_tokens": 5},
        }
    )
    assert (got.uncached_input, got.cache_read, got.output, got.reasoning_output) == (0, 10, 5, 5)


def test_a_usage_that_is_not_an_object_is_refused_by_its_json_type():
    assert refused(None) == ("usage", "must be an object, got null")
    assert refused([1]) == ("usage", "must be an object, got array")
    assert refused("{}") == ("usage", "must be an object, got string")


# --- OpenTelemetry attributes ------------------------------------------------------------------

OTEL = {"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5}


def test_otel_reasoning_may_equal_output_but_not_exceed_it():
    got = normalize_usage(OTEL | {"gen_ai.usage.reasoning.output_tokens": 5})
    assert (got.output, got.reasoning_output) == (5, 5)
    assert refused(OTEL | {"gen_ai.usage.reasoning.output_tokens": 6}) == (
        "usage.gen_ai.usage.reasoning.output_tokens",
        "6 exceeds output (5)",
    )


def test_a_bad_otel_attribute_is_named():
    assert refused(OTEL | {"gen_ai.usage.cache_read.input_tokens": "2"}) == (
        "usage.gen_ai.usage.cache_read.input_tokens",
        "must be an integer, got string",
    )
    assert refused({"gen_ai.usage.output_tokens": 5}) == (
        "usage.gen_ai.usage.input_tokens",
        "is required",
    )


def test_otel_aliases_that_disagree_are_named_with_both_values():
    assert refused(OTEL | {"gen_ai.usage.prompt_tokens": 11}) == (
        "usage.gen_ai.usage.prompt_tokens",
        "11 disagrees with usage.gen_ai.usage.input_tokens (10)",
    )
    agreeing = normalize_usage(OTEL | {"gen_ai.usage.prompt_tokens": 10})
    assert agreeing.uncached_input == 10


# --- the format a provider name selects --------------------------------------------------------


def test_a_provider_that_is_not_a_string_is_refused_by_its_json_type():
    assert refused(CHAT, provider=5) == ("provider", "must be a string, got integer")
    assert refused(CHAT, provider=["openai"]) == ("provider", "must be a string, got array")


@pytest.mark.parametrize(
    "provider", ["otel", " OpenTelemetry ", "anthropic", "openai_chat", "bedrock", "azure"]
)
def test_an_attribute_dict_is_read_as_otel_under_any_known_vendor_name(provider):
    got = normalize_usage(OTEL, provider=provider)
    assert (got.provider, got.uncached_input, got.output) == ("otel", 10, 5)


def test_an_unknown_provider_is_refused_even_for_an_attribute_dict():
    assert refused(OTEL, provider="mistral") == ("provider", "unknown provider 'mistral'")


# --- Anthropic's cache fields ------------------------------------------------------------------

MESSAGES = {"input_tokens": 10, "output_tokens": 5}


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        (
            {"cache_creation_input_tokens": "3"},
            "usage.cache_creation_input_tokens",
            "must be an integer, got string",
        ),
        (
            {"cache_read_input_tokens": -1},
            "usage.cache_read_input_tokens",
            "must not be negative, got -1",
        ),
        (
            {"cache_creation": {"ephemeral_5m_input_tokens": -1}},
            "usage.cache_creation.ephemeral_5m_input_tokens",
            "must not be negative, got -1",
        ),
        (
            {"cache_creation": {"ephemeral_1h_input_tokens": 2**53}},
            "usage.cache_creation.ephemeral_1h_input_tokens",
            f"must be at most {2**53 - 1}, got {2**53}",
        ),
        ({"cache_creation": 7}, "usage.cache_creation", "must be an object, got integer"),
    ],
)
def test_a_bad_anthropic_cache_field_is_named(extra, field, message):
    assert refused(MESSAGES | extra, provider="anthropic") == (field, message)


def test_a_split_with_one_tier_keeps_the_other_at_zero_whatever_the_profiles_tier():
    got = normalize_usage(
        MESSAGES | {"cache_creation": {"ephemeral_5m_input_tokens": 100}},
        provider="anthropic",
        cache_ttl="1h",
    )
    assert (got.cache_write_5m, got.cache_write_1h, got.reported_cache) == (100, 0, True)
    assert got.flags == ()


@pytest.mark.parametrize(("ttl", "written"), [("5m", (150, 40)), ("1h", (100, 90))])
def test_a_total_above_the_split_adds_the_rest_to_the_profiles_tier(ttl, written):
    got = normalize_usage(
        MESSAGES
        | {
            "cache_creation_input_tokens": 190,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 40},
        },
        provider="anthropic",
        cache_ttl=ttl,
    )
    assert (got.cache_write_5m, got.cache_write_1h) == written
    assert got.flags == ("anthropic_cache_split_mismatch",)


def test_a_split_alone_says_the_cache_was_reported():
    got = normalize_usage(MESSAGES | {"cache_creation": {}}, provider="anthropic")
    assert got.reported_cache and (got.cache_write_5m, got.cache_write_1h) == (0, 0)
    assert not normalize_usage(MESSAGES, provider="anthropic").reported_cache


# --- a usage built directly --------------------------------------------------------------------


def _built(**kw: Any) -> None:
    fields: dict[str, Any] = {
        "provider": "anthropic",
        "uncached_input": 1,
        "cache_read": 2,
        "cache_write_5m": 3,
        "cache_write_1h": 4,
        "output": 5,
        "reasoning_output": None,
        "reported_cache": True,
    }
    NormalizedUsage(**(fields | kw))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"uncached_input": 1.0}, "uncached_input must be an int, got number"),
        ({"cache_read": 1.0}, "cache_read must be an int, got number"),
        ({"cache_write_5m": 1.0}, "cache_write_5m must be an int, got number"),
        ({"cache_write_1h": 1.0}, "cache_write_1h must be an int, got number"),
        ({"output": 5.0}, "output must be an int, got number"),
        ({"cache_write_1h": None}, "cache_write_1h must be an int, got null"),
        ({"output": True}, "output must be an int, got boolean"),
        ({"cache_read": -1}, f"cache_read must be in [0, {2**53 - 1}], got -1"),
        ({"cache_write_5m": 2**53}, f"cache_write_5m must be in [0, {2**53 - 1}], got {2**53}"),
        ({"reasoning_output": "1"}, "reasoning_output must be an int, got string"),
        ({"reasoning_output": 6}, "reasoning_output (6) exceeds output (5)"),
        (
            {"provider": "gemini"},
            "provider must be one of ('anthropic', 'openai_chat', 'openai_responses', 'otel'), "
            "got 'gemini'",
        ),
    ],
)
def test_a_usage_refuses_counts_it_cannot_hold_by_name(kw, message):
    with pytest.raises(ValueError) as caught:
        _built(**kw)
    assert str(caught.value) == message


@pytest.mark.parametrize("ttl", ["2h", "5M", None])
def test_a_cache_tier_other_than_5m_or_1h_is_refused(ttl):
    assert refused(MESSAGES, cache_ttl=ttl) == ("cache_ttl", f"must be '5m' or '1h', got {ttl!r}")


NEEDS_INPUT = "an OpenAI usage object needs prompt_tokens or input_tokens"


def test_an_openai_usage_without_an_input_count_says_what_it_needs():
    assert refused({"output_tokens": 5}, provider="azure") == ("usage", NEEDS_INPUT)
    assert refused({"output_tokens": 5}, model="gpt-5") == ("usage", NEEDS_INPUT)


def test_an_openai_name_over_anthropic_cache_fields_is_refused():
    usage = MESSAGES | {"cache_read_input_tokens": 3}
    assert refused(usage, provider="OpenAI") == (
        "provider",
        "'OpenAI' does not match Anthropic cache fields",
    )


def test_a_usage_of_no_known_shape_asks_for_the_provider():
    assert refused({"tokens": 5}) == (
        "usage",
        "cannot tell the provider from the keys or the model; send `provider` "
        "(anthropic, openai_chat, openai_responses or otel)",
    )
