"""Messages: the one internal message type, its content blocks, and the format converters.

Two wire formats are understood:

* **Anthropic Messages** — the system prompt travels outside `messages`; tool calls are
  `tool_use` blocks in an assistant message; all results of its (parallel) calls are
  `tool_result` blocks in the one next user message, results first.
* **OpenAI Chat Completions** — `system` (or `developer`) is a role; an assistant message carries
  `tool_calls`; every `tool_call_id` is answered by a `role: "tool"` message before the next
  non-tool message.

Within a format a round trip is lossless: every field the core does not model is kept opaque
(the block's original JSON in `native`, a message's unknown keys in `extra`), and `raw` keeps the
message exactly as received. Across formats, conversion is offered only when it keeps the same
roles, text, calls, results and order, and refused with ConversionError otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, TypeAlias, cast

from context_core.bounding import BoundSpec

Role = Literal["system", "user", "assistant", "tool"]
Format = Literal["anthropic", "openai"]
ContentForm = Literal["text", "blocks", "null", "absent"]

ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
FORMATS: frozenset[str] = frozenset({"anthropic", "openai"})

# A raw message accepted by the parsers: a decoded JSON object or its JSON text.
RawMessage: TypeAlias = Mapping[str, Any] | str

_MISSING: Any = object()


def dump_json(value: Any) -> str:
    """Compact JSON text with non-ASCII kept as is (NUL and other controls are escaped)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class TranscriptError(ValueError):
    """A transcript that breaks a pairing, ordering or shape rule.

    `index` is the position of the offending message in the sequence that was parsed or
    validated; `seq` its sequence number when it has one.
    """

    def __init__(self, problem: str, *, index: int, seq: int | None = None, role: str = "") -> None:
        self.problem = problem
        self.index = index
        self.seq = seq
        self.role = role
        where = f"message {index}"
        if seq is not None:
            where += f" (seq {seq}"
            where += f", role {role})" if role else ")"
        elif role:
            where += f" (role {role})"
        super().__init__(f"{where}: {problem}")


class ConversionError(ValueError):
    """A cross-format conversion that would lose information; `reason` says what."""

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        super().__init__(reason if index is None else f"message {index}: {reason}")


# --------------------------------------------------------------------------------------------
# Blocks


