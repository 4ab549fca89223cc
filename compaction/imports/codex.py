"""Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) as records.

Facts this parser encodes (see issue 11):

* Lines are `{"timestamp", "type", "payload"}`; `type` is session_meta (id, cwd, cli_version,
  model_provider), turn_context (model, effort: a turn starts here), response_item (Responses API
  items), event_msg (token_count, user_message, task_started, context_compacted, ...) or
  `compacted` (`message`, `replacement_history`: the items that replaced the history).
* Response items become OpenAI Chat messages for the log: `message` (user, assistant,
  developer; input_text/output_text parts), the assistant's `reasoning` (kept whole, encrypted
  content included, as an opaque part of the assistant message), `function_call` /
  `custom_tool_call` / `local_shell_call` as the assistant's tool calls, `function_call_output` /
  `custom_tool_call_output` as tool messages.
* A `token_count` is often repeated with an unchanged `total_token_usage`: a call is counted only
  when the total changes, with that event's `last_token_usage`. OpenAI counts cached tokens
  inside `input_tokens` and reasoning inside `output_tokens` (the Responses usage shape keeps
  that); the window is `model_context_window`. A rollout may have no usage at all.
"""

from __future__ import annotations

import json
from typing import Any

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
from telemetry.session_meta import first_prompt, from_codex_meta

