"""Property tests over generated transcripts, in both formats (issue 4, "Done when")."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from context_core import (
    AgentCompactionOperation,
    BoundSpec,
    ConversionError,
    Message,
    ReliefPolicy,
    ToolCall,
    ToolResult,
    bound_text,
    canonical_json,
    derive_surface,
    derive_surface_at,
    operation_from_dict,
    parse_anthropic,
    parse_openai,
    plan_relief,
    split_rounds,
    to_anthropic,
    to_openai,
    validate_transcript,
)
from tests.unit.core import transcripts as tx
from tests.unit.core.transcripts import CAP


def _log(t: tx.Transcript, fmt: str, *, as_text: bool = False) -> list[Message]:
    if fmt == "anthropic":
        system, items = tx.anthropic(t)
        raw = [json.dumps(m) for m in items] if as_text else items
        return parse_anthropic(raw, system=system, bound=BoundSpec(CAP))
    items = tx.openai(t)
    raw = [json.dumps(m, ensure_ascii=False) for m in items] if as_text else items
    return parse_openai(raw, bound=BoundSpec(CAP))


def _assert_pairing(messages: tuple[Message, ...] | list[Message]) -> None:
    """Every result follows its call; seqs strictly increase; ids unique."""
    validate_transcript(messages)
    seen: set[str] = set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCall):
                assert block.id not in seen
                seen.add(block.id)
            if isinstance(block, ToolResult):
                assert block.call_id in seen


policies = st.builds(
    ReliefPolicy,
    prune_threshold=st.just(0.01),
    summarize_threshold=st.sampled_from([0.01, 0.5, 1.0]),
    keep_rounds=st.integers(0, 10),
    keep_rounds_verbatim=st.integers(0, 10),
    stub_head_chars=st.integers(2, 40),
    stub_tail_chars=st.integers(0, 40),
    prune_min_free_tokens=st.integers(0, 50),
    prune_exclude_tools=st.sets(st.sampled_from(["grep", "run"]), max_size=1).map(frozenset),
    summary_max_tokens=st.integers(2, 200),
    window_tokens=st.integers(101, 1_500),
    reserved_output_tokens=st.just(100),
)

formats = st.sampled_from(["anthropic", "openai"])


@given(tx.transcripts(), formats)
def test_parsed_transcripts_round_trip_losslessly_within_their_format(t, fmt):
    log = _log(t, fmt)
    if fmt == "anthropic":
        system, items = tx.anthropic(t)
        assert to_anthropic(log) == (system, items)
    else:
        assert to_openai(log) == tx.openai(t)


@given(tx.transcripts(), formats)
def test_every_original_message_is_recoverable_byte_for_byte(t, fmt):
    log = _log(t, fmt, as_text=True)
    if fmt == "anthropic":
        system, items = tx.anthropic(t)
        body = log[1:] if system is not None else log
        assert [m.raw for m in body] == [json.dumps(m) for m in items]
    else:
        assert [m.raw for m in log] == [json.dumps(m, ensure_ascii=False) for m in tx.openai(t)]
    for message in log:
        assert message.raw == "" or json.loads(message.raw) is not None


@given(tx.transcripts(), formats, policies, st.sampled_from(["normal", "forced"]))
def test_relief_keeps_pairing_and_never_grows_the_surface(t, fmt, policy, mode):
    log = _log(t, fmt)
    surface = derive_surface(log)
    assert surface.chars <= sum(m.chars for m in log)
    plan = plan_relief(surface, policy=policy, mode=mode)
    after = derive_surface(log, plan.operations)
    _assert_pairing(after.messages)
    assert after.chars <= surface.chars
    assert [m.seq for m in after.messages] == sorted({m.seq for m in after.messages})
    # The tool loop in progress is untouched: its round is identical on both surfaces.
    rounds = split_rounds(surface.messages)
    if rounds and rounds[-1].pending:
        tail = surface.messages[rounds[-1].start :]
        assert after.messages[len(after.messages) - len(tail) :] == tail
    if plan.operations:
        assert plan.first_changed_index is not None
        assert (
            surface.messages[: plan.first_changed_index]
            == after.messages[: plan.first_changed_index]
        )
    else:
        assert after == surface
    # Rendering the surface in its own format never fails and never carries cache markers.
    assert b"cache_control" not in canonical_json(after)


@given(tx.transcripts(), formats, policies)
def test_derivation_is_deterministic_and_idempotent(t, fmt, policy):
    log = _log(t, fmt)
    first = plan_relief(derive_surface(log), policy=policy, mode="forced")
    surface = derive_surface(log, first.operations)
    # A second pass plans on the surface and may stack a prune on an earlier summary.
    second = plan_relief(surface, policy=policy, mode="forced")
    ops = first.operations + second.operations
    final = derive_surface(log, ops)
    _assert_pairing(final.messages)
    again = derive_surface(
        _log(t, fmt), [operation_from_dict(json.loads(json.dumps(o.to_dict()))) for o in ops]
    )
    assert canonical_json(again) == canonical_json(final)
    assert derive_surface(log, ops + ops) == final
    assert derive_surface(final.messages, ops) == final
    assert final.chars <= surface.chars <= sum(m.chars for m in log)


@given(tx.transcripts(), formats)
def test_bounding_respects_each_messages_recorded_cap(t, fmt):
    log = _log(t, fmt)
    surface = derive_surface(log)
    for message in surface.messages:
        for block in message.blocks:
            if isinstance(block, ToolResult):
                assert block.text_chars <= CAP
    unbounded = derive_surface(_log_without_bound(t, fmt))
    assert surface.chars <= unbounded.chars


def _log_without_bound(t: tx.Transcript, fmt: str) -> list[Message]:
    if fmt == "anthropic":
        system, items = tx.anthropic(t)
        return parse_anthropic(items, system=system)
    return parse_openai(tx.openai(t))


@given(tx.transcripts(thinking=False))
def test_lossless_cross_format_conversion_preserves_the_conversation(t):
    log = _log(t, "openai")
    try:
        system, items = to_anthropic(log)
    except ConversionError:
        return
    back = parse_anthropic(items, system=system)
    _assert_pairing(back)
    assert _semantics(back) == _semantics(log)
    assert _semantics(parse_openai(to_openai(back))) == _semantics(log)


@given(tx.transcripts())
def test_conversion_refuses_signed_thinking_blocks(t):
    log = _log(t, "anthropic")
    has_thinking = any(s.thinking for s in t.steps if s.kind == "round")
    try:
        items = to_openai(log)
    except ConversionError as exc:
        assert exc.reason
        return
    assert not has_thinking
    _assert_pairing(parse_openai(items))


def _semantics(messages: list[Message]) -> list[tuple[object, ...]]:
    """Roles, text, calls and results in order, with the format's grouping normalised away."""
    out: list[tuple[object, ...]] = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolCall):
                out.append(("call", block.id, block.name, json.loads(block.arguments)))
            elif isinstance(block, ToolResult):
                out.append(("result", block.call_id, block.text, bool(block.is_error)))
        text = message.text
        if text and message.role != "tool":
            out.append((message.role, text))
    return out


