"""The fast paths of usage normalisation against the general ones they stand before (oracles):
`NormalizedUsage`'s one-expression check of its counts raises what the check per count
raises, first failing count first; `_checked_usage` makes the instance the constructor makes;
the key inference answers as the full scan does; a call without iterations, edits or output
items reads as the general path reads it; and Anthropic's usual four counts read as
`_normalize` reads them, errors included."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.provider_context import ProviderUsage, read_provider_usage
from telemetry.usage import (
    BUCKETS,
    MAX_TOKENS,
    PROVIDERS,
    NormalizedUsage,
    _check_count,
    _checked_usage,
    _has_otel_keys,
    _infer_from_keys,
    _normalize,
    normalize_usage,
)

# every kind of value a count can be handed: in range, at and past the limits, and not an int
counts = st.one_of(
    st.integers(0, 10**6),
    st.sampled_from([0, MAX_TOKENS, MAX_TOKENS + 1, -1, True, False, 12.0, None, "3"]),
    st.integers(-(2**60), 2**60),
)


def _oracle(provider: Any, values: list[Any], reasoning: Any) -> str | None:
    """What `NormalizedUsage.__post_init__` raised with a call per count; None: nothing."""
    try:
        if provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {PROVIDERS}, got {provider!r}")
        for name, value in zip(BUCKETS, values, strict=True):
            _check_count(value, name)
        if reasoning is not None:
            _check_count(reasoning, "reasoning_output")
            if reasoning > values[4]:
                raise ValueError(f"reasoning_output ({reasoning}) exceeds output ({values[4]})")
    except ValueError as exc:
        return str(exc)
    return None


@given(
    provider=st.sampled_from([*PROVIDERS, "other"]),
    values=st.lists(counts, min_size=5, max_size=5),
    reasoning=st.one_of(st.none(), counts),
)
def test_counts_are_refused_as_the_check_per_count_refused_them(provider, values, reasoning):
    expected = _oracle(provider, values, reasoning)
    try:
        u, r, w5, w1, o = values
        usage = NormalizedUsage(provider, u, r, w5, w1, o, reasoning, True)
    except ValueError as exc:
        assert str(exc) == expected
    else:
        assert expected is None
        assert usage.context_tokens == sum(values[:4])
        assert usage.context_tokens == usage.uncached_input + usage.cache_read + usage.cache_write


@given(
    provider=st.sampled_from(PROVIDERS),
    values=st.lists(
        st.one_of(st.integers(0, MAX_TOKENS), st.sampled_from([0, MAX_TOKENS])),
        min_size=5,
        max_size=5,
    ),
    reported=st.booleans(),
)
def test_a_checked_usage_is_the_instance_the_constructor_makes(provider, values, reported):
    u, r, w5, w1, o = values
    made = _checked_usage(provider, u, r, w5, w1, o, reported)
    expected = NormalizedUsage(provider, u, r, w5, w1, o, None, reported)
    # every field, by name (one left unset would raise here), and the instance's own behaviour
    for name in NormalizedUsage.__dataclass_fields__:
        assert getattr(made, name) == getattr(expected, name), name
    assert (made, hash(made), repr(made)) == (expected, hash(expected), repr(expected))
    assert type(made) is NormalizedUsage and made.context_tokens == expected.context_tokens


def _infer_oracle(usage: dict[str, Any]) -> str | None:
    """`_infer_from_keys` as it was: Anthropic's keys found by the scan alone."""
    if "prompt_tokens" in usage:
        return "openai_chat"
    if "input_tokens" in usage and ("input_tokens_details" in usage or "total_tokens" in usage):
        return "openai_responses"
    if "cache_creation" in usage or any(
        isinstance(k, str) and k.startswith("cache_") and k.endswith("_input_tokens") for k in usage
    ):
        return "anthropic"
    if _has_otel_keys(usage):
        return "otel"
    return None


keys = st.sampled_from(
    [
        "prompt_tokens",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "input_tokens_details",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "cache_creation",
        "cache_other_input_tokens",
        "cache_read",
        "gen_ai.usage.input_tokens",
        "service_tier",
    ]
)


@given(usage=st.dictionaries(st.one_of(keys, st.integers(0, 3)), st.integers(0, 9)))
def test_keys_say_the_format_the_full_scan_said(usage):
    assert _infer_from_keys(usage) == _infer_oracle(usage)


