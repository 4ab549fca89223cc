"""The Claude Code and Codex parsers on fixtures built from the facts of issue 11."""

from __future__ import annotations

import io
from typing import Any

import pytest

from compaction.imports import claude_code, codex
from compaction.imports.files import NotATranscript, detect_format, make_parser
from compaction.imports.reader import Partial, read_lines
from compaction.imports.records import (
    CallSeen,
    CompactionSeen,
    LogAppend,
    Note,
    Record,
    SessionSeen,
    Skipped,
    TokensAfter,
)
from context_core import AgentCompactionOperation, derive_surface, parse_anthropic, parse_openai
from tests.unit.imports import fixtures as fx


def run(text: str, name: str, *, final: bool = True, chunks: int = 1) -> list[Record]:
    """Parse `text` as the file `name`, resuming the parser from its state `chunks` times."""
    data = text.encode()
    fmt = detect_format(io.BytesIO(data))
    assert fmt is not None
    out: list[Record] = []
    state: dict[str, Any] | None = None
    offset, line_no = 0, 1
    cut_points = [len(data) * (i + 1) // chunks for i in range(chunks)]
    for cut in cut_points:
        visible = data[:cut]
        parser = make_parser(fmt, name, state)
        for line in read_lines(io.BytesIO(visible), offset=offset, first_line=line_no):
            out.extend(parser.feed(line.number, line.text))
            offset, line_no = line.end, line.number + 1
        out.extend(parser.flush(final=final and cut == len(data), number=line_no))
        state = parser.state()
    return out


def of(records: list[Record], kind: type) -> list[Any]:
    return [r for r in records if isinstance(r, kind)]


def messages(records: list[Record], session: str) -> list[dict[str, Any]]:
    return [r.message for r in of(records, LogAppend) if r.session == session]


def test_claude_code_merges_the_blocks_of_one_request_and_takes_the_last_lines_usage():
    records = run(fx.claude_code_session(), f"proj/{fx.SESSION}.jsonl")
    calls = [c for c in of(records, CallSeen) if c.session == fx.SESSION]
    assert {c.request_id: c.usage for c in calls} == fx.CLAUDE_REQUESTS
    log = messages(records, fx.SESSION)
    first_reply = log[1]
    assert first_reply["role"] == "assistant"
    assert [b["type"] for b in first_reply["content"]] == ["thinking", "text", "tool_use"]
    # thinking blocks keep their signature
    assert first_reply["content"][0]["signature"] == "sig-AAA=="


def test_a_request_without_request_id_is_keyed_by_its_message_id():
    records = run(fx.claude_code_session(), f"{fx.SESSION}.jsonl")
    assert "msg_2" in {c.request_id for c in of(records, CallSeen)}


def test_tool_results_pair_with_their_calls_and_the_log_validates():
    records = run(fx.claude_code_session(), f"{fx.SESSION}.jsonl")
    log = messages(records, fx.SESSION)
    result = log[2]
    assert result["content"][0]["tool_use_id"] == "toolu_1"
    assert result["content"][0]["is_error"] is True
    parse_anthropic(log)  # raises on any pairing violation


def test_turns_start_at_real_prompts_only():
    records = run(fx.claude_code_session(), f"{fx.SESSION}.jsonl")
    turns = {c.request_id: c.turn for c in of(records, CallSeen) if c.session == fx.SESSION}
    # tool results, isMeta and the compact summary start no turn
    assert turns == {"req_1": 0, "msg_2": 0, "req_3": 1}
    calls = {c.request_id: c.call for c in of(records, CallSeen) if c.session == fx.SESSION}
    assert calls == {"req_1": 0, "msg_2": 1, "req_3": 0}


def test_compact_boundary_and_summary_become_one_agent_compaction():
    records = run(fx.claude_code_session(), f"{fx.SESSION}.jsonl")
    [compaction] = of(records, CompactionSeen)
    assert compaction.trigger == "auto"
    assert compaction.tokens_before == 150000
    assert compaction.summary.startswith("This session is being continued")
    assert compaction.source_key == "cb1"
    log = [r for r in of(records, LogAppend) if r.session == fx.SESSION]
    summary = next(r for r in log if r.seq == compaction.keep_from_seq)
    assert "being continued" in summary.message["content"]
    [after] = of(records, TokensAfter)
    assert after.tokens_after == 20 + 3000 + 50  # the first call after it, as sent
    parsed = parse_anthropic([r.message for r in log])
    op = AgentCompactionOperation(compaction.keep_from_seq, "claude-code", "cb1", "auto", "")
    surface = derive_surface(parsed, [op])
    assert surface.messages[0].text.startswith("This session is being continued")
    assert len(surface.messages) == len(parsed) - compaction.keep_from_seq


def test_inline_sidechains_are_child_sessions():
    records = run(fx.claude_code_session(), f"{fx.SESSION}.jsonl")
    children = [s for s in of(records, SessionSeen) if s.parent]
    assert [(c.parent, c.relation) for c in children] == [(fx.SESSION, "sidechain")]
    child = children[0].session
    assert [m["role"] for m in messages(records, child)] == ["user", "assistant"]
    assert [c.request_id for c in of(records, CallSeen) if c.session == child] == ["req_s"]


def test_subagent_files_are_children_of_the_folder_session():
    records = run(fx.subagent_file(), f"proj/{fx.SESSION}/subagents/agent-a1b2c3.jsonl")
    [seen] = of(records, SessionSeen)
    assert seen.parent == fx.SESSION
    assert seen.relation == "subagent"
    assert seen.session == f"{fx.SESSION}:agent-a1b2c3"
    records = run(fx.subagent_file(), f"proj/{fx.SESSION}/subagents/agent-acompact-9f.jsonl")
    assert of(records, SessionSeen)[0].relation == "compaction"


def test_bad_lines_are_skipped_with_their_numbers_and_the_rest_imports():
    text = fx.claude_code_session()
    records = run(text, f"{fx.SESSION}.jsonl")
    skipped = {r.line: r.reason for r in of(records, Skipped)}
    lines = text.splitlines()
    weird = next(i for i, line in enumerate(lines, 1) if "weird-new-type" in line)
    assert "unknown type 'weird-new-type'" in skipped[weird]
    assert "not valid JSON" in skipped[weird + 1]
    assert len(of(records, CallSeen)) == 4


def test_a_truncated_last_line_is_left_for_the_next_read():
    data = fx.claude_code_session().encode()
    partial: list[Partial] = []
    lines = list(read_lines(io.BytesIO(data), partial=partial))
    assert partial and partial[0].number == len(lines) + 1
    assert lines[-1].end == partial[0].start


def per_session(records: list[Record]) -> dict[str, list[Record]]:
    """Records in order within each session (sessions may interleave differently)."""
    grouped: dict[str, list[Record]] = {}
    for record in records:
        grouped.setdefault(getattr(record, "session", ""), []).append(record)
    return grouped


def test_resuming_from_the_state_at_any_chunking_gives_the_same_records():
    text = fx.claude_code_session(truncated=False)
    whole = per_session(run(text, f"{fx.SESSION}.jsonl"))
    for chunks in (2, 3, 7):
        assert per_session(run(text, f"{fx.SESSION}.jsonl", chunks=chunks)) == whole
    rollout = fx.codex_rollout()
    whole = per_session(run(rollout, "rollout-x.jsonl"))
    for chunks in (2, 5):
        assert per_session(run(rollout, "rollout-x.jsonl", chunks=chunks)) == whole


def test_a_followed_file_holds_a_response_without_stop_reason():
    line = fx.assistant(
        "a", "m", {"type": "text", "text": "hal"}, fx._usage(1, 0, 0, 1), request="r"
    )
    parser = claude_code.ClaudeCodeParser(session_hint="s")
    parser.feed(1, fx.user("u", "hi"))
    parser.feed(2, line)
    assert not of(parser.flush(final=False), CallSeen)
    assert of(parser.flush(final=True), CallSeen)


def test_codex_counts_a_call_only_when_the_total_changes():
    records = run(fx.codex_rollout(), f"rollout-2026-11-30T11-00-00-{fx.CODEX_SESSION}.jsonl")
    calls = of(records, CallSeen)
    assert [c.usage["input_tokens"] for c in calls] == [c["input_tokens"] for c in fx.CODEX_CALLS]
    assert all(c.window_tokens == 272000 and c.model == "gpt-5-codex" for c in calls)
    assert [(c.turn, c.call) for c in calls] == [(0, 0), (0, 1), (1, 0)]
    # cached inside input, reasoning inside output: the Responses shape keeps both inside
    first = calls[1].usage
    assert first["input_tokens_details"]["cached_tokens"] == 4900
    assert calls[0].usage["output_tokens_details"]["reasoning_tokens"] == 200


def test_codex_items_become_a_valid_chat_log():
    records = run(fx.codex_rollout(), "rollout.jsonl")
    log = messages(records, fx.CODEX_SESSION)
    roles = [m["role"] for m in log]
    assert roles[:5] == ["developer", "user", "assistant", "tool", "assistant"]
    assert log[2]["tool_calls"][0]["id"] == "call_1"
    assert log[2]["content"][0]["type"] == "reasoning"  # encrypted reasoning kept whole
    parse_openai(log)


def test_codex_compacted_replaces_the_history_with_its_replacement():
    records = run(fx.codex_rollout(), "rollout.jsonl")
    [compaction] = of(records, CompactionSeen)
    assert compaction.summary == "Summary: the tests were fixed."
    assert len(compaction.detail["replacement_history"]) == 2
    log = list(of(records, LogAppend))
    parsed = parse_openai([r.message for r in log])
    op = AgentCompactionOperation(compaction.keep_from_seq, "codex", compaction.source_key, "", "")
    surface = derive_surface(parsed, [op])
    assert [m.text for m in surface.messages[:3]] == [
        "You are Codex.",
        "fix the tests",
        "Summary: the tests were fixed.",
    ]
    assert of(records, TokensAfter)[0].tokens_after == 3000


def test_a_rollout_without_usage_imports_its_messages_and_no_call():
    records = run(fx.codex_without_usage(), "rollout-no-usage.jsonl")
    assert of(records, CallSeen) == []
    assert [m["role"] for m in messages(records, "no-usage-0000")] == ["user", "assistant"]


def test_another_format_is_refused_clearly():
    with pytest.raises(NotATranscript, match="not a Claude Code session or a Codex rollout"):
        detect_format(io.BytesIO(b'{"role": "user", "content": "hi"}\n'))
    assert detect_format(io.BytesIO(b"")) is None


def test_a_missing_result_is_synthesised_and_noted():
    parser = codex.CodexParser(session_hint="s")
    out = parser.feed(
        1, fx._item({"type": "function_call", "name": "x", "arguments": "{}", "call_id": "c"})
    )
    out += parser.feed(2, fx._item(fx._msg("user", "never mind")))
    assert of(out, Note)
    parse_openai([r.message for r in of(out, LogAppend)])


def test_digesting_the_prefix_never_moves_a_reader_mid_file(monkeypatch):
    from compaction.imports import reader

    monkeypatch.setattr(reader, "CHUNK", 64)
    data = "".join(f'{{"n": {i}, "pad": "{"x" * (i % 50)}"}}\n' for i in range(200)).encode()
    handle = io.BytesIO(data)
    seen = []
    for line in reader.read_lines(handle):
        seen.append(line.text)
        reader.prefix_digest(handle, line.end)
    assert seen == data.decode().splitlines()


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_a_line_the_json_rule_refuses_is_skipped_and_the_rest_imports(fmt):
    """A lone surrogate (a split emoji) would poison the session's log and archives: the line
    is skipped with its number and the reason, like a malformed one (issue 16's rule)."""
    if fmt == "claude-code":
        text, name = fx.claude_code_session(), f"{fx.SESSION}.jsonl"
    else:
        text, name = fx.codex_rollout(), "rollout-2026-11-30T10-00-00-abc.jsonl"
    clean = run(text, name)
    lines = text.splitlines()
    poisoned = '{"type": "user", "payload": {"text": "\\ud83d"}, "message": {"content": "\\ud83d"}}'
    lines.insert(1, poisoned)
    records = run("\n".join(lines) + "\n", name)
    skipped = {r.line: r.reason for r in of(records, Skipped)}
    assert "refused by the JSON rule" in skipped[2], skipped
    assert len(of(records, CallSeen)) == len(of(clean, CallSeen))
