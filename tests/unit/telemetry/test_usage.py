"""Usage normalisation, pinned per provider shape with hand-computed buckets."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.usage import (
    FLAG_ANTHROPIC_CACHE_SPLIT_MISMATCH,
    FLAG_OTEL_INPUT_EXCLUSIVE,
    MAX_TOKENS,
    NormalizedUsage,
    normalize_usage,
)

# (id, usage, kwargs, expected buckets:
#  provider, uncached, read, write_5m, write_1h, output, reasoning, reported_cache, flags, context)
SHAPES: list[tuple[str, dict[str, Any], dict[str, Any], tuple[Any, ...]]] = [
    (
        "anthropic: the issue's example, input excludes cache, no TTL split -> profile's 5m",
        {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        },
        {},
        ("anthropic", 1200, 45000, 3000, 0, 800, None, True, (), 49200),
    ),
    (
        "anthropic: no TTL split and a 1h profile puts the writes in the 1h bucket",
        {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        },
        {"cache_ttl": "1h"},
        ("anthropic", 1200, 45000, 0, 3000, 800, None, True, (), 49200),
    ),
    (
        "anthropic: the TTL split wins over the profile's tier",
        {
            "input_tokens": 21,
            "cache_creation_input_tokens": 188086,
            "cache_read_input_tokens": 0,
            "output_tokens": 393,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 88086,
                "ephemeral_1h_input_tokens": 100000,
            },
            "service_tier": "standard",
        },
        {"cache_ttl": "1h"},
        ("anthropic", 21, 0, 88086, 100000, 393, None, True, (), 188107),
    ),
    (
        "anthropic: SDK nulls count as absent",
        {
            "input_tokens": 50,
            "output_tokens": 7,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": 900,
            "cache_creation": None,
        },
        {},
        ("anthropic", 50, 900, 0, 0, 7, None, True, (), 950),
    ),
    (
        "anthropic: a zero-filled split under a real total sends the remainder to the profile tier",
        {
            "input_tokens": 10,
            "cache_creation_input_tokens": 3000,
            "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        },
        {"cache_ttl": "1h"},
        ("anthropic", 10, 0, 0, 3000, 1, None, True, (FLAG_ANTHROPIC_CACHE_SPLIT_MISMATCH,), 3010),
    ),
    (
        "anthropic: a split larger than the total keeps the split",
        {
            "input_tokens": 10,
            "cache_creation_input_tokens": 100,
            "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 70, "ephemeral_1h_input_tokens": 80},
        },
        {},
        ("anthropic", 10, 0, 70, 80, 1, None, True, (FLAG_ANTHROPIC_CACHE_SPLIT_MISMATCH,), 160),
    ),
    (
        "anthropic by model family: bare input/output reports no cache",
        {"input_tokens": 400, "output_tokens": 30},
        {"model": "claude-sonnet-4-5-20250929"},
        ("anthropic", 400, 0, 0, 0, 30, None, False, (), 400),
    ),
    (
        "anthropic by bedrock model id",
        {"input_tokens": 400, "output_tokens": 30},
        {"model": "us.anthropic.claude-haiku-4-5-20251001-v1:0"},
        ("anthropic", 400, 0, 0, 0, 30, None, False, (), 400),
    ),
    (
        "openai chat: prompt includes cached, completion includes reasoning",
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 128, "audio_tokens": 0},
        },
        {},
        ("openai_chat", 86, 1920, 0, 0, 300, 128, True, (), 2006),
    ),
    (
        "openai chat without details reports no cache and no reasoning",
        {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
        {},
        ("openai_chat", 500, 0, 0, 0, 20, None, False, (), 500),
    ),
    (
        "openai chat with zero cached reports cache (a real 0 %, not unknown)",
        {
            "prompt_tokens": 500,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        {},
        ("openai_chat", 500, 0, 0, 0, 20, None, True, (), 500),
    ),
    (
        "openai responses: input includes cached",
        {
            "input_tokens": 5328,
            "input_tokens_details": {"cached_tokens": 4096},
            "output_tokens": 1052,
            "output_tokens_details": {"reasoning_tokens": 1000},
            "total_tokens": 6380,
        },
        {},
        ("openai_responses", 1232, 4096, 0, 0, 1052, 1000, True, (), 5328),
    ),
    (
        "openai responses by total_tokens alone",
        {"input_tokens": 328, "output_tokens": 52, "total_tokens": 380},
        {},
        ("openai_responses", 328, 0, 0, 0, 52, None, False, (), 328),
    ),
    (
        "openai responses by model family when only input/output are sent",
        {"input_tokens": 328, "output_tokens": 52},
        {"model": "gpt-5-mini"},
        ("openai_responses", 328, 0, 0, 0, 52, None, False, (), 328),
    ),
    (
        "otel current names: input includes read and creation",
        {
            "gen_ai.usage.input_tokens": 10000,
            "gen_ai.usage.cache_read.input_tokens": 7000,
            "gen_ai.usage.cache_creation.input_tokens": 2000,
            "gen_ai.usage.output_tokens": 600,
            "gen_ai.usage.reasoning.output_tokens": 250,
            "gen_ai.request.model": "claude-sonnet-4-5",
        },
        {},
        ("otel", 1000, 7000, 2000, 0, 600, 250, True, (), 10000),
    ),
    (
        "otel older names, 1h profile",
        {
            "gen_ai.usage.prompt_tokens": 10000,
            "gen_ai.usage.cache_read_input_tokens": 7000,
            "gen_ai.usage.cache_creation_input_tokens": 2000,
            "gen_ai.usage.completion_tokens": 600,
        },
        {"cache_ttl": "1h"},
        ("otel", 1000, 7000, 0, 2000, 600, None, True, (), 10000),
    ),
    (
        "otel input smaller than read + creation is exclusive and flagged",
        {
            "gen_ai.usage.input_tokens": 1200,
            "gen_ai.usage.cache_read.input_tokens": 45000,
            "gen_ai.usage.cache_creation.input_tokens": 3000,
            "gen_ai.usage.output_tokens": 800,
        },
        {},
        ("otel", 1200, 45000, 3000, 0, 800, None, True, (FLAG_OTEL_INPUT_EXCLUSIVE,), 49200),
    ),
    (
        "otel cache_write draft name",
        {
            "gen_ai.usage.input_tokens": 5000,
            "gen_ai.usage.cache_write.input_tokens": 5000,
            "gen_ai.usage.output_tokens": 1,
        },
        {},
        ("otel", 0, 0, 5000, 0, 1, None, True, (), 5000),
    ),
    (
        "otel sentry aliases",
        {
            "gen_ai.usage.input_tokens": 900,
            "gen_ai.usage.input_tokens.cached": 600,
            "gen_ai.usage.input_tokens.cache_write": 200,
            "gen_ai.usage.output_tokens": 3,
        },
        {},
        ("otel", 100, 600, 200, 0, 3, None, True, (), 900),
    ),
    (
        "otel strands alias",
        {
            "gen_ai.usage.input_tokens": 900,
            "gen_ai.usage.cache_read_input_tokens": 600,
            "gen_ai.usage.cache_write_input_tokens": 200,
            "gen_ai.usage.output_tokens": 3,
        },
        {},
        ("otel", 100, 600, 200, 0, 3, None, True, (), 900),
    ),
    (
        "otel without cache attributes reports no cache",
        {"gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 3},
        {},
        ("otel", 900, 0, 0, 0, 3, None, False, (), 900),
    ),
    (
        "otel dual emission of old and new names with equal values",
        {
            "gen_ai.usage.input_tokens": 900,
            "gen_ai.usage.prompt_tokens": 900,
            "gen_ai.usage.output_tokens": 3,
            "gen_ai.usage.completion_tokens": 3,
        },
        {},
        ("otel", 900, 0, 0, 0, 3, None, False, (), 900),
    ),
]


@pytest.mark.parametrize(
    ("usage", "kwargs", "expected"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES]
)
def test_each_shape_normalises_to_hand_computed_buckets(usage, kwargs, expected):
    provider, uncached, read, w5, w1, output, reasoning, reported, flags, context = expected

    got = normalize_usage(usage, **kwargs)

    assert got == NormalizedUsage(
        provider=provider,
        uncached_input=uncached,
        cache_read=read,
        cache_write_5m=w5,
        cache_write_1h=w1,
        output=output,
        reasoning_output=reasoning,
        reported_cache=reported,
        flags=flags,
    )
    assert got.context_tokens == context


def test_issue_example_has_context_49200_and_cache_hit_45000_of_49200():
    got = normalize_usage(
        {
            "input_tokens": 1200,
            "cache_creation_input_tokens": 3000,
            "cache_read_input_tokens": 45000,
            "output_tokens": 800,
        }
    )

    assert got.context_tokens == 49_200
    assert got.cache_write == 3000
    assert got.cache_read / got.context_tokens == 45000 / 49200


def test_normalising_does_not_mutate_the_usage_object():
    usage = {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_creation": {"ephemeral_5m_input_tokens": 3},
    }
    snapshot = {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_creation": {"ephemeral_5m_input_tokens": 3},
    }

    normalize_usage(usage)

    assert usage == snapshot


# --- provider names and inference --------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "provider", "expected"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 1}, "openai", "openai_chat"),
        ({"input_tokens": 10, "output_tokens": 1}, "openai", "openai_responses"),
        ({"input_tokens": 10, "output_tokens": 1}, "OpenAI", "openai_responses"),
        ({"input_tokens": 10, "output_tokens": 1}, "azure.ai.openai", "openai_responses"),
        ({"input_tokens": 10, "output_tokens": 1}, "anthropic", "anthropic"),
        ({"input_tokens": 10, "output_tokens": 1}, "aws.bedrock", "anthropic"),
        ({"input_tokens": 10, "output_tokens": 1}, "gcp.vertex_ai", "anthropic"),
        ({"input_tokens": 10, "output_tokens": 1}, "openai_responses", "openai_responses"),
        ({"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 1}, "anthropic", "otel"),
        ({"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 1}, "otel", "otel"),
    ],
)
def test_explicit_provider_names_and_aliases_pick_the_format(usage, provider, expected):
    assert normalize_usage(usage, provider=provider).provider == expected


def test_explicit_anthropic_reads_input_tokens_as_exclusive_even_with_total_tokens():
    # Without the name, total_tokens beside input_tokens would mean OpenAI Responses (inclusive).
    usage = {"input_tokens": 100, "output_tokens": 1, "total_tokens": 101}

    assert normalize_usage(usage).provider == "openai_responses"
    assert normalize_usage(usage, provider="anthropic").provider == "anthropic"


@pytest.mark.parametrize(
    "model", ["gpt-4o", "o3-2025-04-16", "o4-mini", "chatgpt-4o-latest", "o1", "gpt-5.1-codex"]
)
def test_openai_model_families_infer_responses_for_bare_input_tokens(model):
    got = normalize_usage({"input_tokens": 10, "output_tokens": 1}, model=model)

    assert got.provider == "openai_responses"


@pytest.mark.parametrize(
    "model",
    ["claude-opus-4-6", "anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5@20250929"],
)
def test_claude_model_ids_infer_anthropic(model):
    assert (
        normalize_usage({"input_tokens": 10, "output_tokens": 1}, model=model).provider
        == "anthropic"
    )


def test_keys_win_over_the_model_family():
    # A gateway serving Claude in OpenAI Chat format: prompt_tokens is the shape that counts.
    got = normalize_usage({"prompt_tokens": 10, "completion_tokens": 1}, model="claude-sonnet-4-5")

    assert got.provider == "openai_chat"


@pytest.mark.parametrize("model", [None, "", "llama-3.1-70b", "gemini-2.5-pro"])
def test_ambiguous_keys_and_unknown_model_are_refused(model):
    with pytest.raises(FieldError) as err:
        normalize_usage({"input_tokens": 10, "output_tokens": 1}, model=model)

    assert err.value.field == "usage"


def test_unknown_provider_name_is_refused_naming_provider():
    with pytest.raises(FieldError) as err:
        normalize_usage({"input_tokens": 10, "output_tokens": 1}, provider="mistral")

    assert err.value.field == "provider"


def test_openai_name_with_anthropic_cache_fields_is_refused():
    with pytest.raises(FieldError) as err:
        normalize_usage(
            {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5},
            provider="openai",
        )

    assert err.value.field == "provider"


# --- validation --------------------------------------------------------------------------------

ANTHROPIC_OK = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0}
CHAT_OK = {
    "prompt_tokens": 10,
    "completion_tokens": 5,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `base` with the dotted `path` (under "usage.") set to `value`."""
    copy = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    keys = path.split(".")[1:]
    target = copy
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return copy