@dataclass(frozen=True, slots=True)
class TextBlock:
    """Text. `native` holds the original block JSON when it carried keys the core does not model
    (for instance `citations`); `cache_control` the JSON of its cache marker, "" when none."""

    text: str
    cache_control: str = ""
    native: str = ""

    @property
    def chars(self) -> int:
        return len(self.text)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call. `arguments` is the input as JSON text (OpenAI's string kept verbatim; an
    Anthropic `input` object dumped compactly), so it stays immutable and byte-stable."""

    id: str
    name: str
    arguments: str
    cache_control: str = ""
    native: str = ""

    @property
    def input(self) -> Any:
        """The decoded input; raises json.JSONDecodeError for an OpenAI call with invalid JSON."""
        return json.loads(self.arguments)

    @property
    def chars(self) -> int:
        return len(self.name) + len(self.arguments)


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """A `thinking` or `redacted_thinking` block, kept opaque: signature and data untouched."""

    kind: str
    native: str

    @property
    def chars(self) -> int:
        return len(self.native)


@dataclass(frozen=True, slots=True)
class OpaqueBlock:
    """A block of a type the core does not model (image, document, refusal...), kept verbatim."""

    type: str
    native: str
    cache_control: str = ""

    @property
    def chars(self) -> int:
        return len(self.native)


ContentBlock: TypeAlias = TextBlock | OpaqueBlock


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of the call `call_id`.

    `content` is a string, a tuple of text/opaque blocks, or None when the original had none.
    `is_error` is None when the original did not state it (OpenAI never does). `pruned` marks a
    result the core replaced with a stub (D3), so a later pass never stubs a stub.
    """

    call_id: str
    content: str | tuple[ContentBlock, ...] | None
    is_error: bool | None = None
    cache_control: str = ""
    native: str = ""
    pruned: bool = False

    @property
    def text(self) -> str:
        """The result's text: the string, or its text blocks joined by newlines."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def chars(self) -> int:
        if self.content is None:
            return 0
        if isinstance(self.content, str):
            return len(self.content)
        return sum(b.chars for b in self.content)

    @property
    def text_chars(self) -> int:
        """Characters of text (what `max_result_chars` bounds); opaque blocks excluded."""
        if self.content is None:
            return 0
        if isinstance(self.content, str):
            return len(self.content)
        return sum(len(b.text) for b in self.content if isinstance(b, TextBlock))


Block: TypeAlias = TextBlock | ToolCall | ToolResult | ThinkingBlock | OpaqueBlock


def _block_marked(block: Block) -> bool:
    if isinstance(block, ThinkingBlock):
        return False
    if block.cache_control:
        return True
    if isinstance(block, ToolResult) and isinstance(block.content, tuple):
        return any(b.cache_control for b in block.content)
    return False


# --------------------------------------------------------------------------------------------
# Message


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a transcript, in the log or on the surface.

    * `role` — system, user, assistant or tool (OpenAI `developer` is role system with
      `native_role="developer"`).
    * `blocks` — content in order. OpenAI messages: text/opaque parts, then the tool calls; a
      tool message holds exactly one ToolResult.
    * `seq` — the position in the session's log; strictly increasing along a transcript. A summary
      message carries the seq of the first message it replaced and `summarizes=(first, last)`.
    * `raw` — the message's JSON text exactly as received (a decoded dict is stored as its compact
      dump); "" for messages the core made.
    * `format`, `content_form` (bare string, list, null or absent content), `extra` (JSON of the
      unknown top-level keys) and `native_role` — what a lossless round trip needs.
    * `bound` — the write-time bound in force when the message was appended (D3); the surface
      bounds its tool results by it, never by today's policy.

    Derived once, at construction: `chars` (the content size all estimates use), `marked`
    (carries a cache marker), `longest_result` (text chars of its largest tool result),
    `call_ids`, `result_ids` and `is_tool_result_carrier` (an OpenAI tool message, or an
    Anthropic user message whose first block is a tool result).
    """

    role: Role
    blocks: tuple[Block, ...]
    seq: int
    raw: str = ""
    format: Format = "anthropic"
    content_form: ContentForm = "blocks"
    extra: str = ""
    native_role: str = ""
    bound: BoundSpec | None = None
    summarizes: tuple[int, int] | None = None
    chars: int = field(init=False, compare=False, repr=False)
    marked: bool = field(init=False, compare=False, repr=False)
    longest_result: int = field(init=False, compare=False, repr=False)
    call_ids: tuple[str, ...] = field(init=False, compare=False, repr=False)
    result_ids: tuple[str, ...] = field(init=False, compare=False, repr=False)
    is_tool_result_carrier: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Derived once here so the O(n) passes (rounds, cuts, planning) only read attributes.
        chars = 0
        marked = '"cache_control"' in self.extra
        longest = 0
        calls: list[str] = []
        results: list[str] = []
        for block in self.blocks:
            chars += block.chars
            if _block_marked(block):
                marked = True
            if isinstance(block, ToolResult):
                longest = max(longest, block.text_chars)
                results.append(block.call_id)
            elif isinstance(block, ToolCall):
                calls.append(block.id)
        carrier = self.role == "tool" or (
            self.role == "user" and bool(self.blocks) and isinstance(self.blocks[0], ToolResult)
        )
        object.__setattr__(self, "chars", chars)
        object.__setattr__(self, "marked", marked)
        object.__setattr__(self, "longest_result", longest)
        object.__setattr__(self, "call_ids", tuple(calls))
        object.__setattr__(self, "result_ids", tuple(results))
        object.__setattr__(self, "is_tool_result_carrier", carrier)

    @property
    def text(self) -> str:
        """The message's own text blocks joined by newlines (tool results excluded)."""
        return "\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.blocks if isinstance(b, ToolCall))

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple(b for b in self.blocks if isinstance(b, ToolResult))


def text_message(text: str, *, role: Role, seq: int, format: Format) -> Message:
    """A message of bare-string content built by the core (summaries)."""
    return Message(
        role=role, blocks=(TextBlock(text),), seq=seq, format=format, content_form="text"
    )


# --------------------------------------------------------------------------------------------
# Parsing


def _decode(item: RawMessage, index: int) -> tuple[dict[str, Any], str]:
    if isinstance(item, str):
        try:
            obj = json.loads(item)
        except json.JSONDecodeError as exc:
            raise TranscriptError(
                f"not valid JSON ({exc.msg} at char {exc.pos})", index=index
            ) from exc
        if not isinstance(obj, dict):
            raise TranscriptError("a message must be a JSON object", index=index)
        return obj, item
    if not isinstance(item, Mapping):
        raise TranscriptError(
            f"a message must be an object, got {type(item).__name__}", index=index
        )
    obj = dict(item)
    try:
        raw = dump_json(obj)
    except (TypeError, ValueError) as exc:
        raise TranscriptError(f"message is not JSON-serialisable ({exc})", index=index) from exc
    return obj, raw


def _pop_cache_control(obj: dict[str, Any]) -> str:
    value = obj.pop("cache_control", _MISSING)
    return "" if value is _MISSING else dump_json(value)


