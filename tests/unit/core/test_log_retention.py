"""Log retention removes only text the surface no longer shows (issue 35): the surface keeps
its bytes, and the rule reads only a stored message's seq and role."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from context_core import (
    Message,
    SummarizeOperation,
    canonical_json,
    derive_surface,
    derive_surface_at,
    hidden_seqs,
    is_removed,
    plan_relief,
    removable_seqs,
    removed_message,
    text_message,
)
from tests.unit.core import transcripts as tx
from tests.unit.core.test_agent_compaction import _agent
from tests.unit.core.test_properties import _log, formats, policies


def _removing(log: list[Message], seqs: set[int]) -> list[Message]:
    return [
        removed_message(seq=m.seq, role=m.role, format=m.format) if m.seq in seqs else m
        for m in log
    ]


@st.composite
def compacted(draw: Any) -> tuple[list[Message], list[object]]:
    """A parsed log and the operations two relief passes (and maybe an agent cut) put on it."""
    log = _log(draw(tx.transcripts()), draw(formats))
    policy = draw(policies)
    first = plan_relief(derive_surface(log), policy=policy, mode="forced").operations
    second = plan_relief(derive_surface(log, first), policy=policy, mode="forced").operations
    operations: list[object] = [*first, *second]
    if log and draw(st.booleans()):
        cut = draw(st.integers(0, log[-1].seq + 1))
        operations.insert(draw(st.integers(0, len(operations))), _agent(cut))
    return log, operations


@given(compacted(), st.data())
def test_removing_the_text_of_hidden_messages_keeps_the_surface_byte_for_byte(case, data):
    log, operations = case
    hidden = set(hidden_seqs(log, operations))
    removed = _removing(log, hidden)
    assert canonical_json(derive_surface(removed, operations)) == canonical_json(
        derive_surface(log, operations)
    )
    # every prefix's size (the surface versions' chars) stays too
    counts = sorted(data.draw(st.sets(st.integers(0, len(log) + 1), max_size=4)))
    assert derive_surface_at(removed, operations, counts) == derive_surface_at(
        log, operations, counts
    )


@given(compacted())
def test_a_hidden_message_never_reaches_the_surface_and_a_shown_one_always_does(case):
    log, operations = case
    hidden = set(hidden_seqs(log, operations))
    shown = {m.seq for m in derive_surface(log, operations).messages if m.summarizes is None}
    assert hidden.isdisjoint(shown)
    assert hidden | shown == {m.seq for m in log}


@given(compacted(), st.data())
def test_the_rule_reads_only_seq_and_role_and_each_row_alone(case, data):
    log, operations = case
    hidden = hidden_seqs(log, operations)
    rows = [(m.seq, m.role) for m in log]
    assert removable_seqs(rows, operations, archived=len(log) + 1) == hidden
    some = sorted(data.draw(st.sets(st.sampled_from(rows)))) if rows else []
    assert removable_seqs(some, operations, archived=len(log) + 1) == tuple(
        s for s in hidden if s in {seq for seq, _ in some}
    )
    archived = data.draw(st.integers(0, len(log) + 1))
    assert removable_seqs(rows, operations, archived=archived) == tuple(
        s for s in hidden if s < archived
    )


def _message(seq: int, role: str = "user") -> Message:
    return text_message(f"m{seq}", role=role, seq=seq, format="anthropic")  # type: ignore[arg-type]


def test_a_span_hides_its_first_and_last_seq_and_nothing_beside_it():
    log = [
        _message(0, "system"),
        *(_message(s, "user" if s % 2 else "assistant") for s in range(1, 9)),
    ]
    span = SummarizeOperation(
        first_seq=2, last_seq=5, summary="s", summarizer="extractive", message_count=4
    )
    assert hidden_seqs(log, [span]) == (2, 3, 4, 5)
    assert removable_seqs([(m.seq, m.role) for m in log], [span], archived=5) == (2, 3, 4)
    # a later span that swallows the summary hides what the summary stood for too
    wider = SummarizeOperation(
        first_seq=1, last_seq=2, summary="t", summarizer="extractive", message_count=2
    )
    assert hidden_seqs(log, [span, wider]) == (1, 2, 3, 4, 5)


def test_an_agent_cut_hides_what_precedes_it_but_the_system_prompt():
    log = [_message(0, "system"), *(_message(s) for s in range(1, 6))]
    assert hidden_seqs(log, [_agent(3)]) == (1, 2)
    assert hidden_seqs(log, [_agent(0)]) == ()
    assert hidden_seqs(log, []) == ()


def test_a_removed_message_is_told_apart_from_every_parsed_or_summary_message():
    assert is_removed(removed_message(seq=3, role="tool", format="openai"))
    assert not is_removed(_message(3))
    empty = _log(tx.Transcript(system=None, system_marked=False, steps=[]), "anthropic")
    assert not any(is_removed(m) for m in empty)