@given(st.text(alphabet=tx._ALPHABET) | st.text(), st.integers(2, 400))
def test_bounded_text_never_exceeds_its_cap_and_keeps_both_ends(text, cap):
    bounded = bound_text(text, cap)
    assert len(bounded) <= cap
    assert bound_text(bounded, cap) == bounded
    if len(text) <= cap:
        assert bounded == text
    elif text:
        assert bounded[0] == text[0]
        assert bounded[-1] == text[-1]


@given(st.integers(0, 300), st.integers(2, 200))
def test_bounding_at_and_one_over_the_cap(extra, cap):
    at = "x" * (cap - 1) + "\x00"
    assert bound_text(at, cap) == at
    over = "\x00" + "y" * cap
    bounded = bound_text(over, cap)
    assert len(bounded) <= cap and bounded != over
    assert bounded[0] == "\x00" and bounded[-1] == "y"
    long = "a" + "z" * (cap + extra) + "b"
    assert bound_text(long, cap)[0] == "a" and bound_text(long, cap)[-1] == "b"


@given(tx.transcripts(), formats, st.data())
def test_incremental_validation_accepts_every_split_of_a_valid_transcript(t, fmt, data):
    log = _log(t, fmt)
    if not log:
        return
    split = data.draw(st.integers(1, len(log)))
    head, tail = log[:split], log[split:]
    if fmt == "anthropic":
        reparsed = parse_anthropic([json.loads(m.raw) for m in tail], preceding=head)
    else:
        reparsed = parse_openai([json.loads(m.raw) for m in tail], preceding=head)
    assert [m.seq for m in reparsed] == [m.seq for m in tail]


@given(tx.transcripts(), formats, policies, st.data())
def test_the_chars_at_each_prefix_are_those_of_the_prefix_derived_alone(t, fmt, policy, data):
    log = _log(t, fmt)
    operations = list(plan_relief(derive_surface(log), policy=policy, mode="forced").operations)
    if log and data.draw(st.booleans()):
        cut = data.draw(st.integers(0, log[-1].seq + 1))
        operations.append(AgentCompactionOperation(cut, "claude-code", "line-1", "auto", "s"))
    top = log[-1].seq + 2 if log else 2
    counts = sorted(data.draw(st.lists(st.integers(0, top), max_size=6)))
    surface, chars = derive_surface_at(log, operations, counts)
    assert surface == derive_surface(log, operations)
    assert chars == tuple(
        derive_surface([m for m in log if m.seq < count], operations).chars for count in counts
    )
