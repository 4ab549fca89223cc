"""Hypothesis strategies: abstract transcripts rendered in the Anthropic and OpenAI formats.

Shapes covered on purpose: empty logs, all-tool transcripts, parallel calls, thinking blocks
with signatures (Anthropic), a pending trailing call (partial results for OpenAI), result sizes
exactly at and one over the cap, unicode and NUL, cache markers everywhere they may appear.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

CAP = 120

_ALPHABET = 'ab \n\x00\u00e9\u6f22\U0001f642"\\{'
_TOOLS = ("read_file", "grep", "run", "search")


@dataclass
class Call:
    id: str
    name: str
    args: dict[str, Any]
    result: str | None
    is_error: bool = False
    as_blocks: bool = False
    marked: bool = False


@dataclass
class Step:
    kind: str  # "prompt" or "round"
    text: str = ""
    thinking: bool = False
    calls: list[Call] = field(default_factory=list)
    trailing_text: str = ""
    marked: bool = False


@dataclass
class Transcript:
    system: str | None
    system_marked: bool
    steps: list[Step]
    pending_answered: int = 0  # OpenAI: results already in for a pending trailing round


short_text = st.text(alphabet=_ALPHABET, min_size=1, max_size=12) | st.text(min_size=1, max_size=8)


@st.composite
def sized_text(draw: st.DrawFn) -> str:
    size = draw(
        st.sampled_from([0, 1, 2, CAP - 1, CAP, CAP + 1, 2 * CAP, 7]) | st.integers(0, 4 * CAP)
    )
    seed = draw(st.text(alphabet=_ALPHABET, min_size=1, max_size=5))
    return (seed * (size // len(seed) + 1))[:size]


@st.composite
def transcripts(draw: st.DrawFn, *, thinking: bool = True) -> Transcript:
    counter = iter(range(10_000))
    system = draw(st.none() | short_text)
    steps: list[Step] = []
    for _ in range(draw(st.integers(0, 9))):
        if draw(st.integers(0, 3)) == 0:
            steps.append(Step("prompt", text=draw(short_text), marked=draw(st.booleans())))
            continue
        calls = [
            Call(
                id=f"call_{next(counter)}",
                name=draw(st.sampled_from(_TOOLS)),
                args={"q": draw(short_text)},
                result=draw(sized_text()),
                is_error=draw(st.integers(0, 4)) == 0,
                as_blocks=draw(st.booleans()),
                marked=draw(st.integers(0, 5)) == 0,
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        steps.append(
            Step(
                "round",
                text=draw(st.just("") | short_text),
                thinking=thinking and draw(st.booleans()),
                calls=calls,
                trailing_text=draw(st.just("") | short_text) if draw(st.booleans()) else "",
            )
        )
    pending_answered = 0
    if steps and steps[-1].kind == "round" and steps[-1].calls and draw(st.booleans()):
        last = steps[-1]
        pending_answered = draw(st.integers(0, len(last.calls) - 1))
        for call in last.calls:
            call.result = None
    return Transcript(system, draw(st.booleans()), steps, pending_answered)


def anthropic(t: Transcript) -> tuple[Any, list[dict[str, Any]]]:
    system: Any = None
    if t.system is not None:
        system = (
            [{"type": "text", "text": t.system, "cache_control": {"type": "ephemeral"}}]
            if t.system_marked
            else t.system
        )
    out: list[dict[str, Any]] = []
    for step in t.steps:
        if step.kind == "prompt":
            content: Any = step.text
            if step.marked:
                content = [
                    {"type": "text", "text": step.text, "cache_control": {"type": "ephemeral"}}
                ]
            out.append({"role": "user", "content": content})
            continue
        blocks: list[dict[str, Any]] = []
        if step.thinking:
            blocks.append(
                {"type": "thinking", "thinking": "think " + step.text, "signature": "c2ln\u0000=="}
            )
        if step.text or not step.calls:
            blocks.append({"type": "text", "text": step.text or "ok"})
        for call in step.calls:
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
            )
        out.append({"role": "assistant", "content": blocks})
        if not step.calls or step.calls[0].result is None:
            continue
        results: list[dict[str, Any]] = []
        for call in step.calls:
            assert call.result is not None
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": [{"type": "text", "text": call.result}]
                if call.as_blocks
                else call.result,
            }
            if call.is_error:
                block["is_error"] = True
            if call.marked:
                block["cache_control"] = {"type": "ephemeral"}
            results.append(block)
        if step.trailing_text:
            results.append({"type": "text", "text": step.trailing_text})
        out.append({"role": "user", "content": results})
    return system, out


def openai(t: Transcript) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if t.system is not None:
        out.append({"role": "system", "content": t.system})
    for index, step in enumerate(t.steps):
        if step.kind == "prompt":
            out.append({"role": "user", "content": step.text})
            continue
        message: dict[str, Any] = {
            "role": "assistant",
            "content": step.text or (None if step.calls else "ok"),
        }
        if step.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.args)},
                }
                for c in step.calls
            ]
        out.append(message)
        pending = index == len(t.steps) - 1 and step.calls and step.calls[0].result is None
        for position, call in enumerate(step.calls):
            if pending and position >= t.pending_answered:
                break
            result = call.result if call.result is not None else f"partial {position}"
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": [{"type": "text", "text": result}] if call.as_blocks else result,
                }
            )
    return out
