"""A stored turn holds, figure by figure and by name, what each figure's definition
(`telemetry.figures.TURN_FIGURES`, its plain Python fold) gives over the turn's stored calls:
on PostgreSQL the set-wise SQL built from the same definitions derives it, on SQLite
`summarize_turn`. The calls are drawn about the boundaries on purpose: a request exactly at its
model's long-context threshold and one token either side, zero and maximal counts, calls that
did or did not report their cache, priced and unpriced models, calls out of order."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.derivation import _CALL_FIELDS, _figures_of
from telemetry.figures import TURN_FIGURE_NAMES, fold_turn
from telemetry.ingest.pipeline import store_records
from telemetry.models import LLMCall, Turn
from telemetry.usage import MAX_STORED_COUNT

pytestmark = pytest.mark.django_db

# model -> its long-context threshold (None: no tier); the last model is unpriced
_MODELS = {"claude-haiku-5-5": 100_000, "claude-sonnet-4-5": 200_000, "acme-llm-9": None}
_START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
_sessions = itertools.count()


@st.composite
def _records(draw: Any) -> dict[str, Any]:
    model = draw(st.sampled_from(sorted(_MODELS)))
    threshold = _MODELS[model]
    part = st.one_of(st.just(0), st.integers(0, 5_000))
    read, write_5m, write_1h = draw(part), draw(part), draw(part)
    cached = read + write_5m + write_1h
    if threshold is None:  # unpriced: no money column to overflow, so counts up to the largest
        top = MAX_STORED_COUNT - cached  # the request's size at the largest a row stores
        uncached = draw(st.one_of(st.just(0), st.just(top), st.integers(0, 10**9)))
        output = draw(st.one_of(st.just(0), st.just(MAX_STORED_COUNT), st.integers(0, 10**6)))
    else:
        at = [threshold - 1, threshold, threshold + 1]
        size = draw(st.one_of(st.sampled_from(at), st.integers(cached, 2 * threshold)))
        uncached = max(size - cached, 0)
        output = draw(st.one_of(st.just(0), st.integers(0, 100_000)))
    usage: dict[str, Any] = {"input_tokens": uncached, "output_tokens": output}
    if cached or draw(st.booleans()):  # else the call did not report its cache
        usage["cache_read_input_tokens"] = read
        usage["cache_creation"] = {
            "ephemeral_5m_input_tokens": write_5m,
            "ephemeral_1h_input_tokens": write_1h,
        }
    return {
        "model": model,
        "provider": "anthropic",
        "usage": usage,
        "at": (_START + timedelta(seconds=draw(st.integers(0, 600)))).isoformat(),
        "appended_chars": draw(st.none() | st.integers(0, 10_000)),
        "window_tokens": draw(st.none() | st.just(1_000_000)),
        "surface_version": draw(st.none() | st.integers(1, 3)),
    }


def _same(stored: Any, defined: Any) -> bool:
    # money by value: the column keeps nine places, a Python sum its own exponent
    if isinstance(defined, Decimal):
        return stored is not None and Decimal(stored) == defined
    return bool(stored == defined)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(turns=st.lists(st.lists(_records(), min_size=1, max_size=3), min_size=1, max_size=3))
def test_each_stored_turn_figure_is_its_definition_over_the_stored_calls(make_agent, turns):
    profile = make_agent().key.profile
    session = f"s{next(_sessions)}"
    records = [
        {**record, "session_id": session, "turn": turn, "call": call}
        for turn, calls in enumerate(turns)
        for call, record in reversed(list(enumerate(calls)))  # out of call order
    ]
    result = store_records(profile=profile, raw_items=records, batch=len(records) > 1)
    assert {i.status for i in result.items} == {"created"}, result.items
    calls: dict[int, list[Any]] = {}
    for row in LLMCall.objects.filter(session__external_id=session).values_list(*_CALL_FIELDS):
        calls.setdefault(row[1], []).append(_figures_of(dict(zip(_CALL_FIELDS, row, strict=True))))
    stored = {
        turn["turn"]: turn
        for turn in Turn.objects.filter(session__external_id=session).values(
            "turn", *TURN_FIGURE_NAMES
        )
    }
    assert set(stored) == set(calls)
    for turn, found in calls.items():
        defined = fold_turn(found)
        differ = [n for n in TURN_FIGURE_NAMES if not _same(stored[turn][n], defined[n])]
        assert not differ, [(n, stored[turn][n], defined[n]) for n in differ]