small = st.integers(0, 10**6)
plain_usages = st.one_of(
    st.fixed_dictionaries(
        {"input_tokens": small, "output_tokens": small},
        optional={"cache_read_input_tokens": small, "cache_creation_input_tokens": small},
    ),
    st.fixed_dictionaries(
        {"prompt_tokens": st.just(10**6), "completion_tokens": small},
        optional={"prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": small})},
    ),
)


@given(usage=plain_usages, cache_ttl=st.sampled_from(["5m", "1h"]))
def test_a_plain_call_reads_as_the_general_path_reads_it(usage, cache_ttl):
    normalized = normalize_usage(usage, model="claude-sonnet-4-5", cache_ttl=cache_ttl)
    fast = read_provider_usage(usage, normalized, cache_ttl=cache_ttl)
    # an empty context and no items take the general path and find nothing either
    general = read_provider_usage(
        usage, normalized, cache_ttl=cache_ttl, context_management={}, output_items=[]
    )
    assert fast == general == ProviderUsage(normalized, (normalized,), ())


_USUAL_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _normalized_or_error(read: Any, usage: Any, **options: Any) -> Any:
    try:
        return read(usage, **options)
    except FieldError as exc:
        return ("FieldError", exc.field, exc.message)


@given(
    usage=st.one_of(
        # Anthropic's usual four counts, in range, or each any value a count can be handed
        st.fixed_dictionaries(dict.fromkeys(_USUAL_KEYS, small)),
        st.fixed_dictionaries(dict.fromkeys(_USUAL_KEYS, counts)),
        # some of them, or more keys beside them
        st.dictionaries(st.one_of(keys, st.sampled_from(_USUAL_KEYS)), counts, max_size=6),
        st.fixed_dictionaries(
            dict.fromkeys(_USUAL_KEYS, small),
            optional={"cache_creation": st.just({"ephemeral_1h_input_tokens": 5}), "x": small},
        ),
    ),
    provider=st.sampled_from([None, "anthropic", "Anthropic", " anthropic", "bedrock", "openai"]),
    model=st.sampled_from([None, "claude-sonnet-4-5", "gpt-5"]),
    cache_ttl=st.sampled_from(["5m", "1h", "2h"]),
)
@example({**dict.fromkeys(_USUAL_KEYS, 1), "cache_creation_input_tokens": 9}, None, None, "5m")
@example(
    {**dict.fromkeys(_USUAL_KEYS, 1), "cache_creation_input_tokens": 9}, "anthropic", None, "1h"
)
@example(dict.fromkeys(_USUAL_KEYS, MAX_TOKENS), None, None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "output_tokens": MAX_TOKENS + 1}, None, None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "input_tokens": MAX_TOKENS + 1}, None, None, "5m")
@example(
    {**dict.fromkeys(_USUAL_KEYS, 0), "cache_read_input_tokens": MAX_TOKENS + 1}, None, None, "1h"
)
@example(
    {**dict.fromkeys(_USUAL_KEYS, 0), "cache_creation_input_tokens": MAX_TOKENS + 1},
    None,
    None,
    "5m",
)
@example(
    {**dict.fromkeys(_USUAL_KEYS, 0), "cache_creation_input_tokens": MAX_TOKENS + 1},
    None,
    None,
    "1h",
)
@example(dict.fromkeys(_USUAL_KEYS, MAX_TOKENS + 1), None, None, "1h")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "output_tokens": -1}, None, None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "cache_read_input_tokens": -1}, None, None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "cache_creation_input_tokens": -1}, None, None, "1h")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "input_tokens": -1}, "anthropic", None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "input_tokens": True}, "anthropic", None, "5m")
@example({**dict.fromkeys(_USUAL_KEYS, 0), "cache_read_input_tokens": None}, None, None, "1h")
@example({**dict.fromkeys(_USUAL_KEYS, 7), "cache_creation_input_tokens": 12.0}, None, None, "5m")
def test_the_usual_anthropic_usage_reads_as_the_general_path_reads_it(
    usage, provider, model, cache_ttl
):
    options = {"provider": provider, "model": model, "cache_ttl": cache_ttl}
    assert _normalized_or_error(normalize_usage, usage, **options) == _normalized_or_error(
        _normalize, usage, **options
    )