def _native_if_extra(obj: dict[str, Any], known: frozenset[str]) -> str:
    return dump_json(obj) if any(k not in known for k in obj) else ""


def _malformed(problem: str, index: int, seq: int | None, role: str = "") -> TranscriptError:
    return TranscriptError(f"malformed block: {problem}", index=index, seq=seq, role=role)


_TEXT_KEYS = frozenset({"type", "text"})
_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input"})
_TOOL_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error"})


def _parse_text_or_opaque(
    raw_block: Any, where: str, index: int, seq: int | None, role: str
) -> ContentBlock:
    if not isinstance(raw_block, Mapping) or not isinstance(raw_block.get("type"), str):
        raise _malformed(f"{where} is not an object with a string 'type'", index, seq, role)
    obj = dict(raw_block)
    cache_control = _pop_cache_control(obj)
    if obj["type"] == "text":
        text = obj.get("text")
        if not isinstance(text, str):
            raise _malformed(f"{where}: text block without string 'text'", index, seq, role)
        return TextBlock(text, cache_control, _native_if_extra(obj, _TEXT_KEYS))
    return OpaqueBlock(obj["type"], dump_json(obj), cache_control)


def _parse_anthropic_block(raw_block: Any, pos: int, index: int, seq: int, role: str) -> Block:
    where = f"block {pos}"
    if not isinstance(raw_block, Mapping) or not isinstance(raw_block.get("type"), str):
        raise _malformed(f"{where} is not an object with a string 'type'", index, seq, role)
    kind = raw_block["type"]
    if kind in ("thinking", "redacted_thinking"):
        # Opaque on purpose: the signature covers the block exactly as the provider sent it.
        return ThinkingBlock(kind, dump_json(dict(raw_block)))
    if kind == "tool_use":
        obj = dict(raw_block)
        cache_control = _pop_cache_control(obj)
        call_id, name, tool_input = obj.get("id"), obj.get("name"), obj.get("input", _MISSING)
        if not isinstance(call_id, str) or not call_id:
            raise _malformed(f"{where}: tool_use without a string 'id'", index, seq, role)
        if not isinstance(name, str):
            raise _malformed(f"{where}: tool_use without a string 'name'", index, seq, role)
        if not isinstance(tool_input, Mapping):
            raise _malformed(f"{where}: tool_use 'input' must be an object", index, seq, role)
        return ToolCall(
            call_id,
            name,
            dump_json(tool_input),
            cache_control,
            _native_if_extra(obj, _TOOL_USE_KEYS),
        )
    if kind == "tool_result":
        obj = dict(raw_block)
        cache_control = _pop_cache_control(obj)
        call_id = obj.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise _malformed(
                f"{where}: tool_result without a string 'tool_use_id'", index, seq, role
            )
        is_error = obj.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            raise _malformed(f"{where}: tool_result 'is_error' must be a boolean", index, seq, role)
        content = _parse_result_content(obj.get("content", _MISSING), where, index, seq, role)
        return ToolResult(
            call_id, content, is_error, cache_control, _native_if_extra(obj, _TOOL_RESULT_KEYS)
        )
    return _parse_text_or_opaque(raw_block, where, index, seq, role)


def _parse_result_content(
    content: Any, where: str, index: int, seq: int | None, role: str
) -> str | tuple[ContentBlock, ...] | None:
    if content is _MISSING or content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return tuple(
            _parse_text_or_opaque(b, f"{where} content part {i}", index, seq, role)
            for i, b in enumerate(content)
        )
    raise _malformed(f"{where}: result content must be a string or a list", index, seq, role)


def _extra(obj: dict[str, Any], known: frozenset[str]) -> str:
    rest = {k: v for k, v in obj.items() if k not in known}
    return dump_json(rest) if rest else ""


_ANTHROPIC_MESSAGE_KEYS = frozenset({"role", "content"})


def parse_message(
    item: RawMessage, *, format: Format, seq: int, bound: BoundSpec | None = None, index: int = 0
) -> Message:
    """Parse one message with no cross-message checks (rehydrating a stored log row).

    For the Anthropic format, `{"role": "system", "content": <system>}` is how the system prompt
    is carried as a message. Raises TranscriptError for an unknown role or a malformed block.
    """
    if format == "anthropic":
        return _parse_anthropic_message(item, seq=seq, index=index, bound=bound, allow_system=True)
    if format == "openai":
        return _parse_openai_message(item, seq=seq, index=index, bound=bound)
    raise ValueError(f"unknown format {format!r}")


