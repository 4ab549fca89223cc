"""Claude Code session transcripts (`~/.claude/projects/<project>/<session>.jsonl`) as records.

Facts this parser encodes (see issue 11):

* One JSON object a line; `type` user, assistant, system, summary and others.
* One API response is written as several assistant lines sharing `message.id` and `requestId`
  (no `requestId` through Bedrock or Vertex: `message.id` keys the request then), each with one
  content block and each repeating the response's `usage`, whose `output_tokens` grows: the
  request's usage is its last line's. The blocks merge into one assistant message, one call.
* `tool_use` blocks are answered by `tool_result` blocks (same `tool_use_id`) in following user
  lines; the log gets all results of one assistant message in the one next user message (the
  Anthropic rule), results the transcript lacks are synthesised as errors and reported.
* A turn starts at a user line with a real prompt (not only tool results, not `isMeta`, not
  `isCompactSummary`).
* A system line `subtype: "compact_boundary"` (`compactMetadata.trigger`, `.preTokens`) marks
  where Claude Code compacted; the next user line with `isCompactSummary: true` holds the summary.
* Older files interleave subagent lines marked `isSidechain: true` (each chain is a child
  session); newer ones put subagents in `<session>/subagents/agent-*.jsonl`, and
  `agent-acompact-*` is the compaction's own model call (parsed with `kind="subagent"` or
  `kind="compaction"`).
* `thinking` blocks are kept whole, signature included.
* With Anthropic's cache diagnostics on, the response's `message.diagnostics.cache_miss_reason`
  is written too: the call keeps it (`telemetry.cache_diagnostics`); one that does not read is
  noted and the call imported without it.

The parser is a state machine over lines; `state()` is JSON and `ClaudeCodeParser(state=...)`
resumes it, so a growing file is read from where the last import stopped.
"""

from __future__ import annotations

from typing import Any, Literal

from compaction.imports.reader import line_object
from compaction.imports.records import (
    CallSeen,
    CompactionSeen,
    LogAppend,
    Note,
    Record,
    SessionMeta,
    SessionSeen,
    Skipped,
    TokensAfter,
)
from context_core import TranscriptError, parse_message
from telemetry.cache_diagnostics import read_anthropic
from telemetry.errors import FieldError
from telemetry.session_meta import first_prompt, from_claude_code_line

FileKind = Literal["main", "subagent", "compaction"]

# Line types that carry no message for the log (bookkeeping of the Claude Code UI).
_IGNORED_TYPES = frozenset(
    {"summary", "file-history-snapshot", "queue-operation", "progress", "custom-title", "tag"}
)
SOURCE = "claude-code"
NO_RESULT = "[no tool result in the transcript]"


def _tokens(usage: dict[str, Any]) -> int | None:
    total = 0
    for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total or None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


