"""A request's size, defined once (`telemetry.usage.context_size`): the sum of the input buckets
named by `INPUT_BUCKETS`, output never; the SQL form `context_sql` reads the same columns by
name (run here on SQLite's in-memory engine, no Django), and every kind of call row that has a
`context_tokens` answers the one definition."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from telemetry.usage import (
    BUCKETS,
    INPUT_BUCKETS,
    MAX_TOKENS,
    NormalizedUsage,
    context_size,
    context_sql,
)

# each bucket its own power of two, so a sum shows exactly which buckets it took
_POWERS = {bucket: 2 ** (10 * k) for k, bucket in enumerate(BUCKETS)}


def test_the_size_is_the_input_buckets_and_never_the_output():
    assert INPUT_BUCKETS == ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h")
    assert (*INPUT_BUCKETS, "output") == BUCKETS
    assert context_size(SimpleNamespace(**_POWERS)) == sum(_POWERS[b] for b in INPUT_BUCKETS)


def test_the_sql_form_reads_the_same_columns_by_name():
    db = sqlite3.connect(":memory:")
    # the columns in another order than `BUCKETS`: the expression must name them
    columns = list(reversed(BUCKETS))
    db.execute(f"CREATE TABLE calls ({', '.join(columns)})")
    db.execute(
        f"INSERT INTO calls VALUES ({', '.join('?' for _ in columns)})",
        [_POWERS[c] for c in columns],
    )
    assert context_sql("c") == (
        "(c.uncached_input + c.cache_read + c.cache_write_5m + c.cache_write_1h)"
    )
    (size,) = db.execute(f"SELECT {context_sql('c')} FROM calls AS c").fetchone()
    assert size == context_size(SimpleNamespace(**_POWERS))


counts = st.one_of(st.sampled_from([0, 1, MAX_TOKENS]), st.integers(0, MAX_TOKENS))


@given(values=st.fixed_dictionaries(dict.fromkeys(BUCKETS, counts)))
def test_a_usages_context_tokens_is_the_one_definition(values):
    usage = NormalizedUsage(
        provider="anthropic", reasoning_output=None, reported_cache=True, **values
    )
    assert usage.context_tokens == context_size(usage) == sum(values[b] for b in INPUT_BUCKETS)


def test_every_call_rows_context_tokens_is_the_one_definition():
    from datetime import UTC, datetime

    from telemetry.accounting import CallFigures
    from telemetry.cache_misses import CallObs

    at = datetime(2026, 1, 1, tzinfo=UTC)
    figures = CallFigures(
        call=0,
        at=at,
        model="m",
        reasoning_output=None,
        reported_cache=True,
        appended_chars=None,
        window_tokens=None,
        surface_version=None,
        cost_buckets=None,
        no_cache_cost=None,
        **_POWERS,
    )
    assert figures.context_tokens == context_size(SimpleNamespace(**_POWERS))
    # the classifier's observation carries the stored size, whatever the input buckets
    buckets = ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h")
    carried = {b: _POWERS[b] for b in buckets}
    obs = CallObs(turn=0, call=0, at=at, model="m", **carried, context=figures.context_tokens)
    assert obs.context_tokens == context_size(SimpleNamespace(**_POWERS))
    # built by hand without it: the input buckets it carries
    bare = CallObs(turn=0, call=0, at=at, model="m", **carried)
    assert bare.context_tokens == sum(_POWERS[b] for b in INPUT_BUCKETS if b in carried)
