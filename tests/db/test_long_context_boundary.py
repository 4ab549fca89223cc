"""The long-context tier as ingest stores it: a call exactly at a model's threshold is priced at
the base rates, one token above at the premium rates, whole call, output too; by every path a
call is stored by (one record alone, a batch), on PostgreSQL and SQLite. The tier rule is
`ModelPrice.in_long_context`, and what these rows hold moves with it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from telemetry.catalogue import forget_catalogue
from telemetry.models import LLMCall
from telemetry.pricing import ModelPrice

pytestmark = pytest.mark.django_db

# Haiku 5.5: over 100k input tokens the whole request is billed at $0.50/$2.50 instead of
# $0.10/$0.50 per MTok.
HAIKU = "claude-haiku-5-5"
THRESHOLD = 100_000


def _record(session: str, turn: int, uncached: int, read: int = 0) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn": turn,
        "model": HAIKU,
        "usage": {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "output_tokens": 1_000,
        },
    }


# (uncached input, cache read) → (stored cost_uncached_input, cost_cache_read, cost_output,
# cost_usd, long_context), each hand-computed from the list prices.
_EXPECTED = {
    # at the threshold: base rates, 100,000 × $0.10 + 1,000 × $0.50 per MTok
    (THRESHOLD, 0): ("0.010000000", "0E-9", "0.000500000", "0.010500000", False),
    # one below
    (THRESHOLD - 1, 0): ("0.009999900", "0E-9", "0.000500000", "0.010499900", False),
    # one above: premium rates for the whole call, 100,001 × $0.50 + 1,000 × $2.50
    (THRESHOLD + 1, 0): ("0.050000500", "0E-9", "0.002500000", "0.052500500", True),
    # one above, made of cache reads (read at 0.1 × input: $0.05 base, $0.05 premium)
    (1, THRESHOLD): ("0.000000500", "0.005000000", "0.002500000", "0.007500500", True),
    # at the threshold, made of cache reads
    (0, THRESHOLD): ("0E-9", "0.001000000", "0.000500000", "0.001500000", False),
}


def _stored(session: str) -> dict[tuple[int, int], tuple[str, str, str, str, bool]]:
    return {
        (call.uncached_input, call.cache_read): (
            str(call.cost_uncached_input),
            str(call.cost_cache_read),
            str(call.cost_output),
            str(call.cost_usd),
            call.long_context,
        )
        for call in LLMCall.objects.filter(session__external_id=session)
    }


def _as_decimals(rows: dict[Any, tuple[Any, ...]]) -> dict[Any, tuple[Any, ...]]:
    return {
        key: tuple(Decimal(v) if isinstance(v, str) else v for v in row)
        for key, row in rows.items()
    }


def test_one_record_at_a_time_is_priced_by_its_tier_at_the_threshold(agent):
    for turn, (uncached, read) in enumerate(_EXPECTED):
        response = agent.post("/api/v1/telemetry", _record("one", turn, uncached, read))
        assert response.status_code == 201, response.content
    assert _as_decimals(_stored("one")) == _as_decimals(_EXPECTED)


def test_a_batch_is_priced_by_each_calls_tier_at_the_threshold(agent):
    records = [
        _record("batch", turn, uncached, read) for turn, (uncached, read) in enumerate(_EXPECTED)
    ]
    response = agent.post("/api/v1/telemetry", {"records": records})
    assert response.status_code == 200, response.content
    assert _as_decimals(_stored("batch")) == _as_decimals(_EXPECTED)


def _at_or_above(price: ModelPrice, context_tokens: int) -> bool:
    """`ModelPrice.in_long_context` with `>=` for its `>`."""
    threshold = price.long_context_threshold
    return threshold is not None and context_tokens >= threshold


@pytest.mark.parametrize("batch", [False, True])
def test_the_tier_rule_changed_at_its_one_definition_changes_what_ingest_stores(
    agent, monkeypatch, batch
):
    # the rule is `ModelPrice.in_long_context`: made `>=` there alone, a call exactly at the
    # threshold is stored at the premium rates, 100,000 × $0.50 + 1,000 × $2.50 per MTok
    monkeypatch.setattr(ModelPrice, "in_long_context", _at_or_above)
    forget_catalogue()
    records = [_record("moved", 0, THRESHOLD), _record("moved", 1, THRESHOLD - 1)]
    if batch:
        response = agent.post("/api/v1/telemetry", {"records": records})
        assert response.status_code == 200, response.content
    else:
        for record in records:
            assert agent.post("/api/v1/telemetry", record).status_code == 201
    assert _as_decimals(_stored("moved")) == _as_decimals(
        {
            (THRESHOLD, 0): ("0.050000000", "0E-9", "0.002500000", "0.052500000", True),
            (THRESHOLD - 1, 0): _EXPECTED[(THRESHOLD - 1, 0)],
        }
    )