def _parse_anthropic_message(
    item: RawMessage, *, seq: int, index: int, bound: BoundSpec | None, allow_system: bool
) -> Message:
    obj, raw = _decode(item, index)
    raw_role = obj.get("role")
    allowed = ("user", "assistant", "system") if allow_system else ("user", "assistant")
    if raw_role not in allowed:
        hint = " (pass the system prompt as system=)" if raw_role == "system" else ""
        raise TranscriptError(f"unknown role {raw_role!r}{hint}", index=index, seq=seq)
    role = cast(Role, raw_role)
    content = obj.get("content", _MISSING)
    form: ContentForm
    if isinstance(content, str):
        blocks: tuple[Block, ...] = (TextBlock(content),)
        form = "text"
    elif isinstance(content, list):
        blocks = tuple(
            _parse_anthropic_block(b, i, index, seq, role) for i, b in enumerate(content)
        )
        form = "blocks"
    else:
        raise _malformed("content must be a string or a list of blocks", index, seq, role)
    return Message(
        role=role,
        blocks=blocks,
        seq=seq,
        raw=raw,
        format="anthropic",
        content_form=form,
        extra=_extra(obj, _ANTHROPIC_MESSAGE_KEYS),
        bound=bound,
    )


_OPENAI_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id"})
_OPENAI_CALL_KEYS = frozenset({"id", "type", "function"})
_OPENAI_FUNCTION_KEYS = frozenset({"name", "arguments"})
_OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def _parse_openai_call(raw_call: Any, pos: int, index: int, seq: int) -> ToolCall:
    where = f"tool_calls[{pos}]"
    if not isinstance(raw_call, Mapping):
        raise _malformed(f"{where} is not an object", index, seq, "assistant")
    obj = dict(raw_call)
    cache_control = _pop_cache_control(obj)
    call_id, fn = obj.get("id"), obj.get("function")
    if not isinstance(call_id, str) or not call_id:
        raise _malformed(f"{where} without a string 'id'", index, seq, "assistant")
    kind = obj.get("type", "function")
    if kind != "function" or not isinstance(fn, Mapping):
        if isinstance(kind, str) and isinstance(obj.get(kind), Mapping):
            # A non-function tool call (e.g. "custom"): paired by id like any other, kept opaque.
            inner = obj[kind]
            name = inner.get("name", "")
            args = inner.get("input", inner.get("arguments", ""))
            return ToolCall(
                call_id,
                name if isinstance(name, str) else "",
                args if isinstance(args, str) else dump_json(args),
                cache_control,
                dump_json(obj),
            )
        raise _malformed(f"{where} without a 'function' object", index, seq, "assistant")
    name, arguments = fn.get("name"), fn.get("arguments", "")
    if not isinstance(name, str):
        raise _malformed(f"{where}.function without a string 'name'", index, seq, "assistant")
    if not isinstance(arguments, str):
        raise _malformed(f"{where}.function 'arguments' must be a string", index, seq, "assistant")
    plain = all(k in _OPENAI_CALL_KEYS for k in obj) and all(k in _OPENAI_FUNCTION_KEYS for k in fn)
    return ToolCall(
        call_id, name, arguments, cache_control, "" if plain and "type" in obj else dump_json(obj)
    )


def _parse_openai_message(
    item: RawMessage, *, seq: int, index: int, bound: BoundSpec | None
) -> Message:
    obj, raw = _decode(item, index)
    native_role = obj.get("role")
    role = _OPENAI_ROLES.get(native_role) if isinstance(native_role, str) else None
    if role is None:
        raise TranscriptError(f"unknown role {native_role!r}", index=index, seq=seq)
    content = obj.get("content", _MISSING)
    form: ContentForm
    blocks: list[Block] = []
    if content is _MISSING:
        form = "absent"
    elif content is None:
        form = "null"
    elif isinstance(content, str):
        form = "text"
    elif isinstance(content, list):
        form = "blocks"
    else:
        raise _malformed("content must be a string, a list of parts or null", index, seq, role)
    if role == "tool":
        call_id = obj.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _malformed("tool message without a string 'tool_call_id'", index, seq, role)
        result_content = _parse_result_content(content, "content", index, seq, role)
        blocks.append(ToolResult(call_id, result_content))
    else:
        if "tool_call_id" in obj:
            raise _malformed(f"'tool_call_id' on a {native_role} message", index, seq, role)
        if form == "text":
            blocks.append(TextBlock(content))
        elif form == "blocks":
            blocks.extend(
                _parse_text_or_opaque(p, f"content part {i}", index, seq, role)
                for i, p in enumerate(content)
            )
    calls = obj.get("tool_calls", _MISSING)
    known = _OPENAI_MESSAGE_KEYS
    if calls is not _MISSING and calls is not None and calls != []:
        if role != "assistant":
            raise _malformed(f"'tool_calls' on a {native_role} message", index, seq, role)
        if not isinstance(calls, list):
            raise _malformed("'tool_calls' must be a list", index, seq, role)
        blocks.extend(_parse_openai_call(c, i, index, seq) for i, c in enumerate(calls))
    else:
        # An explicit empty or null `tool_calls` is not a call; keep it opaque for the round trip.
        known = known - {"tool_calls"}
    return Message(
        role=cast(Role, role),
        blocks=tuple(blocks),
        seq=seq,
        raw=raw,
        format="openai",
        content_form=form,
        extra=_extra(obj, known),
        native_role="" if native_role == role else str(native_role),
        bound=bound,
    )