@pytest.mark.parametrize(
    ("base", "field", "value", "message"),
    [
        (ANTHROPIC_OK, "usage.input_tokens", True, "must be an integer, got boolean"),
        (ANTHROPIC_OK, "usage.input_tokens", 12.0, "must be an integer, got number"),
        (ANTHROPIC_OK, "usage.input_tokens", "12", "must be an integer, got string"),
        (ANTHROPIC_OK, "usage.input_tokens", -1, "must not be negative"),
        (ANTHROPIC_OK, "usage.output_tokens", MAX_TOKENS + 1, "must be at most"),
        (ANTHROPIC_OK, "usage.cache_read_input_tokens", [1], "must be an integer, got array"),
        (ANTHROPIC_OK, "usage.cache_creation", 5, "must be an object, got integer"),
        (CHAT_OK, "usage.prompt_tokens_details.cached_tokens", 11, "exceeds usage.prompt_tokens"),
        (
            CHAT_OK,
            "usage.completion_tokens_details.reasoning_tokens",
            6,
            "exceeds usage.completion_tokens",
        ),
        (CHAT_OK, "usage.prompt_tokens_details.cached_tokens", False, "must be an integer"),
        (CHAT_OK, "usage.completion_tokens", None, "is required"),
        (CHAT_OK, "usage.total_tokens", "15", "must be an integer"),
    ],
)
def test_bad_values_are_refused_naming_the_field(base, field, value, message):
    with pytest.raises(FieldError) as err:
        normalize_usage(_with(base, field, value))

    assert err.value.field == field
    assert message in err.value.message