class ClaudeCodeParser:
    """Feed lines in order (`feed`), then `flush(final=...)`; read `state()` to resume later.

    `session_hint` is the session id to use when no line names one (the file name); for
    `kind="subagent"`/`"compaction"` files `parent_hint` is the parent session's id (from the
    folder) and every line belongs to the file's own child session.
    """

    def __init__(
        self,
        *,
        session_hint: str,
        kind: FileKind = "main",
        parent_hint: str = "",
        state: dict[str, Any] | None = None,
    ) -> None:
        self.s: dict[str, Any] = state or {
            "kind": kind,
            "hint": session_hint,
            "parent": parent_hint,
            "main": "",
            "sessions": {},
            "chains": {},
        }

    def state(self) -> dict[str, Any]:
        return self.s

    # -- routing ------------------------------------------------------------------------------

    def _session(self, obj: dict[str, Any], out: list[Record]) -> str:
        s = self.s
        if s["kind"] != "main":
            parent = s["parent"] or str(obj.get("sessionId") or "")
            name = f"{parent}:{s['hint']}" if parent else s["hint"]
            relation = "compaction" if s["kind"] == "compaction" else "subagent"
            agent = str(obj.get("agentId") or "")
            return self._announce(name, parent, relation, agent, out)
        if not s["main"]:
            s["main"] = str(obj.get("sessionId") or s["hint"])
        main = s["main"]
        if not obj.get("isSidechain"):
            return self._announce(main, "", "", "", out)
        agent = str(obj.get("agentId") or "")
        uuid = str(obj.get("uuid") or "")
        parent_uuid = str(obj.get("parentUuid") or "")
        chains: dict[str, str] = s["chains"]
        if agent:
            name = f"{main}:agent-{agent}"
        elif parent_uuid in chains:
            name = chains[parent_uuid]
        else:
            name = f"{main}:sidechain-{(uuid or parent_uuid or str(len(chains)))[:8]}"
        if uuid:
            chains[uuid] = name
        return self._announce(name, main, "sidechain", agent, out)

    def _announce(
        self, name: str, parent: str, relation: str, agent: str, out: list[Record]
    ) -> str:
        sessions: dict[str, Any] = self.s["sessions"]
        if name not in sessions:
            sessions[name] = {
                "seq": 0,
                "turn": -1,
                "call": 0,
                "group": None,
                "compact": None,
                "after": None,
                "last_tokens": None,
            }
            out.append(SessionSeen(name, parent, relation, agent))  # type: ignore[arg-type]
        return name

    # -- lines --------------------------------------------------------------------------------

    def feed(self, number: int, text: str) -> list[Record]:
        obj = line_object(number, text)
        if not isinstance(obj, dict):
            return [] if obj is None else [obj]
        out: list[Record] = []
        kind = obj.get("type")
        if kind in ("user", "assistant"):
            message = obj.get("message")
            if not isinstance(message, dict):
                out.append(Skipped(number, f"{kind} line without a message object"))
                return out
            name = self._session(obj, out)
            self._meta(name, from_claude_code_line(obj), number, out)
            if kind == "assistant":
                self._assistant(name, obj, message, number, out)
            else:
                self._user(name, obj, message, number, out)
        elif kind == "system":
            if obj.get("subtype") == "compact_boundary":
                name = self._session(obj, out)
                self._boundary(name, obj, number, out)
        elif kind in ("summary", "custom-title"):
            if self.s["kind"] == "main":
                self._meta(self._session(obj, out), from_claude_code_line(obj), number, out)
        elif kind in _IGNORED_TYPES:
            pass
        elif kind is None:
            out.append(Skipped(number, "no `type`"))
        else:
            out.append(Skipped(number, f"unknown type {kind!r}"))
        return out

    def _meta(self, name: str, found: dict[str, str], number: int, out: list[Record]) -> None:
        """A `SessionMeta` of what `found` says that this file has not said yet."""
        said: dict[str, str] = self.s["sessions"][name].setdefault("meta", {})
        new = {k: v for k, v in found.items() if said.get(k) != v}
        if new:
            said.update(new)
            out.append(SessionMeta(name, new, number))

    def _emit(
        self, name: str, message: dict[str, Any], number: int, out: list[Record]
    ) -> int | None:
        st = self.s["sessions"][name]
        try:
            parse_message(message, format="anthropic", seq=st["seq"])
        except TranscriptError as exc:
            out.append(Skipped(number, f"malformed message: {exc.problem}"))
            return None
        seq = int(st["seq"])
        out.append(LogAppend(name, seq, "anthropic", message, number))
        st["seq"] = seq + 1
        return seq

    def _valid_block(self, role: str, block: Any, number: int, out: list[Record]) -> bool:
        try:
            parse_message({"role": role, "content": [block]}, format="anthropic", seq=0)
        except TranscriptError as exc:
            out.append(Skipped(number, f"malformed content block: {exc.problem}"))
            return False
        return True

    def _assistant(
        self,
        name: str,
        obj: dict[str, Any],
        message: dict[str, Any],
        number: int,
        out: list[Record],
    ) -> None:
        st = self.s["sessions"][name]
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            out.append(Skipped(number, "assistant message content is neither text nor blocks"))
            return
        message_id = str(message.get("id") or obj.get("uuid") or f"line-{number}")
        key = str(obj.get("requestId") or message_id)
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else None
        group = st["group"]
        if group is not None and group["key"] == key:
            if group["emitted"]:
                out.append(
                    Skipped(
                        number,
                        f"a block of request {key} after its message was imported "
                        "(the file grew in the middle of a response)",
                    )
                )
                return
        else:
            self._close(name, number, out)
            self._pending_compaction(name, number, out)
            group = {
                "key": key,
                "blocks": [],
                "calls": [],
                "results": {},
                "usage": None,
                "model": "",
                "at": None,
                "line": number,
                "result_line": None,
                "complete": False,
                "emitted": False,
            }
            st["group"] = group
        for block in content:
            if not self._valid_block("assistant", block, number, out):
                continue
            group["blocks"].append(block)
            if block.get("type") == "tool_use":
                group["calls"].append(str(block["id"]))
        if usage is not None:
            group["usage"] = usage  # the last line's usage is the request's
        if message.get("diagnostics") is not None:
            self._diagnostics(group, message["diagnostics"], number, out)
        group["model"] = str(message.get("model") or group["model"])
        group["at"] = obj.get("timestamp") or group["at"]
        group["complete"] = message.get("stop_reason") is not None

    def _diagnostics(
        self, group: dict[str, Any], diagnostics: Any, number: int, out: list[Record]
    ) -> None:
        """Keep the response's cache diagnostics (the last line's, like its usage) when they
        read; else say why and import the call without them."""
        try:
            read_anthropic(diagnostics, "message.diagnostics")
        except FieldError as exc:
            out.append(Note(number, f"cache diagnostics not read: {exc}"))
            return
        group["diagnostics"] = diagnostics

    def _user(
        self,
        name: str,
        obj: dict[str, Any],
        message: dict[str, Any],
        number: int,
        out: list[Record],
    ) -> None:
        st = self.s["sessions"][name]
        content = message.get("content")
        results: list[dict[str, Any]] = []
        others: Any = content
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            others = [
                b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")
            ]
        elif not isinstance(content, str):
            out.append(Skipped(number, "user message content is neither text nor blocks"))
            return
        group = st["group"]
        for result in results:
            call_id = str(result.get("tool_use_id") or "")
            if group is not None and call_id in group["calls"] and call_id not in group["results"]:
                if self._valid_block("user", result, number, out):
                    group["results"][call_id] = result
                    group["result_line"] = group["result_line"] or number
            elif group is not None and call_id in group["results"]:
                out.append(Skipped(number, f"a second tool_result for {call_id!r}"))
            else:
                out.append(Skipped(number, f"tool_result for {call_id!r} answers no open tool_use"))
        if results and not others:
            return
        if isinstance(others, list) and not others:
            return
        self._close(name, number, out)
        compacted = bool(obj.get("isCompactSummary"))
        if not compacted:
            self._pending_compaction(name, number, out)
        body = {"role": "user", "content": others}
        if not obj.get("isMeta") and not compacted and not results:
            st["turn"] += 1  # a real prompt starts a turn
            st["call"] = 0
            if st["turn"] == 0:
                self._meta(name, first_prompt(_text_of(others)), number, out)
        seq = self._emit(name, body, number, out)
        if compacted and seq is not None:
            self._compaction(name, obj, number, seq, _text_of(others), out)

    def _boundary(self, name: str, obj: dict[str, Any], number: int, out: list[Record]) -> None:
        st = self.s["sessions"][name]
        self._close(name, number, out)
        meta = obj.get("compactMetadata") if isinstance(obj.get("compactMetadata"), dict) else {}
        assert isinstance(meta, dict)
        pre = meta.get("preTokens")
        st["compact"] = {
            "key": str(obj.get("uuid") or f"line-{number}"),
            "trigger": str(meta.get("trigger") or ""),
            "pre": pre if isinstance(pre, int) and not isinstance(pre, bool) else None,
            "at": obj.get("timestamp"),
            "line": number,
        }

    def _compaction(
        self, name: str, obj: dict[str, Any], number: int, seq: int, summary: str, out: list[Record]
    ) -> None:
        st = self.s["sessions"][name]
        boundary = st["compact"] or {
            "key": str(obj.get("uuid") or f"line-{number}"),
            "trigger": "",
            "pre": None,
            "at": obj.get("timestamp"),
            "line": number,
        }
        st["compact"] = None
        out.append(
            CompactionSeen(
                session=name,
                source=SOURCE,
                source_key=boundary["key"],
                trigger=boundary["trigger"],
                tokens_before=boundary["pre"] if boundary["pre"] is not None else st["last_tokens"],
                summary=summary,
                keep_from_seq=seq,
                at=boundary["at"] or obj.get("timestamp"),
                turn=max(st["turn"], 0),
                line=boundary["line"],
                detail={"summary_line": number, "boundary_line": boundary["line"]},
            )
        )
        st["after"] = boundary["key"]

    def _pending_compaction(self, name: str, number: int, out: list[Record]) -> None:
        """A boundary whose summary line never came: the cut is at the next message."""
        st = self.s["sessions"][name]
        if st["compact"] is not None:
            self._compaction(name, {}, number, int(st["seq"]), "", out)

    # -- groups (one request: its assistant message and the results that answer it) ------------

    def _emit_assistant(self, name: str, out: list[Record]) -> None:
        st = self.s["sessions"][name]
        group = st["group"]
        group["emitted"] = True
        if not group["blocks"]:
            return
        seq = self._emit(
            name, {"role": "assistant", "content": group["blocks"]}, group["line"], out
        )
        if seq is None:
            group["calls"] = []
            return
        usage = group["usage"]
        if usage is None or group["model"] in ("", "<synthetic>"):
            return  # Claude Code's own notices (API errors, interruptions) are no model call
        out.append(
            CallSeen(
                session=name,
                turn=max(st["turn"], 0),
                call=st["call"],
                request_id=group["key"],
                model=group["model"],
                provider="anthropic",
                usage=usage,
                at=group["at"],
                window_tokens=None,
                log_messages=seq,
                line=group["line"],
                diagnostics=group.get("diagnostics"),
            )
        )
        st["call"] += 1
        tokens = _tokens(usage)
        st["last_tokens"] = tokens
        if st["after"] is not None and tokens is not None:
            out.append(TokensAfter(name, st["after"], tokens))
            st["after"] = None

    def _emit_results(self, name: str, number: int, out: list[Record]) -> None:
        st = self.s["sessions"][name]
        group = st["group"]
        st["group"] = None
        if not group["calls"]:
            return
        blocks = []
        for call_id in group["calls"]:
            result = group["results"].get(call_id)
            if result is None:
                out.append(
                    Note(number, f"tool_use {call_id!r} has no result; an error was synthesised")
                )
                result = {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": NO_RESULT,
                    "is_error": True,
                }
            blocks.append(result)
        self._emit(name, {"role": "user", "content": blocks}, group["result_line"] or number, out)

    def _close(self, name: str, number: int, out: list[Record]) -> None:
        """Another message follows: the open request is complete, its results are all in."""
        group = self.s["sessions"][name]["group"]
        if group is None:
            return
        if not group["emitted"]:
            self._emit_assistant(name, out)
        self._emit_results(name, number, out)

    def flush(self, *, final: bool, number: int = 0) -> list[Record]:
        """At the end of what the file holds now. `final`: the file is not being written (a
        plain import); otherwise only what is complete is emitted (a response with its
        `stop_reason`, results once every call has one)."""
        out: list[Record] = []
        for name, st in self.s["sessions"].items():
            group = st["group"]
            if group is None:
                continue
            if not group["emitted"] and (final or group["complete"]):
                self._emit_assistant(name, out)
            if not group["emitted"]:
                continue
            answered = len(group["results"])
            if not group["calls"] or answered == len(group["calls"]) or (final and answered):
                self._emit_results(name, number, out)
        return out


def looks_like(obj: Any) -> bool:
    """A first line that Claude Code wrote."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and "payload" not in obj
        and ("sessionId" in obj or "uuid" in obj or obj.get("type") in _IGNORED_TYPES)
    )