def _first_seq(first_seq: int | None, preceding: Sequence[Message]) -> int:
    if first_seq is not None:
        return first_seq
    return preceding[-1].seq + 1 if preceding else 0


def _validated(batch: list[Message], preceding: Sequence[Message]) -> list[Message]:
    if preceding:
        combined = [*preceding, *batch]
        try:
            validate_transcript(combined, start=len(preceding))
        except TranscriptError as exc:
            raise TranscriptError(
                exc.problem, index=exc.index - len(preceding), seq=exc.seq, role=exc.role
            ) from exc
    else:
        validate_transcript(batch)
    return batch


def parse_anthropic(
    messages: Sequence[RawMessage],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    first_seq: int | None = None,
    preceding: Sequence[Message] = (),
    bound: BoundSpec | None = None,
) -> list[Message]:
    """Parse an Anthropic Messages transcript (or a batch appended to `preceding`).

    Each item is a decoded message object or its JSON text; given as text, `raw` keeps it byte
    for byte. `system` (the request's `system` value, string or text blocks) becomes a leading
    message of role system. Sequence numbers start at `first_seq` (default: 0, or one past the
    last of `preceding`). `bound` records the write-time cap in force (D3).

    The batch is validated as the continuation of `preceding` (O(len(preceding) + len(batch))):
    TranscriptError names the offending message (its index in `messages`, the system message
    being index -1) for a result without its call, a duplicate call id, an unknown role or a
    malformed block. A trailing call without its result is valid (pending).
    """
    seq = _first_seq(first_seq, preceding)
    out: list[Message] = []
    if system is not None:
        if not isinstance(system, str | list | tuple):
            raise _malformed("system must be a string or a list of text blocks", -1, seq, "system")
        system_value = system if isinstance(system, str) else list(system)
        out.append(
            _parse_anthropic_message(
                {"role": "system", "content": system_value},
                seq=seq,
                index=-1,
                bound=bound,
                allow_system=True,
            )
        )
        seq += 1
    for index, item in enumerate(messages):
        out.append(
            _parse_anthropic_message(
                item, seq=seq + index, index=index, bound=bound, allow_system=False
            )
        )
    if system is not None and preceding:
        raise TranscriptError(
            "a system prompt can only open a transcript", index=-1, seq=out[0].seq, role="system"
        )
    try:
        return _validated(out, preceding)
    except TranscriptError as exc:
        if system is None:
            raise
        raise TranscriptError(exc.problem, index=exc.index - 1, seq=exc.seq, role=exc.role) from exc


def parse_openai(
    messages: Sequence[RawMessage],
    *,
    first_seq: int | None = None,
    preceding: Sequence[Message] = (),
    bound: BoundSpec | None = None,
) -> list[Message]:
    """Parse an OpenAI Chat Completions transcript (or a batch appended to `preceding`).

    Same contract as `parse_anthropic`; system (and developer) messages are ordinary messages.
    Trailing tool calls whose results have not all arrived yet are valid (pending).
    """
    seq = _first_seq(first_seq, preceding)
    out = [
        _parse_openai_message(item, seq=seq + index, index=index, bound=bound)
        for index, item in enumerate(messages)
    ]
    return _validated(out, preceding)


# --------------------------------------------------------------------------------------------
# Validation


