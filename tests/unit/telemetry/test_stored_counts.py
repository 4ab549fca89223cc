"""What a call's row can store (`telemetry.usage.MAX_STORED_COUNT`, its `integer` columns):
`oversized_count` names the first count above it, the request's size (the input buckets' sum)
included, and passes every usage whose counts all fit; the cap is PostgreSQL's `integer`."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.usage import (
    BUCKETS,
    INPUT_BUCKETS,
    MAX_STORED_COUNT,
    MAX_TOKENS,
    NormalizedUsage,
    context_size,
    oversized_count,
)

M = MAX_STORED_COUNT
_EDGES = st.sampled_from([0, 1, M // 4, M // 2, M - 1, M, M + 1, 2**32, MAX_TOKENS])
_COUNTS = st.one_of(_EDGES, st.integers(0, MAX_TOKENS), st.integers(0, 2_000_000))


def _usage(counts: dict[str, int], reasoning: int | None = None) -> NormalizedUsage:
    u, r, w5, w1, o = (counts[name] for name in BUCKETS)
    return NormalizedUsage("anthropic", u, r, w5, w1, o, reasoning, reported_cache=True)


def test_the_cap_is_postgresqls_integer():
    # The range as `compaction.session_import` reads it: by the column's internal type, from
    # `BaseDatabaseOperations`. That module is in an import loop of Django's own (it imports
    # `django.db.models.expressions`; `django.db.models` then imports `lookups`, which imports
    # it back), so it can be imported only once `django.db.models` is, as in every Django
    # process. This test, alone in the unit suite (no Django set up), imports that first.
    from django.db.models import IntegerField

    column = IntegerField().get_internal_type()
    from django.db.backends.base.operations import BaseDatabaseOperations

    assert BaseDatabaseOperations.integer_field_ranges[column] == (-M - 1, M)


@given(st.fixed_dictionaries(dict.fromkeys(BUCKETS, _COUNTS)), st.data())
@example(dict.fromkeys(BUCKETS, 0), None)
@example({**dict.fromkeys(BUCKETS, 0), "cache_read": M}, None)
@example({**dict.fromkeys(BUCKETS, 0), "output": M + 1}, None)
@example({**dict.fromkeys(INPUT_BUCKETS, M // 4 + 1), "output": 0}, None)
def test_a_usage_is_refused_exactly_when_a_stored_count_does_not_fit(counts, data):
    reasoning = None if data is None else data.draw(st.none() | st.integers(0, counts["output"]))
    usage = _usage(counts, reasoning)
    stored = {**counts, "context_tokens": context_size(usage)}
    if reasoning is not None:
        stored["reasoning_output"] = reasoning
    too_big = [(name, value) for name, value in stored.items() if value > M]
    found = oversized_count(usage)
    if not too_big:
        assert found is None
    else:
        assert found in too_big
        # an input bucket is named before the size it is part of
        if any(name in INPUT_BUCKETS for name, _ in too_big):
            assert found is not None and found[0] in INPUT_BUCKETS