def test_max_tokens_itself_is_accepted():
    got = normalize_usage({"input_tokens": MAX_TOKENS, "output_tokens": 0}, provider="anthropic")

    assert got.uncached_input == MAX_TOKENS


@pytest.mark.parametrize(
    ("usage", "provider", "field"),
    [
        ({"output_tokens": 1}, "anthropic", "usage.input_tokens"),
        ({"input_tokens": 1, "cache_read_input_tokens": 0}, None, "usage.output_tokens"),
        ({"prompt_tokens": 1}, None, "usage.completion_tokens"),
        ({"input_tokens": 1, "total_tokens": 1}, None, "usage.output_tokens"),
        ({"gen_ai.usage.output_tokens": 1}, None, "usage.gen_ai.usage.input_tokens"),
        ({"gen_ai.usage.prompt_tokens": 1}, None, "usage.gen_ai.usage.output_tokens"),
    ],
)
def test_missing_required_counts_name_the_field(usage, provider, field):
    with pytest.raises(FieldError) as err:
        normalize_usage(usage, provider=provider)

    assert err.value.field == field
    assert err.value.message == "is required"


def test_otel_aliases_that_disagree_are_refused():
    usage = {
        "gen_ai.usage.input_tokens": 900,
        "gen_ai.usage.prompt_tokens": 901,
        "gen_ai.usage.output_tokens": 3,
    }

    with pytest.raises(FieldError) as err:
        normalize_usage(usage)

    assert err.value.field == "usage.gen_ai.usage.prompt_tokens"