SOURCE = "codex"
NO_RESULT = "[no tool output in the rollout]"
UNKNOWN_MODEL = "codex-unknown-model"
_TOP_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
# Items the model produced that are not calls: kept as opaque parts of the assistant message.
_OPAQUE_ITEMS = frozenset({"reasoning", "web_search_call", "image_generation_call"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Codex's `last_token_usage` in the Responses API's usage shape (cached inside input,
    reasoning inside output: Codex counts them the same way)."""
    return {
        "input_tokens": usage.get("input_tokens", 0),
        "input_tokens_details": {"cached_tokens": usage.get("cached_input_tokens", 0)},
        "output_tokens": usage.get("output_tokens", 0),
        "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_output_tokens", 0)},
        "total_tokens": usage.get("total_tokens", 0),
    }


def _text_parts(content: Any) -> list[dict[str, Any]] | None:
    """A message item's parts as Chat content parts; None when not a list."""
    if not isinstance(content, list):
        return None
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif isinstance(part, dict) and part.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url", "")}})
        elif isinstance(part, dict):
            parts.append(part)
    return parts


def _collapsed(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def _readable(items: list[Any]) -> str:
    lines = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "message":
            parts = _text_parts(item.get("content")) or []
            text = "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
            lines.append(f"[{item.get('role', '?')}] {text}")
        elif isinstance(item, dict):
            lines.append(f"[{item.get('type', '?')}]")
    return "\n\n".join(lines)


class CodexParser:
    """Feed lines in order (`feed`), then `flush(final=...)`; `state()` is JSON to resume."""

    def __init__(self, *, session_hint: str, state: dict[str, Any] | None = None) -> None:
        self.s: dict[str, Any] = state or {
            "hint": session_hint,
            "session": "",
            "seq": 0,
            "turn": -1,
            "call": 0,
            "model": "",
            "window": None,
            "agg": None,
            "open": [],
            "reply_seq": None,
            "last_total": None,
            "after": None,
            "last_tokens": None,
        }

    def state(self) -> dict[str, Any]:
        return self.s

    def _session(self, out: list[Record], meta: dict[str, Any] | None = None) -> str:
        s = self.s
        if not s["session"]:
            s["session"] = str((meta or {}).get("id") or s["hint"])
            detail = {
                k: meta[k]
                for k in ("cwd", "cli_version", "model_provider", "originator")
                if meta and k in meta
            }
            out.append(SessionSeen(s["session"], detail=detail))
        return str(s["session"])

    def feed(self, number: int, text: str) -> list[Record]:
        obj = line_object(number, text)
        if not isinstance(obj, dict):
            return [] if obj is None else [obj]
        out: list[Record] = []
        kind, payload, at = obj.get("type"), obj.get("payload"), obj.get("timestamp")
        if kind not in _TOP_TYPES:
            out.append(Skipped(number, f"unknown type {kind!r}"))
            return out
        if not isinstance(payload, dict):
            out.append(Skipped(number, f"{kind} line without a payload object"))
            return out
        if kind == "session_meta":
            name = self._session(out, payload)
            out.append(SessionMeta(name, from_codex_meta(payload), number))
            return out
        self._session(out)
        if kind == "turn_context":
            self._close(number, out)
            self.s["turn"] += 1
            self.s["call"] = 0
            self.s["reply_seq"] = None
            self.s["model"] = str(payload.get("model") or self.s["model"])
        elif kind == "response_item":
            self._item(payload, number, at, out)
        elif kind == "event_msg":
            if payload.get("type") == "token_count":
                self._token_count(payload, number, at, out)
            elif payload.get("type") == "user_message" and not self.s.get("prompted"):
                found = first_prompt(str(payload.get("message") or ""))
                if found:
                    self.s["prompted"] = True
                    out.append(SessionMeta(self.s["session"], found, number))
        else:
            self._compacted(payload, number, at, out)
        return out

    # -- messages -----------------------------------------------------------------------------

    def _emit(self, message: dict[str, Any], number: int, out: list[Record]) -> int | None:
        s = self.s
        try:
            parse_message(message, format="openai", seq=s["seq"])
        except TranscriptError as exc:
            out.append(Skipped(number, f"malformed item: {exc.problem}"))
            return None
        seq = int(s["seq"])
        out.append(LogAppend(str(s["session"]), seq, "openai", message, number))
        s["seq"] = seq + 1
        return seq

    def _agg(self, number: int, at: Any) -> dict[str, Any]:
        if self.s["agg"] is None:
            self.s["agg"] = {"content": [], "calls": [], "line": number}
        agg: dict[str, Any] = self.s["agg"]
        return agg

    def _item(self, item: dict[str, Any], number: int, at: Any, out: list[Record]) -> None:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            parts = _text_parts(item.get("content"))
            if parts is None:
                out.append(Skipped(number, "message item without a content list"))
            elif role == "assistant":
                self._agg(number, at)["content"].extend(parts)
            elif role in ("user", "developer", "system"):
                self._close(number, out)
                self._emit({"role": role, "content": _collapsed(parts)}, number, out)
            else:
                out.append(Skipped(number, f"message item with unknown role {role!r}"))
        elif kind in _OPAQUE_ITEMS:
            self._agg(number, at)["content"].append(item)
        elif kind in _CALL_ITEMS:
            call_id = item.get("call_id") or item.get("id")
            if not isinstance(call_id, str) or not call_id:
                out.append(Skipped(number, f"{kind} without a call_id"))
                return
            if kind == "function_call":
                name, arguments = item.get("name"), item.get("arguments", "")
            elif kind == "custom_tool_call":
                name, arguments = item.get("name"), item.get("input", "")
            else:
                name, arguments = "local_shell", json.dumps(item.get("action"), sort_keys=True)
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, sort_keys=True)
            self._agg(number, at)["calls"].append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": str(name or kind), "arguments": arguments},
                }
            )
        elif kind in _OUTPUT_ITEMS:
            self._flush_agg(out)
            call_id = str(item.get("call_id") or "")
            if call_id not in self.s["open"]:
                out.append(Skipped(number, f"{kind} for {call_id!r} answers no open call"))
                return
            output = item.get("output", "")
            if not isinstance(output, str):
                output = json.dumps(output, sort_keys=True)
            message = {"role": "tool", "tool_call_id": call_id, "content": output}
            if self._emit(message, number, out) is not None:
                self.s["open"].remove(call_id)
        else:
            out.append(Skipped(number, f"unknown response_item type {kind!r}"))

    def _flush_agg(self, out: list[Record]) -> None:
        s = self.s
        agg = s["agg"]
        if agg is None:
            return
        s["agg"] = None
        self._answer_open(agg["line"], out)
        message: dict[str, Any] = {"role": "assistant"}
        content = agg["content"]
        message["content"] = _collapsed(content) if content else None
        if agg["calls"]:
            message["tool_calls"] = agg["calls"]
        seq = self._emit(message, agg["line"], out)
        if seq is None:
            return
        if s["reply_seq"] is None:
            s["reply_seq"] = seq
        s["open"] = [c["id"] for c in agg["calls"]]

    def _answer_open(self, number: int, out: list[Record]) -> None:
        """Chat needs every call answered before the next message: synthesise what is missing."""
        for call_id in list(self.s["open"]):
            out.append(Note(number, f"call {call_id!r} has no output; an error was synthesised"))
            self._emit({"role": "tool", "tool_call_id": call_id, "content": NO_RESULT}, number, out)
        self.s["open"] = []

    def _close(self, number: int, out: list[Record]) -> None:
        self._flush_agg(out)
        self._answer_open(number, out)

    # -- usage and compaction -----------------------------------------------------------------

    def _token_count(
        self, payload: dict[str, Any], number: int, at: Any, out: list[Record]
    ) -> None:
        s = self.s
        info = payload.get("info")
        if not isinstance(info, dict):
            return  # a rate-limit-only event: no usage
        window = info.get("model_context_window")
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            s["window"] = window
        total = info.get("total_token_usage")
        last = info.get("last_token_usage")
        if not isinstance(total, dict) or total == s["last_total"]:
            return  # Codex repeats the running total: the same total is the same call
        s["last_total"] = total
        if not isinstance(last, dict):
            out.append(Skipped(number, "token_count without last_token_usage"))
            return
        self._flush_agg(out)
        usage = responses_usage(last)
        log_messages = s["reply_seq"] if s["reply_seq"] is not None else s["seq"]
        out.append(
            CallSeen(
                session=str(s["session"]),
                turn=max(s["turn"], 0),
                call=s["call"],
                request_id=None,
                model=s["model"] or UNKNOWN_MODEL,
                provider="openai_responses",
                usage=usage,
                at=at if isinstance(at, str) else None,
                window_tokens=s["window"],
                log_messages=log_messages,
                line=number,
            )
        )
        s["call"] += 1
        s["reply_seq"] = None
        tokens = last.get("input_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            s["last_tokens"] = tokens
            if s["after"] is not None:
                out.append(TokensAfter(str(s["session"]), s["after"], tokens))
                s["after"] = None

    def _compacted(self, payload: dict[str, Any], number: int, at: Any, out: list[Record]) -> None:
        s = self.s
        self._close(number, out)
        message = payload.get("message")
        summary = message if isinstance(message, str) else ""
        history = payload.get("replacement_history")
        items = history if isinstance(history, list) else []
        first = int(s["seq"])
        for item in items:
            if isinstance(item, dict) and item.get("type") == "message":
                role = item.get("role")
                parts = _text_parts(item.get("content")) or []
                if role in ("user", "assistant", "developer", "system"):
                    self._emit({"role": role, "content": _collapsed(parts)}, number, out)
                    continue
            kind = item.get("type") if isinstance(item, dict) else type(item).__name__
            out.append(
                Note(
                    number,
                    f"replacement_history item {kind!r} is kept in the compaction event only",
                )
            )
        if s["seq"] == first:
            self._emit({"role": "user", "content": summary}, number, out)
        key = f"line-{number}"
        out.append(
            CompactionSeen(
                session=str(s["session"]),
                source=SOURCE,
                source_key=key,
                trigger="",
                tokens_before=s["last_tokens"],
                summary=summary or _readable(items),
                keep_from_seq=first,
                at=at if isinstance(at, str) else None,
                turn=max(s["turn"], 0),
                line=number,
                detail={"replacement_history": items, "message": summary},
            )
        )
        s["after"] = key

    def flush(self, *, final: bool, number: int = 0) -> list[Record]:
        """At the end of what the file holds now. The assistant's items wait for the response's
        token_count (or the next item) unless `final`; calls without output stay open."""
        out: list[Record] = []
        if final and self.s["agg"] is not None:
            self._flush_agg(out)
        return out


def looks_like(obj: Any) -> bool:
    """A first line that Codex wrote."""
    return isinstance(obj, dict) and obj.get("type") in _TOP_TYPES and "payload" in obj