def validate_transcript(messages: Sequence[Message], *, start: int = 0) -> None:
    """Check pairing and ordering rules over `messages` in one O(n) pass.

    Messages before `start` are trusted (already validated); they only feed the state (call ids
    seen, calls still pending). Raises TranscriptError at the first violation at or after `start`.
    Rules (both formats): one format per transcript; seq strictly increasing; known roles; call
    ids unique; a result answers a call of the assistant message it follows; calls appear only in
    assistant messages, results only where the format puts them. Anthropic: system only first;
    all results of an assistant's calls in the one next user message, before any other block.
    OpenAI: every call answered by tool messages before the next non-tool message. A trailing
    call without its result is pending, which is valid.
    """
    if not messages:
        return
    fmt = messages[0].format
    seen_calls: dict[str, int] = {}
    pending: dict[str, int] = {}  # call id -> seq of the message that made the call
    open_calls: set[str] = set()
    previous_seq: int | None = None
    anthropic = fmt == "anthropic"
    past_system = False

    for index, message in enumerate(messages):
        check = index >= start
        seq, role = message.seq, message.role

        def fail(problem: str, index: int = index, seq: int = seq, role: str = role) -> NoReturn:
            raise TranscriptError(problem, index=index, seq=seq, role=role)

        if check:
            if message.format != fmt:
                fail(f"format {message.format} in a {fmt} transcript")
            if role not in ROLES:
                fail(f"unknown role {role!r}")
            if previous_seq is not None and seq <= previous_seq:
                fail(f"seq {seq} does not follow seq {previous_seq}")
        previous_seq = seq

        if anthropic:
            if role == "system":
                if check and past_system:
                    fail("a system message after the conversation started")
                continue
            past_system = True
            if check and role == "tool":
                fail("unknown role 'tool' (Anthropic results go in a user message)")
            if pending:
                if check and role != "user":
                    first = next(iter(pending))
                    fail(
                        f"tool call {first!r} (seq {pending[first]}) has no result in the next message"
                    )
                in_results = True
                for pos, block in enumerate(message.blocks):
                    if isinstance(block, ToolResult):
                        if check and not in_results:
                            fail(
                                f"tool result for {block.call_id!r} at block {pos} follows other content; results come first"
                            )
                        if block.call_id in pending:
                            del pending[block.call_id]
                        elif check:
                            fail(_orphan(block.call_id, seen_calls))
                    else:
                        in_results = False
                if check and pending:
                    first = next(iter(pending))
                    fail(
                        f"tool call {first!r} (seq {pending[first]}) has no result in this message"
                    )
                pending = {}
            elif check:
                for block in message.blocks:
                    if isinstance(block, ToolResult):
                        fail(_orphan(block.call_id, seen_calls))
            for block in message.blocks:
                if isinstance(block, ToolCall):
                    if check and role != "assistant":
                        fail(f"tool call {block.id!r} in a {role} message")
                    if check and block.id in seen_calls:
                        fail(
                            f"duplicate tool call id {block.id!r} (first at seq {seen_calls[block.id]})"
                        )
                    seen_calls[block.id] = seq
                    pending[block.id] = seq
                elif check and isinstance(block, ToolResult) and role != "user":
                    fail(f"tool result in a {role} message")
            continue

        # OpenAI
        if role == "tool":
            results = message.tool_results
            if check and (len(results) != 1 or len(message.blocks) != 1):
                fail("a tool message holds exactly one result")
            call_id = results[0].call_id if results else ""
            if call_id in open_calls:
                open_calls.discard(call_id)
                pending.pop(call_id, None)
            elif check:
                fail(_orphan(call_id, seen_calls))
            continue
        if check and pending:
            first = next(iter(pending))
            fail(f"tool call {first!r} (seq {pending[first]}) has no result before this message")
        pending = {}
        open_calls = set()
        for block in message.blocks:
            if isinstance(block, ToolCall):
                if check and role != "assistant":
                    fail(f"tool call {block.id!r} in a {role} message")
                if check and block.id in seen_calls:
                    fail(
                        f"duplicate tool call id {block.id!r} (first at seq {seen_calls[block.id]})"
                    )
                seen_calls[block.id] = seq
                pending[block.id] = seq
                open_calls.add(block.id)
            elif check and isinstance(block, ToolResult):
                fail(f"tool result in a {role} message")


def _orphan(call_id: str, seen_calls: Mapping[str, int]) -> str:
    if call_id in seen_calls:
        return (
            f"result for tool call {call_id!r} (seq {seen_calls[call_id]}) is a duplicate or does "
            "not follow its call"
        )
    return f"result without its call: no tool call {call_id!r} precedes it"


