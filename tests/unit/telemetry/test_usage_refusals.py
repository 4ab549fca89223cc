"""Usage normalisation's refusals name the exact field and say why in JSON's words; a model id's
family is read from its last path segment, Bedrock's `openai.` prefix included."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from telemetry.errors import FieldError
from telemetry.usage import normalize_usage


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
