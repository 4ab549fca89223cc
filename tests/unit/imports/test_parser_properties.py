"""Whatever order and mix of lines a transcript holds, the parsers emit a log that the core
accepts (so an import never stops on a pairing rule), with contiguous seqs, and the same records
whatever the points where a followed file was read."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compaction.imports import claude_code, codex
from compaction.imports.records import CallSeen, CompactionSeen, LogAppend, Record
from context_core import parse_anthropic, parse_openai
from tests.unit.imports import fixtures as fx

_IDS = st.sampled_from(["t1", "t2", "t3", "t4"])
_MSGS = st.sampled_from(["m1", "m2", "m3"])


@st.composite
def claude_lines(draw: st.DrawFn) -> list[str]:
    lines: list[str] = []
    for n in range(draw(st.integers(0, 25))):
        kind = draw(
            st.sampled_from(
                ["prompt", "block", "tool", "result", "meta", "boundary", "summary", "side", "junk"]
            )
        )
        side = draw(st.booleans()) if kind != "side" else True
        extra: dict[str, Any] = {"isSidechain": True} if side and kind == "side" else {}
        usage = fx._usage(draw(st.integers(0, 50)), 100, 10, draw(st.integers(1, 90)))
        msg = draw(_MSGS)
        request = None if draw(st.booleans()) else f"req-{msg}"
        stop = draw(st.sampled_from([None, "tool_use", "end_turn"]))
        if kind in ("prompt", "side"):
            lines.append(fx.user(f"u{n}", f"prompt {n}", **extra))
        elif kind == "block":
            block: dict[str, Any] = {"type": "text", "text": f"text {n}"}
            lines.append(fx.assistant(f"a{n}", msg, block, usage, request=request, stop=stop))
        elif kind == "tool":
            block = {"type": "tool_use", "id": f"{draw(_IDS)}-{n}", "name": "Bash", "input": {}}
            lines.append(fx.assistant(f"a{n}", msg, block, usage, request=request, stop=stop))
        elif kind == "result":
            target = draw(st.integers(0, max(0, n)))
            result = {
                "type": "tool_result",
                "tool_use_id": f"{draw(_IDS)}-{target}",
                "content": "ok",
            }
            lines.append(fx.user(f"r{n}", [result]))
        elif kind == "meta":
            lines.append(fx.user(f"m{n}", "meta", isMeta=True))
        elif kind == "boundary":
            lines.append(
                json.dumps(
                    {
                        "type": "system",
                        "subtype": "compact_boundary",
                        "uuid": f"cb{n}",
                        "sessionId": fx.SESSION,
                        "compactMetadata": {"trigger": "manual", "preTokens": 10},
                    }
                )
                + "\n"
            )
        elif kind == "summary":
            lines.append(fx.user(f"s{n}", "summary text", isCompactSummary=True))
        else:
            lines.append(draw(st.sampled_from(["{oops\n", "[]\n", '{"type": "x"}\n', "\n"])))
    return lines


def _run(parser: Any, lines: list[str], cuts: set[int]) -> list[Record]:
    out: list[Record] = []
    for number, line in enumerate(lines, 1):
        out.extend(parser.feed(number, line))
        if number in cuts:
            out.extend(parser.flush(final=False, number=number + 1))
            parser = type(parser)(session_hint="hint", state=json.loads(json.dumps(parser.state())))
    out.extend(parser.flush(final=True, number=len(lines) + 1))
    return out


def _check_logs(records: list[Record], parse: Any) -> None:
    by_session: dict[str, list[LogAppend]] = {}
    for record in records:
        if isinstance(record, LogAppend):
            by_session.setdefault(record.session, []).append(record)
    for appends in by_session.values():
        assert [a.seq for a in appends] == list(range(len(appends)))
        parse([a.message for a in appends])  # raises TranscriptError on any rule
    for record in records:
        if isinstance(record, CallSeen):
            assert 0 <= record.log_messages <= len(by_session.get(record.session, []))
        if isinstance(record, CompactionSeen):
            assert record.keep_from_seq <= len(by_session.get(record.session, []))


def _per_session(records: list[Record]) -> dict[str, list[Record]]:
    grouped: dict[str, list[Record]] = {}
    for record in records:
        grouped.setdefault(getattr(record, "session", ""), []).append(record)
    return grouped


@given(claude_lines(), st.sets(st.integers(1, 25), max_size=4))
def test_claude_code_logs_always_validate_whatever_the_lines(lines, cuts):
    records = _run(claude_code.ClaudeCodeParser(session_hint="hint"), lines, set())
    _check_logs(records, parse_anthropic)
    resumed = _run(claude_code.ClaudeCodeParser(session_hint="hint"), lines, cuts)
    _check_logs(resumed, parse_anthropic)


@st.composite
def codex_lines(draw: st.DrawFn) -> list[str]:
    lines = [fx._codex("session_meta", {"id": "c-1"})]
    total = 0
    for n in range(draw(st.integers(0, 25))):
        kind = draw(
            st.sampled_from(
                [
                    "turn",
                    "user",
                    "assistant",
                    "reasoning",
                    "call",
                    "output",
                    "count",
                    "same",
                    "compacted",
                    "junk",
                ]
            )
        )
        if kind == "turn":
            lines.append(fx._codex("turn_context", {"model": "gpt-5"}))
        elif kind in ("user", "assistant"):
            lines.append(fx._item(fx._msg(kind, f"{kind} {n}")))
        elif kind == "reasoning":
            lines.append(fx._item({"type": "reasoning", "summary": [], "encrypted_content": "x"}))
        elif kind == "call":
            lines.append(
                fx._item(
                    {
                        "type": "function_call",
                        "name": "sh",
                        "arguments": "{}",
                        "call_id": f"c{draw(_IDS)}{n}",
                    }
                )
            )
        elif kind == "output":
            target = draw(st.integers(0, max(0, n)))
            lines.append(
                fx._item(
                    {
                        "type": "function_call_output",
                        "call_id": f"c{draw(_IDS)}{target}",
                        "output": "ok",
                    }
                )
            )
        elif kind in ("count", "same"):
            if kind == "count":
                total += 10
            usage = fx._tokens(total, 0, 1, 0)
            lines.append(fx._count(usage, fx._tokens(10, 0, 1, 0)))
        elif kind == "compacted":
            lines.append(
                fx._codex(
                    "compacted", {"message": "s", "replacement_history": [fx._msg("user", "s")]}
                )
            )
        else:
            lines.append('{"type": "event_msg"}\n')
    return lines


@given(codex_lines(), st.sets(st.integers(1, 25), max_size=4))
def test_codex_logs_always_validate_whatever_the_lines(lines, cuts):
    whole = _run(codex.CodexParser(session_hint="hint"), lines, set())
    _check_logs(whole, parse_openai)
    resumed = _run(codex.CodexParser(session_hint="hint"), lines, cuts)
    _check_logs(resumed, parse_openai)
    # Calls never depend on where the file was read.
    calls = [r for r in whole if isinstance(r, CallSeen)]
    assert [c.usage for c in calls] == [r.usage for r in resumed if isinstance(r, CallSeen)]