def pending_call_ids(messages: Sequence[Message]) -> tuple[str, ...]:
    """Ids of the trailing assistant's calls that have no result yet (the tool loop in progress)."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message.role == "assistant":
            return tuple(c.id for c in message.tool_calls if c.id not in answered)
        if message.is_tool_result_carrier:
            answered.update(r.call_id for r in message.tool_results)
        else:
            return ()
    return ()


# --------------------------------------------------------------------------------------------
# Rendering in the message's own format


def _cc(obj: dict[str, Any], cache_control: str) -> dict[str, Any]:
    if cache_control:
        obj["cache_control"] = json.loads(cache_control)
    return obj


def _render_content_block(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        if block.native:
            obj = json.loads(block.native)
            obj["text"] = block.text
            return _cc(obj, block.cache_control)
        return _cc({"type": "text", "text": block.text}, block.cache_control)
    return _cc(json.loads(block.native), block.cache_control)


def _render_result_content(content: str | tuple[ContentBlock, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_render_content_block(b) for b in content]


def _render_anthropic_block(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock | OpaqueBlock):
        return _render_content_block(block)
    if isinstance(block, ThinkingBlock):
        return dict(json.loads(block.native))
    if isinstance(block, ToolCall):
        if block.native:
            obj = json.loads(block.native)
        else:
            obj = {"type": "tool_use", "id": block.id, "name": block.name}
        obj["input"] = json.loads(block.arguments)
        return _cc(obj, block.cache_control)
    obj = json.loads(block.native) if block.native else {"type": "tool_result"}
    obj["tool_use_id"] = block.call_id
    obj.pop("content", None)
    if block.content is not None:
        obj["content"] = _render_result_content(block.content)
    obj.pop("is_error", None)
    if block.is_error is not None:
        obj["is_error"] = block.is_error
    return _cc(obj, block.cache_control)


def _anthropic_content(message: Message) -> str | list[dict[str, Any]]:
    blocks = message.blocks
    if (
        message.content_form == "text"
        and len(blocks) == 1
        and isinstance(blocks[0], TextBlock)
        and not blocks[0].cache_control
        and not blocks[0].native
    ):
        return blocks[0].text
    return [_render_anthropic_block(b) for b in blocks]


def _render_anthropic(message: Message) -> dict[str, Any]:
    obj: dict[str, Any] = {"role": message.role, "content": _anthropic_content(message)}
    if message.extra:
        obj.update(json.loads(message.extra))
    return obj


def _render_openai_call(block: ToolCall) -> dict[str, Any]:
    if block.native:
        return _cc(json.loads(block.native), block.cache_control)
    obj = {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": block.arguments},
    }
    return _cc(obj, block.cache_control)


def _render_openai(message: Message) -> dict[str, Any]:
    obj: dict[str, Any] = {"role": message.native_role or message.role}
    if message.role == "tool":
        result = message.blocks[0]
        assert isinstance(result, ToolResult)
        if result.content is not None:
            obj["content"] = _render_result_content(result.content)
        elif message.content_form == "null":
            obj["content"] = None
        obj["tool_call_id"] = result.call_id
    else:
        parts = [b for b in message.blocks if isinstance(b, TextBlock | OpaqueBlock)]
        calls = [b for b in message.blocks if isinstance(b, ToolCall)]
        form = message.content_form
        if (
            form == "text"
            and len(parts) == 1
            and isinstance(parts[0], TextBlock)
            and not parts[0].native
            and not parts[0].cache_control
        ):
            obj["content"] = parts[0].text
        elif parts or form in ("blocks", "text"):
            obj["content"] = [_render_content_block(p) for p in parts]
        elif form == "null":
            obj["content"] = None
        if calls:
            obj["tool_calls"] = [_render_openai_call(c) for c in calls]
    if message.extra:
        obj.update(json.loads(message.extra))
    return obj


# --------------------------------------------------------------------------------------------
# Converters (same format: lossless; across formats: only when lossless)


def to_anthropic(
    messages: Iterable[Message],
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Render as an Anthropic request: `(system, messages)`; system is None when there is none.

    Anthropic-format messages render losslessly (the round trip of `parse_anthropic` gives equal
    JSON values). OpenAI-format messages are converted — tool messages and an immediately
    following user message merge into one user message, results first — and ConversionError is
    raised when that would lose information (see `to_openai` for the list, plus: system messages
    other than one leading one; a `developer` role).
    """
    system: str | list[dict[str, Any]] | None = None
    out: list[dict[str, Any]] = []
    merging: dict[str, Any] | None = None  # the user message collecting OpenAI tool results
    seen_other = False
    for index, message in enumerate(messages):
        if message.role == "system":
            if seen_other or system is not None:
                raise ConversionError(
                    "Anthropic has one system prompt, before the conversation", index=index
                )
            if message.format == "openai":
                _check_openai_portable(message, index)
            system = _anthropic_content(message)
            continue
        seen_other = True
        if message.format == "anthropic":
            merging = None
            out.append(_render_anthropic(message))
            continue
        _check_openai_portable(message, index)
        if message.role == "tool":
            result = message.blocks[0]
            assert isinstance(result, ToolResult)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
            if result.content is not None:
                block["content"] = _portable_content(result.content, index)
            if merging is None:
                merging = {"role": "user", "content": []}
                out.append(merging)
            merging["content"].append(block)
            continue
        content = _openai_to_anthropic_content(message, index)
        if message.role == "user" and merging is not None:
            merging["content"].extend(
                [{"type": "text", "text": content}] if isinstance(content, str) else content
            )
            merging = None
            continue
        merging = None
        out.append({"role": message.role, "content": content})
    return system, out


