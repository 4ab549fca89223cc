"""The agent's own compaction as an operation on the log (issue 11): the surface after it is
what the agent sent — its summary and what followed — while the log keeps every message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import (
    AgentCompactionOperation,
    BoundSpec,
    Message,
    SummarizeOperation,
    derive_surface,
    operation_from_dict,
    parse_anthropic,
    parse_openai,
)
from tests.unit.core import transcripts as tx
from tests.unit.core.transcripts import CAP


def _log(t: tx.Transcript, fmt: str) -> list[Message]:
    if fmt == "anthropic":
        system, items = tx.anthropic(t)
        return parse_anthropic(items, system=system, bound=BoundSpec(CAP))
    return parse_openai(tx.openai(t), bound=BoundSpec(CAP))


def _agent(seq: int, key: str = "line-1") -> AgentCompactionOperation:
    return AgentCompactionOperation(
        keep_from_seq=seq, source="claude-code", source_key=key, trigger="auto", summary="s"
    )


formats = st.sampled_from(["anthropic", "openai"])


@given(tx.transcripts(), formats, st.data())
def test_agent_compaction_hides_exactly_the_messages_before_its_cut_but_system(t, fmt, data):
    log = _log(t, fmt)
    cut = data.draw(st.integers(0, len(log) + 1))
    surface = derive_surface(log, [_agent(cut)])
    plain = derive_surface(log)
    expected = [m for m in plain.messages if m.seq >= cut or m.role == "system"]
    assert list(surface.messages) == expected
    assert surface.chars == sum(m.chars for m in expected)


@given(tx.transcripts(), formats, st.data())
def test_the_latest_cut_wins_whatever_the_order_and_reapplying_changes_nothing(t, fmt, data):
    log = _log(t, fmt)
    cuts = data.draw(st.lists(st.integers(0, len(log)), min_size=1, max_size=3))
    ops = [_agent(c, f"line-{i}") for i, c in enumerate(cuts)]
    once = derive_surface(log, ops)
    assert once == derive_surface(log, list(reversed(ops)))
    assert once == derive_surface(log, [_agent(max(cuts))])
    assert derive_surface(once.messages, ops) == once
    assert derive_surface(log, [*ops, *ops]) == once


@given(tx.transcripts(), formats, st.data())
def test_our_summary_of_a_span_before_the_cut_disappears_with_it(t, fmt, data):
    log = _log(t, fmt)
    if len(log) < 3:
        return
    first = data.draw(st.integers(0, len(log) - 2))
    last = data.draw(st.integers(first, len(log) - 2))
    summary = SummarizeOperation(first, last, "ours", "extractive", last - first + 1)
    cut = data.draw(st.integers(last + 1, len(log)))
    surface = derive_surface(log, [summary, _agent(cut)])
    assert all(m.summarizes is None for m in surface.messages)
    assert all(m.seq >= cut or m.role == "system" for m in surface.messages)


def test_agent_compaction_round_trips_through_json():
    op = _agent(7, "abc")
    data = json.loads(json.dumps(op.to_dict()))
    assert operation_from_dict(data) == op
    assert data["kind"] == "agent"


def test_a_negative_cut_is_refused():
    with pytest.raises(ValueError, match="keep_from_seq"):
        _agent(-1)


def test_the_log_keeps_every_message_and_the_surface_starts_at_the_summary():
    log = parse_anthropic(
        [
            {"role": "user", "content": "first prompt"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "This session is being continued... summary"},
            {"role": "assistant", "content": "next"},
        ]
    )
    surface = derive_surface(log, [_agent(2)])
    assert [m.seq for m in surface.messages] == [2, 3]
    assert surface.messages[0].text.startswith("This session is being continued")
    assert len(log) == 4