def test_otel_reasoning_above_output_is_refused():
    usage = {
        "gen_ai.usage.input_tokens": 9,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.reasoning.output_tokens": 4,
    }

    with pytest.raises(FieldError) as err:
        normalize_usage(usage)

    assert err.value.field == "usage.gen_ai.usage.reasoning.output_tokens"


@pytest.mark.parametrize("usage", [[1, 2], "usage", None, 3])
def test_a_usage_that_is_not_an_object_is_refused(usage):
    with pytest.raises(FieldError) as err:
        normalize_usage(usage)

    assert err.value.field == "usage"


def test_a_bad_cache_ttl_is_refused():
    with pytest.raises(FieldError) as err:
        normalize_usage(ANTHROPIC_OK, cache_ttl="24h")  # type: ignore[arg-type]

    assert err.value.field == "cache_ttl"


def test_usage_error_is_a_value_error_with_the_field_in_its_text():
    err = FieldError("usage.x", "is required")

    assert isinstance(err, ValueError)
    assert str(err) == "usage.x: is required"


# --- the dataclass's own invariants ------------------------------------------------------------


def _usage(**overrides: Any) -> NormalizedUsage:
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
    return NormalizedUsage(**{**fields, **overrides})


def test_context_is_the_sum_of_the_four_input_buckets_and_excludes_output():
    got = _usage()

    assert got.cache_write == 7
    assert got.context_tokens == 10


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider": "openai"},
        {"uncached_input": -1},
        {"cache_read": True},
        {"output": 1.0},
        {"cache_write_1h": MAX_TOKENS + 1},
        {"reasoning_output": 6},
        {"reasoning_output": -1},
    ],
)
def test_normalized_usage_refuses_values_that_break_its_invariants(overrides):
    with pytest.raises(ValueError):
        _usage(**overrides)


counts = st.integers(min_value=0, max_value=10**9)


@given(uncached=counts, cached=counts, output=counts, reasoning=counts)
def test_openai_inclusive_counts_keep_the_prompt_size_as_context(
    uncached, cached, output, reasoning
):
    reasoning = min(reasoning, output)
    usage = {
        "prompt_tokens": uncached + cached,
        "completion_tokens": output,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }

    got = normalize_usage(usage)

    assert got.context_tokens == uncached + cached
    assert got.uncached_input == uncached
    assert got.output == output


@given(uncached=counts, read=counts, write=counts)
def test_otel_inclusive_and_anthropic_exclusive_agree_on_context(uncached, read, write):
    anthropic = normalize_usage(
        {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 1,
        }
    )
    otel = normalize_usage(
        {
            "gen_ai.usage.input_tokens": uncached + read + write,
            "gen_ai.usage.cache_read.input_tokens": read,
            "gen_ai.usage.cache_creation.input_tokens": write,
            "gen_ai.usage.output_tokens": 1,
        }
    )

    assert otel.context_tokens == anthropic.context_tokens == uncached + read + write
    assert otel.flags == ()