def _check_openai_portable(message: Message, index: int) -> None:
    if message.extra:
        keys = ", ".join(sorted(json.loads(message.extra)))
        raise ConversionError(f"fields with no Anthropic equivalent: {keys}", index=index)
    if message.native_role:
        raise ConversionError(
            f"role {message.native_role!r} has no Anthropic equivalent", index=index
        )
    for block in message.blocks:
        if isinstance(block, OpaqueBlock):
            raise ConversionError(
                f"{block.type!r} part has no lossless Anthropic form", index=index
            )
        if isinstance(block, TextBlock | ToolCall) and block.native:
            raise ConversionError("a part with fields the converter does not model", index=index)
        if isinstance(block, ToolCall):
            try:
                arguments = json.loads(block.arguments)
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict) or dump_json(arguments) != block.arguments:
                raise ConversionError(
                    f"arguments of call {block.id!r} are not a compact JSON object", index=index
                )


def _portable_content(
    content: str | tuple[ContentBlock, ...], index: int
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, TextBlock) or block.native:
            raise ConversionError("a non-text result part has no lossless conversion", index=index)
        parts.append({"type": "text", "text": block.text})
    return parts


def _openai_to_anthropic_content(message: Message, index: int) -> str | list[dict[str, Any]]:
    texts = [b for b in message.blocks if isinstance(b, TextBlock)]
    calls = [b for b in message.blocks if isinstance(b, ToolCall)]
    if message.content_form == "text" and not calls:
        return texts[0].text
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": t.text}
        for t in texts
        if t.text or message.content_form == "blocks"
    ]
    if any(not t.text for t in texts) and message.content_form == "blocks":
        raise ConversionError("an empty text part has no Anthropic form", index=index)
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
        for c in calls
    )
    return blocks


def _check_anthropic_portable(message: Message, index: int) -> None:
    if message.extra:
        keys = ", ".join(sorted(json.loads(message.extra)))
        raise ConversionError(f"fields with no OpenAI equivalent: {keys}", index=index)
    seen_call = False
    for block in message.blocks:
        if isinstance(block, ThinkingBlock):
            raise ConversionError(
                f"{block.kind} block (signed by the provider) has no OpenAI form", index=index
            )
        if isinstance(block, OpaqueBlock):
            raise ConversionError(f"{block.type!r} block has no lossless OpenAI form", index=index)
        if isinstance(block, TextBlock | ToolCall | ToolResult) and block.native:
            raise ConversionError("a block with fields the converter does not model", index=index)
        if isinstance(block, ToolResult):
            if block.is_error:
                raise ConversionError(
                    f"error flag of result {block.call_id!r} has no OpenAI form", index=index
                )
            if block.content is None:
                raise ConversionError(
                    f"result {block.call_id!r} without content has no OpenAI form", index=index
                )
        if isinstance(block, ToolCall):
            seen_call = True
        elif seen_call and isinstance(block, TextBlock):
            raise ConversionError("text after a tool call has no OpenAI order", index=index)


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Render as an OpenAI Chat Completions `messages` list.

    OpenAI-format messages render losslessly. Anthropic-format messages are converted (system
    prompt → a leading system message; tool results → tool messages, then the rest of that user
    message as a user message) and ConversionError is raised when that would lose information:
    thinking blocks (their signatures have no OpenAI form), unknown blocks or fields, an error
    flag, a result without content, text after a tool call. `cache_control` markers are
    transport, not content, and do not cross formats.
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.format == "openai":
            out.append(_render_openai(message))
            continue
        _check_anthropic_portable(message, index)
        texts = [b for b in message.blocks if isinstance(b, TextBlock)]
        if message.role == "system":
            out.append({"role": "system", "content": _anthropic_texts(message, texts)})
            continue
        if message.role == "user":
            results = [b for b in message.blocks if isinstance(b, ToolResult)]
            for result in results:
                assert result.content is not None
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": result.call_id,
                        "content": _portable_content(result.content, index),
                    }
                )
            if texts or not results:
                out.append({"role": "user", "content": _anthropic_texts(message, texts)})
            continue
        calls = [b for b in message.blocks if isinstance(b, ToolCall)]
        obj: dict[str, Any] = {"role": "assistant"}
        obj["content"] = _anthropic_texts(message, texts) if texts else None
        if calls:
            obj["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        out.append(obj)
    return out


def _anthropic_texts(message: Message, texts: list[TextBlock]) -> str | list[dict[str, Any]]:
    if message.content_form == "text" and len(texts) == 1:
        return texts[0].text
    return [{"type": "text", "text": t.text} for t in texts]