_OTEL_NAMES = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
)
_IN, _OUT, _READ, _WRITE = _OTEL_NAMES
# the other names of the same quantities, and keys the reader ignores
_OTEL_OTHERS = (
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.input_tokens.cached",
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "gen_ai.usage.cache_write_input_tokens",
    "gen_ai.usage.input_tokens.cache_write",
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.provider.name",
    "input_tokens",
)


def _otel_usage(total: Any, read: Any, written: Any, **more: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {_IN: total, _OUT: 7, "gen_ai.provider.name": "anthropic", **more}
    if read is not None:
        usage[_READ] = read
    if written is not None:
        usage[_WRITE] = written
    return usage


@given(
    usage=st.one_of(
        # a span's usual counts, in range, with or without its cache counts
        st.fixed_dictionaries(
            {_IN: st.integers(0, 10**6), _OUT: small},
            optional={_READ: small, _WRITE: small, "gen_ai.provider.name": st.just("anthropic")},
        ),
        # each count any value a count can be handed
        st.fixed_dictionaries(dict.fromkeys(_OTEL_NAMES, counts)),
        # some of them, other names of the same quantities and ignored keys beside them
        st.dictionaries(st.sampled_from(_OTEL_NAMES + _OTEL_OTHERS), counts, max_size=7),
    ),
    provider=st.sampled_from(["otel", "OTel", " otel", "opentelemetry", "anthropic", None]),
    cache_ttl=st.sampled_from(["5m", "1h", "2h"]),
)
@example(_otel_usage(30, 10, 20), "otel", "5m")  # input exactly its cached part
@example(_otel_usage(29, 10, 20), "otel", "5m")  # one below: an exclusive count, flagged
@example(_otel_usage(30, 10, 20), "otel", "1h")
@example(_otel_usage(10, None, 10), "otel", "1h")
@example(_otel_usage(10, 10, None), "otel", "5m")
@example(_otel_usage(10, None, None), "otel", "5m")  # no cache count: cache unknown
@example(_otel_usage(MAX_TOKENS, MAX_TOKENS, 0), "otel", "5m")
@example(_otel_usage(MAX_TOKENS + 1, 0, 0), "otel", "5m")
@example(_otel_usage(MAX_TOKENS, MAX_TOKENS, 1), "otel", "5m")  # cached past the limit
@example(_otel_usage(5, 0, 0, **{_OUT: MAX_TOKENS}), "otel", "5m")
@example(_otel_usage(5, 0, 0, **{_OUT: MAX_TOKENS + 1}), "otel", "5m")
@example(_otel_usage(5, 0, 0, **{_OUT: -1}), "otel", "5m")
@example(_otel_usage(5, -1, 0), "otel", "5m")
@example(_otel_usage(5, 0, -1), "otel", "1h")
@example(_otel_usage(-1, None, None), "otel", "5m")
@example(_otel_usage(5, True, 0), "otel", "5m")
@example(_otel_usage(5, 0, 1.0), "otel", "5m")
@example(_otel_usage(5, None, None, **{_READ: None}), "otel", "5m")
@example(_otel_usage(5, 1, 1, **{"gen_ai.usage.reasoning.output_tokens": 3}), "otel", "5m")
@example(_otel_usage(5, 1, 1, **{"gen_ai.usage.reasoning.output_tokens": 8}), "otel", "5m")
@example(_otel_usage(5, 1, 1, **{"gen_ai.usage.cache_read_input_tokens": 2}), "otel", "5m")
@example(_otel_usage(5, 1, 1, **{"gen_ai.usage.prompt_tokens": 5}), "otel", "5m")
@example(_otel_usage(5, 1, 1), "otel", "2h")
@example({_OUT: 1}, "otel", "5m")
@example({_IN: 1}, "otel", "5m")
def test_a_spans_usual_usage_reads_as_the_general_path_reads_it(usage, provider, cache_ttl):
    options = {"provider": provider, "model": "claude-sonnet-4-5", "cache_ttl": cache_ttl}
    assert _normalized_or_error(normalize_usage, usage, **options) == _normalized_or_error(
        _normalize, usage, **options
    )
