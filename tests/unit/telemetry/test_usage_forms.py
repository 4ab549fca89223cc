"""A call's raw usage is stored as nothing only where its buckets give it back equal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError
from telemetry.usage import normalize_usage
from telemetry.usage_forms import derived_usage, stored_usage, usage_as_sent


@dataclass
class Call:
    provider: str
    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int


def _stored_and_read(usage: dict[str, Any], provider: str | None, ttl: str) -> tuple[Any, Any]:
    """What the calls table keeps of `usage` as ingest normalises it, and what a reader gets."""
    n = normalize_usage(usage, provider=provider, cache_ttl=ttl)  # type: ignore[arg-type]
    counts = (n.uncached_input, n.cache_read, n.cache_write_5m, n.cache_write_1h, n.output)
    kept = stored_usage(n.provider, usage, *counts)
    return kept, usage_as_sent(kept, Call(n.provider, *counts))


counts = st.integers(0, 2**53 - 1)
values = st.one_of(counts, st.floats(allow_nan=False), st.booleans(), st.text(max_size=3))
usage_keys = st.sampled_from(
    [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_tokens",
        "completion_tokens",
        "service_tier",
        "cost_usd",
    ]
)
anthropic_usage = st.fixed_dictionaries(
    {"input_tokens": counts, "output_tokens": counts},
    optional={
        "cache_read_input_tokens": counts,
        "cache_creation_input_tokens": counts,
        "cache_creation": st.fixed_dictionaries(
            {}, optional={"ephemeral_5m_input_tokens": counts, "ephemeral_1h_input_tokens": counts}
        ),
        "service_tier": st.just("standard"),
    },
)


@given(
    st.one_of(anthropic_usage, st.dictionaries(usage_keys, values, max_size=6)),
    st.sampled_from([None, "anthropic", "openai_chat", "openai_responses", "otel"]),
    st.sampled_from(["5m", "1h"]),
)
def test_every_usage_reads_back_as_sent(usage: dict[str, Any], provider: str | None, ttl: str):
    try:
        kept, read = _stored_and_read(usage, provider, ttl)
    except FieldError:
        return  # refused at the door: never stored
    assert read == usage
    assert [type(v) for v in read.values()] == [type(usage[k]) for k in read]
    assert kept is None or kept is usage


def test_the_usual_anthropic_usage_is_stored_as_nothing_in_either_tier():
    usage = {
        "input_tokens": 12,
        "cache_read_input_tokens": 9000,
        "cache_creation_input_tokens": 300,
        "output_tokens": 400,
    }
    for ttl in ("5m", "1h"):
        assert _stored_and_read(usage, None, ttl) == (None, usage)


def test_a_key_more_a_float_or_a_bool_is_kept_verbatim():
    usual = {
        "input_tokens": 1,
        "cache_read_input_tokens": 2,
        "cache_creation_input_tokens": 3,
        "output_tokens": 4,
    }
    for different in (
        {**usual, "service_tier": "standard"},
        {k: v for k, v in usual.items() if k != "cache_read_input_tokens"},
    ):
        assert stored_usage("anthropic", different, 1, 2, 3, 0, 4) is different
    # what the buckets do not say, or say otherwise
    assert stored_usage("anthropic", usual, 1, 2, 3, 0, 5) is usual
    assert stored_usage("anthropic", {**usual, "output_tokens": 4.0}, 1, 2, 3, 0, 4) is not None
    assert stored_usage("anthropic", {**usual, "input_tokens": True}, 1, 2, 3, 0, 4) is not None
    assert stored_usage("openai_chat", usual, 1, 2, 3, 0, 4) is usual


def test_moving_writes_between_tiers_keeps_the_derived_usage():
    """`telemetry.repricing` moves untiered writes from one tier to the other: the flat
    `cache_creation_input_tokens` is their sum either way."""
    assert derived_usage("anthropic", 1, 2, 300, 0, 4) == derived_usage(
        "anthropic", 1, 2, 0, 300, 4
    )


def test_the_derived_keys_come_in_jsonbs_order():
    """PostgreSQL gives a stored object's keys shorter first: a derived one reads the same."""
    keys = list(derived_usage("anthropic", 1, 2, 3, 4, 5) or {})
    assert keys == sorted(keys, key=lambda k: (len(k), k))
